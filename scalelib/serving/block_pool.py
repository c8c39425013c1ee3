"""A fixed pool of KV-cache blocks with reference counts.

Book: section 7.4 (paged attention: instead of one buffer of the longest length per sequence,
the cache is cut into fixed-size blocks that sequences take as they grow and give back when they
finish, so memory follows the tokens actually held) and 7.1.6 (the cache is what limits batch).

The pool only counts: block ``b`` is *used* while ``refcount[b] > 0`` (several sequences may
share a block of a common prompt prefix) and *free* otherwise. Free blocks wait in a queue that
says which to reuse first: blocks holding nothing worth keeping go to its front, blocks that
still hold a cached prefix (``release(b, keep=True)``) to its back, so those are reused least
recently released first (the prefix cache's LRU eviction). The arrays with the keys and values
live in ``paged.KVPool``; a block id indexes them.

Invariants, checked by ``check``: used + free == num_blocks, every refcount >= 0, and a block is
in the free queue exactly when its refcount is 0.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from scalelib.validate import positive_int


class OutOfBlocks(RuntimeError):
    """More blocks were asked for than are free."""


class BlockPool:
    """``num_blocks`` blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self.refcount = [0] * self.num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front is reused first

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def free_order(self) -> list[int]:
        """Free blocks in the order ``allocate`` hands them out."""
        return list(self._free)

    def is_free(self, block: int) -> bool:
        return block in self._free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` token slots."""
        return math.ceil(tokens / self.block_size)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks (refcount 1 each) from the front of the free queue."""
        if n > len(self._free):
            raise OutOfBlocks(f"asked for {n} blocks with {len(self._free)} of {self.num_blocks} free")
        out = [self._free.popitem(last=False)[0] for _ in range(n)]
        for b in out:
            self.refcount[b] = 1
        return out

    def share(self, block: int) -> None:
        """One more holder of ``block``; a free block (a cached prefix) is taken back out of the queue."""
        self._check_id(block)
        if self.refcount[block] == 0:
            del self._free[block]
        self.refcount[block] += 1

    def release(self, block: int, keep: bool = False) -> None:
        """One holder fewer; at zero the block is free: at the back of the queue if ``keep``, else at the front."""
        self._check_id(block)
        if self.refcount[block] <= 0:
            raise ValueError(f"block {block} is already free; releasing it twice would corrupt the pool")
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self._free[block] = None
            if not keep:
                self._free.move_to_end(block, last=False)

    def check(self) -> None:
        """Raise AssertionError unless the invariants in the module docstring hold."""
        assert self.num_used + self.num_free == self.num_blocks, (self.num_used, self.num_free)
        assert all(r >= 0 for r in self.refcount), "a negative refcount"
        free = set(self._free)
        bad = [b for b in range(self.num_blocks) if (self.refcount[b] == 0) != (b in free)]
        assert not bad, f"blocks {bad[:5]} are free with holders or held yet queued as free"

    def _check_id(self, block: int) -> None:
        if not (isinstance(block, int) and 0 <= block < self.num_blocks):
            raise ValueError(f"block id must be an int in [0, {self.num_blocks}), got {block!r}")
