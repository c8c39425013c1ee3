"""scalelib.serving.prefix_cache: chained hashes, longest-prefix lookup, LRU eviction, statistics."""

from scalelib.serving.block_pool import BlockPool
from scalelib.serving.prefix_cache import PrefixCache, block_hashes
from tests.serving_common import no_block_leaks  # noqa: F401


def test_hashes_chain_over_every_earlier_token():
    a = block_hashes([1, 2, 3, 4, 5, 6, 7], 2)
    assert len(a) == 3  # full blocks only
    assert block_hashes([1, 2, 3, 4, 9, 9], 2)[:2] == a[:2]
    b = block_hashes([0, 2, 3, 4, 5, 6], 2)
    assert all(x != y for x, y in zip(a, b))  # a different first block renames every later block
    assert block_hashes([1, 2, 3, 4, 5, 6, 7], 2, start=1, parent=a[0]) == a[1:]


def _serve(cache, tokens):
    """Take a hit, allocate the rest, commit the full blocks (what the scheduler and engine do)."""
    hashes = block_hashes(tokens, cache.pool.block_size)
    hit = cache.lookup(hashes)
    cache.acquire(hit, len(tokens))
    blocks = hit + cache.allocate(cache.pool.blocks_for(len(tokens)) - len(hit))
    for b, h in zip(blocks, hashes):
        cache.commit(b, h)
    return blocks


def test_longest_cached_prefix_is_reused_and_counted():
    cache = PrefixCache(BlockPool(8, 2))
    first = _serve(cache, [1, 2, 3, 4, 5])
    second = _serve(cache, [1, 2, 3, 4, 6, 7])
    assert second[:2] == first[:2] and second[2] != first[2]
    assert [cache.pool.refcount[b] for b in first] == [2, 2, 1]
    assert cache.stats.hit_tokens == 4 and cache.stats.lookup_tokens == 11 and cache.stats.hit_rate == 4 / 11
    cache.release(first)
    cache.release(second)
    assert cache.pool.num_used == 0 and cache.num_cached_free == 3  # [1,2], [3,4], [6,7]; the partial [5] is not cached
    third = _serve(cache, [1, 2, 3, 4, 6, 7, 8])
    assert third[:3] == second and cache.stats.hit_blocks == 5
    cache.release(third)


def test_unreferenced_cached_blocks_are_evicted_least_recently_released_first():
    cache = PrefixCache(BlockPool(4, 2))
    old, new = _serve(cache, [1, 2, 3, 4]), _serve(cache, [5, 6, 7, 8])
    cache.release(old)
    cache.release(new)
    got = cache.allocate(2)
    assert got == [old[1], old[0]]  # a sequence's tail is released first, so it goes first
    assert cache.lookup(block_hashes([1, 2, 3, 4], 2)) == [] and cache.stats.evictions == 2
    assert cache.lookup(block_hashes([5, 6, 7, 8], 2)) == new
    cache.release(got)


def test_a_prefix_cached_twice_keeps_its_first_block_and_disabled_caches_remember_nothing():
    cache = PrefixCache(BlockPool(4, 2))
    h = block_hashes([1, 2], 2)[0]
    a, b = cache.allocate(2)
    cache.commit(a, h)
    cache.commit(b, h)
    assert cache.lookup([h]) == [a]
    cache.release([a, b])
    assert cache.num_cached_free == 1
    off = PrefixCache(BlockPool(4, 2), enabled=False)
    blocks = off.allocate(1)
    off.commit(blocks[0], h)
    assert off.lookup([h]) == [] and off.num_cached_free == 0
    off.release(blocks)
