"""The prefix cache's eviction policies on seeded traces, with no model: only the block pool runs.

Book: section 7.4 (prefix caching pays when requests share beginnings: a chat's earlier turns, a
shared system prompt; ``inference.serving_rates.prefix_cache_compute_fraction`` prices a hit rate).
Which cached blocks survive when the pool runs short decides that hit rate, and it depends on the
traffic. Three seeded traces:

* ``chat_trace``: users taking turns, each prompt a shared system prompt, that user's whole history
  and a new message; each answer joins the history (its blocks are cached as they fill);
* ``scan_trace``: one hot prompt asked again and again between requests that each read a different
  long document once (a scan that floods the cache with blocks nobody reuses: LRU forgets the hot
  prompt each time, LFU and segmented LRU keep it);
* ``system_prompt_trace``: a few system prompts, popular to different degrees (Zipf), each request
  one of them and a message of its own.

``simulate`` serves a trace one request at a time through the engine's own ``PrefixCache`` and
``BlockPool`` (lookup, reuse, allocate, cache each full block, give everything back), and counts
prompt tokens found in the cache and recomputed; a request's prefill (what stands before its first
token) is the tokens it recomputes. ``compare`` gives one row per policy and trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scalelib.serving.block_pool import BlockPool
from scalelib.serving.eviction import POLICIES
from scalelib.serving.prefix_cache import PrefixCache, block_hashes
from scalelib.validate import positive_int


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: its prompt and the tokens its answer will be (known in advance: no model runs)."""

    prompt: tuple[int, ...]
    answer: tuple[int, ...] = ()


def _tokens(rng: np.random.Generator, n: int, vocab: int) -> tuple[int, ...]:
    return tuple(int(t) for t in rng.integers(0, vocab, n))


def chat_trace(users: int = 6, turns: int = 5, system_tokens: int = 32, message_tokens: int = 12,
               answer_tokens: int = 20, seed: int = 0, vocab: int = 1000) -> list[TraceRequest]:
    """Users taking turns (round robin); each prompt is the system prompt, the user's history and a message."""
    rng = np.random.default_rng(seed)
    system = _tokens(rng, system_tokens, vocab)
    history = [system] * users
    out = []
    for _ in range(turns):
        for u in range(users):
            prompt = history[u] + _tokens(rng, message_tokens, vocab)
            answer = _tokens(rng, answer_tokens, vocab)
            out.append(TraceRequest(prompt, answer))
            history[u] = prompt + answer
    return out


def scan_trace(documents: int = 64, document_tokens: int = 64, hot_tokens: int = 48, hot_every: int = 8,
               seed: int = 0, vocab: int = 1000) -> list[TraceRequest]:
    """A hot prompt (asked twice to begin with, a fresh question each time) after every ``hot_every`` documents read
    once each: enough documents between two hot requests to fill the pool."""
    rng = np.random.default_rng(seed)
    hot = _tokens(rng, hot_tokens, vocab)
    out = [TraceRequest(hot + _tokens(rng, 4, vocab)) for _ in range(2)]
    for d in range(documents):
        out.append(TraceRequest(_tokens(rng, document_tokens, vocab) + _tokens(rng, 4, vocab)))
        if d % hot_every == hot_every - 1:
            out.append(TraceRequest(hot + _tokens(rng, 4, vocab)))
    return out


def system_prompt_trace(requests: int = 120, prompts: int = 8, system_tokens: int = 40, message_tokens: int = 10,
                        zipf: float = 1.2, seed: int = 0, vocab: int = 1000) -> list[TraceRequest]:
    """Each request one of ``prompts`` system prompts (the k-th drawn with weight 1/k**zipf) and its own message."""
    rng = np.random.default_rng(seed)
    systems = [_tokens(rng, system_tokens, vocab) for _ in range(prompts)]
    weights = 1.0 / np.arange(1, prompts + 1) ** zipf
    picks = rng.choice(prompts, size=requests, p=weights / weights.sum())
    return [TraceRequest(systems[int(k)] + _tokens(rng, message_tokens, vocab)) for k in picks]


TRACES: dict[str, Callable[..., list[TraceRequest]]] = {"chat": chat_trace, "scan": scan_trace,
                                                     "system prompts": system_prompt_trace}


@dataclass(frozen=True)
class CacheRun:
    """One policy on one trace: prompt tokens, those found cached, and the prefill each request did."""

    policy: str
    trace: str
    prompt_tokens: int
    hit_tokens: int
    evictions: int
    prefill_tokens: tuple[int, ...]  # per request: the prompt tokens it recomputed (before its first token)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def recomputed_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    @property
    def mean_prefill_tokens(self) -> float:
        """Mean prefill before the first token, in tokens (a step's time is about proportional to it)."""
        return float(np.mean(self.prefill_tokens)) if self.prefill_tokens else 0.0


def simulate(trace: Sequence[TraceRequest], policy: str, num_blocks: int, block_size: int = 8,
             name: str = "") -> CacheRun:
    """Serve ``trace`` one request at a time through a prefix cache of ``num_blocks`` blocks under ``policy``."""
    positive_int("num_blocks", num_blocks)
    positive_int("block_size", block_size)
    pool = BlockPool(num_blocks, block_size)
    cache = PrefixCache(pool, eviction=policy)
    prefill = []
    for i, req in enumerate(trace):
        tokens = req.prompt + req.answer
        need = pool.blocks_for(len(tokens))
        if need > num_blocks:
            raise ValueError(f"request {i} of the trace needs {need} blocks of {block_size} tokens but the pool has "
                             f"{num_blocks}; enlarge the pool or shorten the trace's prompts")
        hashes = block_hashes(tokens, block_size)
        hit = cache.lookup(hashes[:(len(req.prompt) - 1) // block_size])  # at least one prompt token to compute
        cache.acquire(hit, len(req.prompt))
        blocks = list(hit) + cache.allocate(need - len(hit))
        for b, h in zip(blocks, hashes):
            cache.commit(b, h)
        cache.release(blocks)
        pool.check()
        prefill.append(len(req.prompt) - len(hit) * block_size)
    return CacheRun(policy, name, cache.stats.lookup_tokens, cache.stats.hit_tokens, cache.stats.evictions,
                    tuple(prefill))


def compare(num_blocks: int = 48, block_size: int = 8, seed: int = 0,
            policies: Sequence[str] = tuple(POLICIES)) -> list[CacheRun]:
    """Every policy on every trace of ``TRACES`` (seeded), in a pool smaller than their working sets."""
    runs = []
    for name, make in TRACES.items():
        trace = make(seed=seed)
        runs += [simulate(trace, p, num_blocks, block_size, name) for p in policies]
    return runs
