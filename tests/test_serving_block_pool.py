"""scalelib.serving.block_pool: reference counts, the free queue's order, and its invariants under random use."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib.serving.block_pool import BlockPool, OutOfBlocks
from tests.serving_common import no_block_leaks  # noqa: F401


def test_allocate_share_release():
    pool = BlockPool(4, 8)
    a, b = pool.allocate(2)
    assert (a, b) == (0, 1) and pool.num_used == 2 and pool.num_free == 2
    pool.share(a)
    pool.release(a)
    assert pool.refcount[a] == 1 and pool.num_used == 2
    pool.release(a)
    pool.release(b)
    assert pool.num_free == 4 and pool.blocks_for(17) == 3
    pool.check()


def test_free_queue_reuses_plain_blocks_first_and_kept_ones_least_recently_released_first():
    pool = BlockPool(4, 2)
    blocks = pool.allocate(4)
    pool.release(blocks[0], keep=True)
    pool.release(blocks[1], keep=True)
    pool.release(blocks[2])  # nothing to keep: reused first
    pool.release(blocks[3], keep=True)
    assert pool.allocate(4) == [2, 0, 1, 3]


def test_sharing_a_free_block_takes_it_out_of_the_queue():
    pool = BlockPool(2, 2)
    (b, _) = pool.allocate(2)
    pool.release(b, keep=True)
    pool.share(b)  # a prefix-cache hit on a free block
    assert pool.refcount[b] == 1 and not pool.is_free(b)
    with pytest.raises(OutOfBlocks, match="asked for 1 blocks with 0 of 2 free"):
        pool.allocate(1)


def test_misuse_is_refused():
    pool = BlockPool(2, 2)
    with pytest.raises(ValueError, match="block 0 is already free"):
        pool.release(0)
    with pytest.raises(ValueError, match=r"block id must be an int in \[0, 2\)"):
        pool.share(5)
    with pytest.raises(ValueError, match="num_blocks must be a positive int"):
        BlockPool(0, 4)
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        BlockPool(3, True)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "share", "release"]), st.integers(0, 7), st.booleans()),
                max_size=60))
def test_random_use_keeps_counts_right(ops):
    pool, held = BlockPool(6, 4), []  # held: one entry per reference
    for op, n, keep in ops:
        if op == "alloc":
            if n > pool.num_free:
                with pytest.raises(OutOfBlocks):
                    pool.allocate(n)
            else:
                got = pool.allocate(n)
                assert not set(got) & set(held), "a block handed out twice"
                held += got
        elif op == "share" and held:
            held.append(held[n % len(held)])
            pool.share(held[-1])
        elif op == "release" and held:
            pool.release(held.pop(n % len(held)), keep=keep)
        pool.check()
        assert all(pool.refcount[b] == held.count(b) for b in range(6))
    for b in list(held):
        pool.release(b)
    assert pool.num_free == 6
