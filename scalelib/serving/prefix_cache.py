"""Prefix caching: reuse the keys and values of a prompt's beginning that another request computed.

Book: section 7.4 (prefix caching: requests that start alike, such as a shared system prompt or
the earlier turns of a chat, have identical keys and values for that start, so a server that
keeps them computes only the rest; ``inference.serving_rates.prefix_cache_compute_fraction`` prices it).

A full block is named by a hash chained over every token up to its end: block i's hash covers
block i's tokens and block i-1's hash, so equal hashes mean equal whole prefixes (a block's keys
and values depend on every token before it). A new request looks its blocks' hashes up in order
and reuses the longest run that is cached. Cached blocks nobody holds stay in the pool as *kept*
free blocks, handed out only when no empty block is left, in the order of the cache's eviction
policy (``eviction``: LRU by default, or FIFO, LFU, segmented LRU), and are evicted (their hash
forgotten) only then.

``PrefixCache`` is the engine's single door to the ``BlockPool``: with ``enabled=False`` it
allocates and releases without remembering anything.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from scalelib.serving.block_pool import BlockPool
from scalelib.serving.eviction import make_policy


def block_hashes(tokens: Sequence[int], block_size: int, start: int = 0, parent: bytes = b"") -> list[bytes]:
    """Chained hashes of the full blocks of ``tokens`` from block ``start`` (``parent``: block start-1's hash)."""
    out, h = [], parent
    for i in range(start, len(tokens) // block_size):
        chunk = tokens[i * block_size:(i + 1) * block_size]
        h = hashlib.sha256(h + struct.pack(f"<{block_size}q", *chunk)).digest()
        out.append(h)
    return out


@dataclass
class PrefixStats:
    """Prompt tokens looked up and found; ``hit_rate`` is their ratio."""

    lookups: int = 0
    lookup_tokens: int = 0
    hit_tokens: int = 0
    hit_blocks: int = 0
    evictions: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0


class PrefixCache:
    """Hash -> block map over a ``BlockPool`` (see the module docstring)."""

    def __init__(self, pool: BlockPool, enabled: bool = True, eviction: str = "lru") -> None:
        self.pool, self.enabled = pool, enabled
        self.policy = make_policy(eviction, pool.num_blocks)
        self._block_of: dict[bytes, int] = {}
        self._hash_of: dict[int, bytes] = {}
        self.stats = PrefixStats()

    @property
    def num_cached_free(self) -> int:
        """Free blocks still holding a cached prefix (reusable by a hit, evictable by an allocation)."""
        return sum(1 for b in self._hash_of if self.pool.is_free(b))

    def lookup(self, hashes: Sequence[bytes]) -> list[int]:
        """Blocks of the longest cached run at the start of ``hashes`` (nothing is taken)."""
        out = []
        if self.enabled:
            for h in hashes:
                if h not in self._block_of:
                    break
                out.append(self._block_of[h])
        return out

    def acquire(self, blocks: Sequence[int], lookup_tokens: int) -> None:
        """Take a hit: hold ``blocks`` (from ``lookup``) for a request of ``lookup_tokens`` prompt tokens."""
        for b in blocks:
            self.pool.share(b)
            self.policy.hit(b)
        self.stats.lookups += 1
        self.stats.lookup_tokens += lookup_tokens
        self.stats.hit_blocks += len(blocks)
        self.stats.hit_tokens += len(blocks) * self.pool.block_size

    def allocate(self, n: int) -> list[int]:
        """``n`` empty blocks; a cached block handed out is evicted (its hash forgotten)."""
        out = self.pool.allocate(n, evict=self.policy.order)
        for b in out:
            h = self._hash_of.pop(b, None)
            if h is not None:
                del self._block_of[h]
                self.policy.evicted(b)
                self.stats.evictions += 1
        return out

    def commit(self, block: int, h: bytes) -> None:
        """``block`` now holds the full block named ``h``; remember it unless that prefix is cached already."""
        if self.enabled and h not in self._block_of and block not in self._hash_of:
            self._block_of[h], self._hash_of[block] = block, h
            self.policy.cached(block)

    def release(self, blocks: Sequence[int]) -> None:
        """A sequence gives its blocks back, last first, so its tail is evicted before its head."""
        for b in reversed(blocks):
            self.pool.release(b, keep=b in self._hash_of)
            if b in self._hash_of and self.pool.is_free(b):
                self.policy.released(b)
