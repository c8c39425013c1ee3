"""A fixed pool of KV-cache blocks with reference counts.

Book: section 7.4 (paged attention: instead of one buffer of the longest length per sequence,
the cache is cut into fixed-size blocks that sequences take as they grow and give back when they
finish, so memory follows the tokens actually held) and 7.1.6 (the cache is what limits batch).

The pool only counts: block ``b`` is *used* while ``refcount[b] > 0`` (several sequences may
share a block of a common prompt prefix) and *free* otherwise. Free blocks are of two kinds:
*empty* ones (holding nothing worth keeping), reused first, the last released first; and *kept*
ones (``release(b, keep=True)``: they still hold a cached prefix), reused only when no empty block
is left, in the order an eviction policy gives (``allocate(n, evict=...)``; by default the least
recently released first, the prefix cache's LRU). The arrays with the keys and values live in
``paged.KVPool``; a block id indexes them.

Invariants, checked by ``check``: used + free == num_blocks, every refcount >= 0, and a block is
free (empty or kept, never both) exactly when its refcount is 0.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence

from scalelib.validate import positive_int


class OutOfBlocks(RuntimeError):
    """More blocks were asked for than are free."""


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.refcount = [0] * self.num_blocks
        self._empty: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front is reused first
        self._kept: OrderedDict[int, None] = OrderedDict()  # free blocks holding a cached prefix, by release

    @property
    def num_free(self) -> int:
        return len(self._empty) + len(self._kept)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def kept(self) -> list[int]:
        """Free blocks that still hold a cached prefix, least recently released first."""
        return list(self._kept)

    @property
    def free_order(self) -> list[int]:
        """Free blocks in the order ``allocate`` hands them out (kept ones in the default, LRU, order)."""
        return list(self._empty) + list(self._kept)

    def is_free(self, block: int) -> bool:
        return block in self._empty or block in self._kept

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` token slots."""
        return math.ceil(tokens / self.block_size)

    def allocate(self, n: int, evict: Callable[[list[int]], Sequence[int]] | None = None) -> list[int]:
        """Take ``n`` free blocks (refcount 1 each): empty ones first, then kept ones in the order ``evict`` gives
        for the kept blocks it is shown (least recently released first), default: that order itself (LRU)."""
        if n > self.num_free:
            raise OutOfBlocks(f"asked for {n} blocks with {self.num_free} of {self.num_blocks} free")
        out = [self._empty.popitem(last=False)[0] for _ in range(min(n, len(self._empty)))]
        if len(out) < n:
            kept = list(self._kept)
            order = list(evict(kept)) if evict is not None else kept
            if sorted(order) != sorted(kept):
                raise ValueError("an eviction order must name every kept block once; got "
                                 f"{order[:8]} for {kept[:8]}")
            for b in order[:n - len(out)]:
                del self._kept[b]
                out.append(b)
        for b in out:
            self.refcount[b] = 1
        return out

    def share(self, block: int) -> None:
        """One more holder of ``block``; a free block (a cached prefix) stops being free."""
        self._check_id(block)
        if self.refcount[block] == 0:
            self._empty.pop(block, None)
            self._kept.pop(block, None)
        self.refcount[block] += 1

    def release(self, block: int, keep: bool = False) -> None:
        """One holder fewer; at zero the block is free: kept (newest last) if ``keep``, else empty (reused first)."""
        self._check_id(block)
        if self.refcount[block] <= 0:
            raise ValueError(f"block {block} is already free; releasing it twice would corrupt the pool")
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            if keep:
                self._kept[block] = None
            else:
                self._empty[block] = None
                self._empty.move_to_end(block, last=False)

    def check(self) -> None:
        """Raise AssertionError unless the invariants in the module docstring hold."""
        assert self.num_used + self.num_free == self.num_blocks, (self.num_used, self.num_free)
        assert all(r >= 0 for r in self.refcount), "a negative refcount"
        assert not set(self._empty) & set(self._kept), "a block both empty and kept"
        free = set(self._empty) | set(self._kept)
        bad = [b for b in range(self.num_blocks) if (self.refcount[b] == 0) != (b in free)]
        assert not bad, f"blocks {bad[:5]} are free with holders or held yet queued as free"

    def _check_id(self, block: int) -> None:
        if not (isinstance(block, int) and 0 <= block < self.num_blocks):
            raise ValueError(f"block id must be an int in [0, {self.num_blocks}), got {block!r}")
