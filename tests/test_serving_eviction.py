"""scalelib.serving.eviction and cache_lab: the prefix cache's eviction as a plug-in, on seeded traces and in the
engine (issue 51: policies you can swap)."""

import pytest

from scalelib.serving import cache_lab, engine, eviction, request
from scalelib.serving.block_pool import BlockPool
from scalelib.serving.prefix_cache import PrefixCache
from tests.serving_common import (  # noqa: F401
    CFG,
    MAX_NEW,
    PROMPTS,
    config,
    fast_compiles,
    no_block_leaks,
    params,
    plain,
)


def _events(policy: str) -> list[int]:
    """Blocks 0..3 cached in order; block 2 reused twice and block 3 once, all four released in the order 2, 0, 3, 1:
    the eviction order each policy gives."""
    p = eviction.make_policy(policy, 8)
    for b in range(4):
        p.cached(b)
    for b in (2, 2, 3):
        p.hit(b)
    for b in (2, 0, 3, 1):
        p.released(b)
    return p.order([2, 0, 3, 1])


@pytest.mark.parametrize("policy, order", [
    ("lru", [2, 0, 3, 1]),  # least recently released first
    ("fifo", [0, 1, 2, 3]),  # first cached first, reuse or not
    ("lfu", [0, 1, 3, 2]),  # fewest reuses first (0 and 1 never reused: the earlier released first)
    ("slru", [0, 1, 2, 3]),  # never reused first, then the reused (protected), each least recently released first
])
def test_each_policy_orders_the_kept_blocks_by_its_rule(policy, order):
    assert _events(policy) == order


def test_slru_demotes_the_oldest_protected_block_past_its_share():
    p = eviction.make_policy("slru", 4)  # protects at most 2 blocks (protected_fraction 0.5)
    for b in range(3):
        p.cached(b)
        p.released(b)
        p.hit(b)  # 0, 1, 2 reused in turn: 0 (the least recently released) is demoted
    assert sorted(p.protected) == [1, 2] and p.order([0, 1, 2]) == [0, 1, 2]


def test_unknown_policies_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'; choose one of fifo, lfu, lru, slru"):
        eviction.make_policy("mru", 8)
    with pytest.raises(ValueError, match="unknown eviction policy 'mru'"):
        config(eviction="mru")
    with pytest.raises(TypeError, match="schedule must be a function"):
        config(schedule="fcfs")


def test_the_pool_refuses_an_eviction_order_that_loses_a_block():
    pool = BlockPool(2, 4)
    a, b = pool.allocate(2)
    pool.release(a, keep=True)
    pool.release(b, keep=True)
    with pytest.raises(ValueError, match="must name every kept block once"):
        pool.allocate(1, evict=lambda kept: kept[:1])
    pool.check()


def test_a_scan_flushes_the_hot_prompt_under_lru_and_fifo_but_not_under_lfu_and_slru():
    trace = cache_lab.scan_trace()
    runs = {p: cache_lab.simulate(trace, p, num_blocks=48) for p in eviction.POLICIES}
    hot = [i for i, r in enumerate(trace) if r.prompt[:48] == trace[0].prompt[:48]][2:]  # after the two warm-ups
    assert len(hot) == 8
    for p, run in runs.items():
        hits = [run.prefill_tokens[i] < len(trace[i].prompt) for i in hot]
        assert hits == [p in ("lfu", "slru")] * len(hot), (p, run.prefill_tokens)
    assert runs["lfu"].hit_rate > runs["lru"].hit_rate and runs["lfu"].recomputed_tokens < runs["lru"].recomputed_tokens


def test_the_lab_table_covers_every_policy_and_trace_and_counts_consistently():
    runs = cache_lab.compare()
    assert {(r.trace, r.policy) for r in runs} == {(t, p) for t in cache_lab.TRACES for p in eviction.POLICIES}
    for r in runs:
        trace = cache_lab.TRACES[r.trace](seed=0)
        assert r.prompt_tokens == sum(len(q.prompt) for q in trace) == r.hit_tokens + sum(r.prefill_tokens)
        assert 0 <= r.hit_rate < 1 and r.mean_prefill_tokens == pytest.approx(sum(r.prefill_tokens) / len(trace))
    by = {(r.trace, r.policy): r for r in runs}
    assert by["chat", "lfu"].hit_rate > by["chat", "lru"].hit_rate  # a chat's shared system prompt survives
    with pytest.raises(ValueError, match="needs 3 blocks of 8 tokens but the pool has 2"):
        cache_lab.simulate([cache_lab.TraceRequest(tuple(range(20)))], "lru", num_blocks=2)


def test_every_policy_serves_the_same_greedy_tokens_in_a_pool_that_evicts():
    shared = [PROMPTS[i] for i in (3, 6, 4, 7, 3, 5, 0, 4)]
    reqs = [request.request(p, MAX_NEW) for p in shared]
    arrivals = [2 * i for i in range(len(reqs))]
    evicted = {}
    for policy in eviction.POLICIES:
        eng = engine.Engine(params(), CFG, config(num_blocks=14, eviction=policy))
        assert [r.tokens for r in eng.run(reqs, arrivals)] == [plain(p) for p in shared], policy
        evicted[policy] = eng.cache.stats.evictions
        assert eng.pool.num_used == 0
    assert all(n > 0 for n in evicted.values()), evicted  # the pool was short: each policy chose victims


def test_a_policy_sees_every_event_of_the_cache():
    pool = BlockPool(4, 2)
    cache = PrefixCache(pool, eviction="lfu")
    blocks = cache.allocate(2)
    cache.commit(blocks[0], b"h0")
    cache.commit(blocks[1], b"h1")
    cache.release(blocks)
    assert set(cache.policy.released_at) == set(blocks) and cache.policy.hits == dict.fromkeys(blocks, 0)
    cache.acquire(cache.lookup([b"h0"]), 2)
    assert cache.policy.hits[blocks[0]] == 1
    cache.allocate(3)  # two empty blocks and the kept one LFU gives up first: h1's
    assert cache.lookup([b"h0", b"h1"]) == [blocks[0]] and blocks[1] not in cache.policy.hits
