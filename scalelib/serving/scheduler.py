"""Continuous batching: which sequences run in the next step, and how many of their tokens.

Book: section 7.4 (continuous batching keeps a generate batch full by letting sequences join
and leave between steps, and interleaves chunks of new prompts with the generate tokens so that
prefill never stalls generation for long).

Every step has a token budget. ``plan_step`` fills it, a pure function of a few numbers per
sequence (a ``SeqView``), in this order:

1. Running sequences, oldest first, each asking for all its uncomputed tokens (1 for a sequence
   that is generating; the rest of its prompt, cut to the budget and ``max_chunk``, for one in
   the middle of a chunked prefill). If the free blocks cannot hold those tokens, the newest
   running sequence is **preempted**: it gives its blocks back and returns to the waiting queue,
   to be **recomputed** later from its prompt and the tokens it had generated (its sampling keys
   depend only on seed and position, so it produces the same tokens again). If the sequence
   asking is itself the newest, it is the one preempted.
2. Waiting sequences, oldest first, but only in a step that preempted nothing and while fewer
   than ``max_running`` sequences run: each gets a first chunk. The first one whose chunk does
   not fit the free blocks stops admission (no overtaking, so a long prompt is not starved).

Priority is arrival order everywhere, so the oldest sequence always makes progress: ``engine``
rejects requests that could not fit the pool alone, which guarantees the engine never stalls.
``shortest_prompt_first`` is the same plan with the waiting sequences ordered by the tokens they
still need (ties by arrival): a short request no longer waits behind a long one (time to first
token falls on a mixed trace), at the price of fairness: a long prompt can wait while short ones
keep arriving. Any function with ``plan_step``'s signature is a policy (``EngineConfig.schedule``).

A waiting sequence may start with a prefix-cache hit: ``computed`` tokens already cached in
``blocks`` blocks, ``revive`` of which sit in the free queue and stop being free once it runs.
``Scheduler`` builds the views, calls ``plan_step`` and carries the plan out on the pool.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from scalelib.serving.prefix_cache import PrefixCache, block_hashes
from scalelib.serving.request import Request


@dataclass(frozen=True)
class SeqView:
    """What the planner knows of a sequence (for a waiting one, after its prefix-cache lookup)."""

    seq_id: int
    computed: int  # tokens whose keys and values are cached
    total: int  # tokens known: prompt plus generated so far
    blocks: int  # blocks it holds (waiting: blocks of its prefix hit)
    freeable: int | None = None  # blocks freed if it is preempted (those it alone holds); None: all
    revive: int = 0  # waiting: free blocks its prefix hit takes out of the free queue

    @property
    def freed_if_preempted(self) -> int:
        return self.blocks if self.freeable is None else self.freeable


@dataclass(frozen=True)
class StepPlan:
    """(seq_id, tokens to compute) in batch order, and the sequences preempted."""

    scheduled: tuple[tuple[int, int], ...]
    preempted: tuple[int, ...]


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def plan_step(running: list[SeqView], waiting: list[SeqView], *, token_budget: int, max_running: int,
              free_blocks: int, block_size: int, max_chunk: int | None = None) -> StepPlan:
    """The policy of the module docstring. ``running`` and ``waiting`` are oldest first."""
    chunk = token_budget if max_chunk is None else max_chunk
    budget, free = token_budget, free_blocks
    run, scheduled, preempted = list(running), [], []
    i = 0
    while i < len(run) and budget > 0:
        s = run[i]
        n = min(s.total - s.computed, budget, chunk)
        need = blocks_for(s.computed + n, block_size) - s.blocks
        while need > free and len(run) > i + 1:  # preempt the newest other sequence
            victim = run.pop()
            preempted.append(victim.seq_id)
            free += victim.freed_if_preempted
        if need > free:  # it is the newest left: preempt it
            run.pop()
            preempted.append(s.seq_id)
            break
        scheduled.append((s.seq_id, n))
        budget, free, i = budget - n, free - need, i + 1
    if not preempted:
        running_count = len(run)
        for w in waiting:
            if budget == 0 or running_count >= max_running:
                break
            n = min(w.total - w.computed, budget, chunk)
            need = blocks_for(w.computed + n, block_size) - w.blocks + w.revive
            if need > free:
                break
            scheduled.append((w.seq_id, n))
            budget, free, running_count = budget - n, free - need, running_count + 1
    return StepPlan(tuple(scheduled), tuple(preempted))


SchedulePolicy = Callable[..., StepPlan]  # plan_step's signature: (running, waiting, *, token_budget, ...)


def shortest_prompt_first(running: list[SeqView], waiting: list[SeqView], **sizes: int | None) -> StepPlan:
    """``plan_step`` with the waiting sequences taken by fewest tokens still to compute (ties: oldest first)."""
    return plan_step(running, sorted(waiting, key=lambda w: (w.total - w.computed, w.seq_id)), **sizes)  # type: ignore[arg-type]


@dataclass(eq=False)
class SequenceState:
    """A request being served: its tokens so far, its blocks, and when things happened."""

    seq_id: int
    request: Request
    arrival_s: float
    tokens: list[int] = field(default_factory=list)
    computed: int = 0
    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)  # chained hashes of the full blocks of ``tokens``
    first_token_s: float | None = None
    finish_s: float | None = None
    finish_reason: str | None = None
    preemptions: int = 0
    cached_tokens: int = 0  # prefix-cache hit when first admitted

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = list(self.request.prompt)

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.request.prompt):]

    def update_hashes(self, block_size: int) -> None:
        parent = self.hashes[-1] if self.hashes else b""
        self.hashes += block_hashes(self.tokens, block_size, len(self.hashes), parent)


@dataclass(frozen=True)
class Schedule:
    """A plan carried out: (sequence, tokens) to run, in batch order, and who was preempted."""

    entries: tuple[tuple[SequenceState, int], ...]
    preempted: tuple[SequenceState, ...]


class Scheduler:
    """Waiting and running queues over a ``PrefixCache`` (see the module docstring)."""

    def __init__(self, cache: PrefixCache, *, token_budget: int, max_running: int,
                 max_chunk: int | None = None, policy: SchedulePolicy = plan_step) -> None:
        self.cache, self.pool, self.policy = cache, cache.pool, policy
        self.token_budget, self.max_running, self.max_chunk = token_budget, max_running, max_chunk
        self.waiting: list[SequenceState] = []  # by seq_id: arrival order
        self.running: list[SequenceState] = []

    def add(self, seq: SequenceState) -> None:
        bisect.insort(self.waiting, seq, key=lambda s: s.seq_id)

    def schedule(self) -> Schedule:
        bs = self.pool.block_size
        run_views = [SeqView(s.seq_id, s.computed, len(s.tokens), len(s.blocks),
                             freeable=sum(self.pool.refcount[b] == 1 for b in s.blocks)) for s in self.running]
        candidates = list(self.waiting)  # all of them: a policy may admit any (plan_step stops at max_running)
        hits, wait_views = {}, []
        for s in candidates:
            s.update_hashes(bs)
            hit = self.cache.lookup(s.hashes[:(len(s.tokens) - 1) // bs])  # leave >= 1 token to compute
            hits[s.seq_id] = hit
            wait_views.append(SeqView(s.seq_id, len(hit) * bs, len(s.tokens), len(hit),
                                      revive=sum(self.pool.is_free(b) for b in hit)))
        plan = self.policy(run_views, wait_views, token_budget=self.token_budget, max_running=self.max_running,
                           free_blocks=self.pool.num_free, block_size=bs, max_chunk=self.max_chunk)
        by_id = {s.seq_id: s for s in self.running + candidates}
        preempted = [by_id[i] for i in plan.preempted]
        for s in preempted:
            self.running.remove(s)
            self.cache.release(s.blocks)
            s.blocks, s.computed, s.preemptions = [], 0, s.preemptions + 1
            self.add(s)
        entries = [(by_id[i], n) for i, n in plan.scheduled]
        for s, _ in entries:  # admissions take their hits before anything is allocated
            if s.seq_id in hits:
                self.waiting.remove(s)
                self.cache.acquire(hits[s.seq_id], len(s.tokens))
                s.blocks, s.computed = list(hits[s.seq_id]), len(hits[s.seq_id]) * bs
                if s.preemptions == 0:
                    s.cached_tokens = s.computed
                bisect.insort(self.running, s, key=lambda q: q.seq_id)
        for s, n in entries:
            s.blocks += self.cache.allocate(self.pool.blocks_for(s.computed + n) - len(s.blocks))
        return Schedule(tuple(entries), tuple(preempted))

    def computed(self, seq: SequenceState, n: int) -> None:
        """``n`` more tokens of ``seq`` have their keys and values in the pool: publish its new full blocks."""
        before = seq.computed // self.pool.block_size
        seq.computed += n
        seq.update_hashes(self.pool.block_size)
        for i in range(before, seq.computed // self.pool.block_size):
            self.cache.commit(seq.blocks[i], seq.hashes[i])

    def finish(self, seq: SequenceState) -> None:
        self.running.remove(seq)
        self.cache.release(seq.blocks)
        seq.blocks = []

    def cancel(self, seq: SequenceState) -> None:
        """Drop ``seq`` from whichever queue holds it and give its blocks back (a waiting one holds none)."""
        if seq in self.running:
            self.finish(seq)
        else:
            self.waiting.remove(seq)
