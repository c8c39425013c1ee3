"""The serving engine: requests in, a step at a time, tokens out.

Book: section 7.4 (an inference engine interleaves prefill and generation for a stream of
requests; continuous batching, paged KV caches and prefix caching are what make it efficient).

``Engine.step`` runs one step: the ``Scheduler`` picks what runs (generate tokens of running
sequences and chunks of prompts, within the token budget), the step's tokens are laid out for
``paged.step_jit`` (which also samples), the new tokens are appended and finished sequences
give their blocks back. Each step leaves a ``StepRecord`` (who ran, how many tokens, prefill or
decode, block-pool occupancy, start and end times) for ``metrics`` and ``plots``.

The policies are fields of ``EngineConfig``: ``schedule`` (what runs in a step: ``scheduler.plan_step``,
first come first served, by default; ``scheduler.shortest_prompt_first`` is the other one here) and
``eviction`` (which cached prefix goes first: ``eviction.POLICIES``). ``Engine.cancel`` drops a
request at any point: its blocks go back to the pool at once and the others go on.

``Engine.add`` checks a request against the model and the pool before touching any state, so a
bad request is refused with a clear error and nothing else is lost: a token id outside the
vocabulary, a prompt plus new tokens longer than the context, a request whose tokens could
never fit in the pool even alone (the guarantee that keeps the scheduler from stalling).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scalelib import model
from scalelib.serving import eviction, paged, sampling
from scalelib.serving.block_pool import BlockPool
from scalelib.serving.prefix_cache import PrefixCache
from scalelib.serving.request import Request
from scalelib.serving.scheduler import SchedulePolicy, Scheduler, SequenceState, plan_step
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int


@dataclass(frozen=True)
class EngineConfig:
    """Sizes of the pool and of a step.

    ``max_chunk`` caps one prompt's tokens per step (None: the budget). The ``min_*_bucket`` fields
    raise the smallest step shapes (tokens, block-table width, sequences per step); a minimum at
    or above a dimension's natural largest bucket pins it.
    ``array_blocks`` > ``num_blocks`` makes the KV arrays larger than the pool hands out, so engines
    with different pool sizes share compiled steps (the tests vary the pool to force preemptions).
    ``schedule`` and ``eviction`` are the two policies (see the module docstring).
    """

    num_blocks: int = 64
    block_size: int = 8
    max_running: int = 8
    token_budget: int = 64
    max_context: int = 256
    max_chunk: int | None = None
    prefix_caching: bool = True
    min_token_bucket: int = 8
    min_width_bucket: int = 1
    min_rows_bucket: int = 1
    check_blocks: bool = False  # check the pool's invariants after every step (tests)
    array_blocks: int | None = None  # blocks the KV arrays hold (None: num_blocks)
    schedule: SchedulePolicy = plan_step  # what runs in a step (scheduler.plan_step's signature)
    eviction: str = "lru"  # which cached prefix the pool reuses first: a key of eviction.POLICIES

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_running", "token_budget", "max_context",
                     "min_token_bucket", "min_width_bucket", "min_rows_bucket"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.max_chunk is not None:
            object.__setattr__(self, "max_chunk", positive_int("max_chunk (or None for no limit)", self.max_chunk))
        eviction.check_name(self.eviction)
        if not callable(self.schedule):
            raise TypeError(f"schedule must be a function like scheduler.plan_step, got {self.schedule!r}")
        if self.array_blocks is not None and not (isinstance(self.array_blocks, int)
                                                  and self.array_blocks >= self.num_blocks):
            raise ValueError(f"array_blocks must be None or an int >= num_blocks={self.num_blocks}, "
                             f"got {self.array_blocks!r}")

    @property
    def max_width(self) -> int:
        """Widest block table: the blocks of a full context (or ``min_width_bucket`` if larger)."""
        return max(self.min_width_bucket, -(-self.max_context // self.block_size))

    @property
    def max_token_bucket(self) -> int:
        return max(self.min_token_bucket, 1 << (self.token_budget - 1).bit_length())

    @property
    def max_rows_bucket(self) -> int:
        return max(self.min_rows_bucket, 1 << (self.max_running - 1).bit_length())

    @property
    def max_programs(self) -> int:
        """Distinct step shapes (compiled programs) a run can need: the product of the bucket counts."""
        def count(smallest: int, largest: int) -> int:
            return len({paged.bucket(n, smallest, largest) for n in range(1, largest + 1)})
        return (count(self.min_token_bucket, self.max_token_bucket) * count(self.min_width_bucket, self.max_width)
                * count(self.min_rows_bucket, self.max_rows_bucket))


@dataclass(frozen=True)
class StepRecord:
    """One step: (seq_id, tokens, 'prefill' or 'decode') per scheduled sequence, and the pool after it."""

    index: int
    start_s: float
    end_s: float
    entries: tuple[tuple[int, int, str], ...]
    preempted: tuple[int, ...]
    padded_tokens: int
    used_blocks: int
    cached_free_blocks: int
    num_blocks: int

    @property
    def tokens(self) -> int:
        return sum(n for _, n, _ in self.entries)


@dataclass(frozen=True)
class Result:
    """A finished request: its new tokens and when they came."""

    seq_id: int
    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    finish_reason: str  # 'stop' or 'length'
    arrival_s: float
    first_token_s: float
    finish_s: float
    preemptions: int
    cached_tokens: int


class Engine:
    """Continuous batching with a paged, prefix-cached KV pool for ``scalelib.model`` weights."""

    def __init__(self, params: model.Params, cfg: TransformerConfig, config: EngineConfig = EngineConfig(),
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.params, self.cfg, self.config, self.clock = paged.unstacked(params), cfg, config, clock
        self.pool = BlockPool(config.num_blocks, config.block_size)
        self.cache = PrefixCache(self.pool, enabled=config.prefix_caching, eviction=config.eviction)
        self.kv = paged.init_pool(cfg, config.array_blocks or config.num_blocks, config.block_size,
                                  params["embed"].dtype)
        self.scheduler = Scheduler(self.cache, token_budget=config.token_budget, max_running=config.max_running,
                                   max_chunk=config.max_chunk, policy=config.schedule)
        self.records: list[StepRecord] = []
        self.finished: dict[int, Result] = {}
        self.cancelled: dict[int, tuple[int, ...]] = {}  # seq_id -> the tokens it had generated
        self.step_shapes: set[tuple[int, int, int]] = set()  # (tokens, table width, rows): a program each
        self._next_id = 0

    def check_request(self, req: Request) -> None:
        """Raise ValueError if ``req`` cannot be served by this engine (the engine is not touched)."""
        if not isinstance(req, Request):
            raise TypeError(f"expected a serving.Request (see serving.request(...)), got {type(req).__name__}")
        v, c = self.cfg.vocab_size, self.config
        bad = [t for t in req.prompt + req.stop if t >= v]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary of {v} tokens (ids 0..{v - 1})")
        total = len(req.prompt) + req.max_tokens
        if len(req.prompt) >= c.max_context or total > c.max_context:
            raise ValueError(f"a {len(req.prompt)}-token prompt plus max_tokens={req.max_tokens} needs {total} "
                             f"positions but the context holds {c.max_context}; shorten the prompt or lower max_tokens")
        need = self.pool.blocks_for(total - 1)  # the last new token is never fed back
        if need > c.num_blocks:
            raise ValueError(f"this request needs {need} blocks of {c.block_size} tokens but the pool has "
                             f"{c.num_blocks}; it could never run: lower max_tokens or enlarge the pool")

    def add(self, req: Request) -> int:
        """Queue ``req``; returns its id (ids count up in arrival order)."""
        self.check_request(req)
        seq = SequenceState(self._next_id, req, self.clock())
        self._next_id += 1
        self.scheduler.add(seq)
        return seq.seq_id

    def cancel(self, seq_id: int) -> bool:
        """Drop request ``seq_id`` wherever it is (waiting or running): its blocks return to the pool now (a prefix
        it cached stays cached), the other requests go on. False if it is unknown or already finished."""
        seq = next((s for s in self.scheduler.waiting + self.scheduler.running if s.seq_id == seq_id), None)
        if seq is None:
            return False
        self.scheduler.cancel(seq)
        self.cancelled[seq_id] = tuple(seq.output)
        if self.config.check_blocks:
            self.pool.check()
        return True

    @property
    def has_work(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running)

    @property
    def compiled_programs(self) -> int:
        """Distinct step shapes run so far (each is compiled once per process)."""
        return len(self.step_shapes)

    def _layout(self, entries: Sequence[tuple[SequenceState, int]]) -> tuple[paged.StepInput, list[SequenceState]]:
        c, bs = self.config, self.config.block_size
        total = sum(n for _, n in entries)
        t = paged.bucket(total, c.min_token_bucket, c.max_token_bucket)
        w = paged.bucket(max(len(s.blocks) for s, _ in entries), c.min_width_bucket, c.max_width)
        r = paged.bucket(len(entries), c.min_rows_bucket, c.max_rows_bucket)
        tokens, positions = np.zeros(t, np.int32), np.zeros(t, np.int32)
        slots, rows = np.full(t, (c.array_blocks or c.num_blocks) * bs, np.int32), np.zeros(t, np.int32)
        tables, out = np.zeros((r, w), np.int32), np.zeros(r, np.int32)
        sampled: list[SequenceState] = []
        at = 0
        for row, (s, n) in enumerate(entries):
            pos = np.arange(s.computed, s.computed + n)
            blocks = np.asarray(s.blocks, np.int32)
            tokens[at:at + n], positions[at:at + n] = s.tokens[s.computed:s.computed + n], pos
            slots[at:at + n], rows[at:at + n] = blocks[pos // bs] * bs + pos % bs, row
            tables[row, :len(blocks)] = blocks
            if s.computed + n == len(s.tokens):  # its last known token: pick the next one
                out[len(sampled)] = at + n - 1
                sampled.append(s)
            at += n
        self.step_shapes.add((t, w, r))
        return paged.StepInput(tokens, positions, slots, rows, tables, out), sampled

    def step(self) -> StepRecord | None:
        """Run one step; None when there is nothing to do."""
        if not self.has_work:
            return None
        start = self.clock()
        sched = self.scheduler.schedule()
        entries = list(sched.entries)
        kinds = [(s.seq_id, n, "decode" if s.output and s.computed + n == len(s.tokens) and n == 1 else "prefill")
                 for s, n in entries]
        padded = 0
        if entries:
            inp, sampled = self._layout(entries)
            padded = len(inp.tokens)
            rp = sampling.row_params([s.request.sampling for s in sampled], [len(s.tokens) for s in sampled],
                                     len(inp.out))
            new, self.kv = paged.step_jit(self.params, self.kv, inp, rp, self.cfg)
            new = np.asarray(new)
            now = self.clock()
            for s, n in entries:
                self.scheduler.computed(s, n)
            for s, tok in zip(sampled, new[:len(sampled)].tolist()):
                self._append(s, int(tok), now)
        end = self.clock()
        if self.config.check_blocks:
            self.pool.check()
        rec = StepRecord(len(self.records), start, end, tuple(kinds), tuple(s.seq_id for s in sched.preempted),
                         padded, self.pool.num_used, self.cache.num_cached_free, self.pool.num_blocks)
        self.records.append(rec)
        return rec

    def _append(self, s: SequenceState, token: int, now: float) -> None:
        s.tokens.append(token)
        if s.first_token_s is None:
            s.first_token_s = now
        req = s.request
        if token in req.stop or len(s.output) >= req.max_tokens:
            s.finish_s, s.finish_reason = now, "stop" if token in req.stop else "length"
            self.scheduler.finish(s)
            self.finished[s.seq_id] = Result(s.seq_id, req.prompt, tuple(s.output), s.finish_reason, s.arrival_s,
                                             s.first_token_s, now, s.preemptions, s.cached_tokens)

    def run(self, requests: Sequence[Request], arrival_steps: Sequence[int] | None = None,
            max_steps: int = 100_000) -> list[Result]:
        """Serve ``requests`` (request i joins before step ``arrival_steps[i]``, default 0) to the end."""
        arrival_steps = [0] * len(requests) if arrival_steps is None else list(arrival_steps)
        if len(arrival_steps) != len(requests):
            raise ValueError(f"{len(requests)} requests but {len(arrival_steps)} arrival steps")
        for r in requests:
            self.check_request(r)  # refuse a bad workload before serving any of it
        order = sorted(range(len(requests)), key=lambda i: arrival_steps[i])
        ids: dict[int, int] = {}
        step, k = 0, 0
        while k < len(order) or self.has_work:
            while k < len(order) and arrival_steps[order[k]] <= step:
                ids[order[k]] = self.add(requests[order[k]])
                k += 1
            self.step()
            step += 1
            if step > max_steps:
                raise RuntimeError(f"not finished after {max_steps} steps")
        return [self.finished[ids[i]] for i in range(len(requests))]

