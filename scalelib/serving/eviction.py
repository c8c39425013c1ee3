"""Which cached prefix the pool gives up first: the prefix cache's eviction policy, a plug-in.

Book: section 7.4 (prefix caching keeps the keys and values of prompt beginnings in blocks that
nobody holds; when the pool runs out of empty blocks, one of those must go, and which one decides
the hit rate). A policy sees four events of a cached block and orders the kept (free, cached)
blocks for eviction, first evicted first:

* ``lru``: least recently released first (the engine's default; vLLM's and SGLang's default);
* ``fifo``: first cached first, however often it was reused;
* ``lfu``: fewest reuses first, ties least recently released first (a shared system prompt survives a scan);
* ``slru``: segmented LRU: a block reused while cached is *protected*; unprotected blocks go first, each
  segment least recently released first; protected blocks beyond ``protected_fraction`` of the pool are
  demoted, the least recently released first (a scan through many prefixes cannot flush the hot ones).

The events come from ``PrefixCache``: ``cached`` (a block got its prefix's hash), ``hit`` (a request
reuses it), ``released`` (its last holder gave it back: now it is kept) and ``evicted``. A policy is
state plus an order; it never touches the pool, so the pool's invariants hold under any of them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence


class EvictionPolicy:
    """LRU, and the events every policy records: a tick per release, per caching and per reuse."""

    name = "lru"

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self._clock = itertools.count()
        self.released_at: dict[int, int] = {}
        self.cached_at: dict[int, int] = {}
        self.hits: dict[int, int] = {}

    def cached(self, block: int) -> None:
        self.cached_at[block], self.hits[block] = next(self._clock), 0

    def hit(self, block: int) -> None:
        self.hits[block] = self.hits.get(block, 0) + 1

    def released(self, block: int) -> None:
        self.released_at[block] = next(self._clock)

    def evicted(self, block: int) -> None:
        for table in (self.released_at, self.cached_at, self.hits):
            table.pop(block, None)

    def key(self, block: int) -> tuple[int, ...]:
        return (self.released_at.get(block, -1),)

    def order(self, kept: Sequence[int]) -> list[int]:
        """``kept`` (free cached blocks, least recently released first) in eviction order."""
        return sorted(kept, key=self.key)


class FIFO(EvictionPolicy):
    name = "fifo"

    def key(self, block: int) -> tuple[int, ...]:
        return (self.cached_at.get(block, -1),)


class LFU(EvictionPolicy):
    name = "lfu"

    def key(self, block: int) -> tuple[int, ...]:
        return (self.hits.get(block, 0), self.released_at.get(block, -1))


class SLRU(EvictionPolicy):
    name = "slru"
    protected_fraction = 0.5

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self.protected: dict[int, None] = {}  # by the tick it was protected

    def hit(self, block: int) -> None:
        super().hit(block)
        self.protected.pop(block, None)
        self.protected[block] = None
        cap = max(1, int(self.protected_fraction * self.num_blocks))
        while len(self.protected) > cap:  # demote the protected block least recently released
            oldest = min(self.protected, key=lambda b: self.released_at.get(b, -1))
            del self.protected[oldest]

    def evicted(self, block: int) -> None:
        super().evicted(block)
        self.protected.pop(block, None)

    def key(self, block: int) -> tuple[int, ...]:
        return (block in self.protected, self.released_at.get(block, -1))


POLICIES: dict[str, Callable[[int], EvictionPolicy]] = {p.name: p for p in (EvictionPolicy, FIFO, LFU, SLRU)}


def check_name(name: str) -> str:
    """``name`` if it is one of ``POLICIES``; else a ValueError that lists them."""
    if name not in POLICIES:
        raise ValueError(f"unknown eviction policy {name!r}; choose one of {', '.join(sorted(POLICIES))}")
    return name


def make_policy(name: str, num_blocks: int) -> EvictionPolicy:
    """The eviction policy called ``name`` for a pool of ``num_blocks`` blocks."""
    return POLICIES[check_name(name)](num_blocks)
