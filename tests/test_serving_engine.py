"""scalelib.serving.engine against the plain decode, under random workloads.

Greedy: every request's tokens equal ``inference.decode.generate`` on its prompt alone, token for
token, whatever arrives when, whatever the block size, chunk size, budget, pool size (small pools
force preemptions) and prefix cache. Sampled: a request's tokens depend only on itself and its
seed. Bad requests are refused before anything changes. The pool's invariants are checked after
every step (``check_blocks``) and after every test (tests/serving_common.py).
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalelib.serving import engine, paged, request
from tests.serving_common import (  # noqa: F401
    CFG,
    MAX_CONTEXT,
    MAX_NEW,
    PROMPTS,
    config,
    fast_compiles,
    no_block_leaks,
    params,
    plain,
)

SETTINGS = settings(max_examples=24, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def expected(prompt, max_tokens, stop=()):
    out = []
    for tok in plain(prompt)[:max_tokens]:
        out.append(tok)
        if tok in stop:
            break
    return tuple(out)


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 6))
    reqs, arrivals = [], []
    for _ in range(n):
        prompt = PROMPTS[draw(st.integers(0, len(PROMPTS) - 1))]
        max_tokens = draw(st.integers(1, MAX_NEW))
        stop = (plain(prompt)[draw(st.integers(0, MAX_NEW - 1))],) if draw(st.booleans()) else ()
        reqs.append(request.request(prompt, max_tokens, stop=stop))
        arrivals.append(draw(st.integers(0, 6)))
    bs = draw(st.sampled_from([2, 4, 8]))
    need = max(-(-(len(r.prompt) + r.max_tokens - 1) // bs) for r in reqs)
    cfg = config(block_size=bs, num_blocks=draw(st.integers(need, 3 * need)), max_running=draw(st.integers(1, 4)),
                 token_budget=draw(st.sampled_from([4, 8, 16])), max_chunk=draw(st.sampled_from([None, 3, 5])),
                 prefix_caching=draw(st.booleans()))
    return reqs, arrivals, cfg


@SETTINGS
@given(workloads())
def test_greedy_serving_equals_the_plain_decode_of_each_prompt_alone(work):
    reqs, arrivals, cfg = work
    eng = engine.Engine(params(), CFG, cfg)
    results = eng.run(reqs, arrivals)
    for req, res in zip(reqs, results):
        assert res.tokens == expected(req.prompt, req.max_tokens, req.stop), (req, res)
        assert res.finish_reason == ("stop" if res.tokens[-1] in req.stop else "length")
    assert eng.pool.num_used == 0 and not eng.has_work
    assert eng.compiled_programs == cfg.max_programs == 1


def test_preemption_and_recompute_keep_the_tokens():
    reqs = [request.request(p, MAX_NEW) for p in PROMPTS]
    need = -(-(19 + MAX_NEW - 1) // 4)  # the longest request alone
    eng = engine.Engine(params(), CFG, config(num_blocks=need + 1, prefix_caching=False))
    results = eng.run(reqs)
    assert sum(r.preemptions for r in results) > 0
    assert any(rec.preempted for rec in eng.records)
    assert [r.tokens for r in results] == [plain(p) for p in PROMPTS]


def test_prefix_hits_skip_work_and_keep_the_tokens():
    shared = [PROMPTS[3], PROMPTS[4], PROMPTS[3], PROMPTS[5]]  # 16 shared tokens, one prompt twice
    arrivals = [0, 4, 8, 12]  # each arrives after the earlier ones cached their blocks
    hit = engine.Engine(params(), CFG, config())
    cold = engine.Engine(params(), CFG, config(prefix_caching=False))
    res_hit, res_cold = (e.run([request.request(p, 4) for p in shared], arrivals) for e in (hit, cold))
    assert [r.tokens for r in res_hit] == [r.tokens for r in res_cold] == [plain(p)[:4] for p in shared]
    assert [r.cached_tokens for r in res_hit] == [0, 16, 16, 8]
    assert [r.cached_tokens for r in res_cold] == [0, 0, 0, 0]
    stats = hit.cache.stats
    assert stats.hit_tokens == 40 and stats.lookup_tokens == sum(len(p) for p in shared)
    prefill = lambda e: sum(n for rec in e.records for _, n, kind in rec.entries if kind == "prefill")
    assert prefill(cold) - prefill(hit) == 40


SAMPLED = [request.request(PROMPTS[i], MAX_NEW, temperature=t, top_k=k, top_p=p, seed=s)
           for i, t, k, p, s in [(0, 0.8, 0, 1.0, 1), (3, 1.0, 20, 1.0, 2), (3, 1.3, 0, 0.9, 3), (6, 0.7, 8, 0.8, 4),
                                 (7, 1.0, 0, 1.0, 5), (2, 0.0, 0, 1.0, 6)]]


@pytest.fixture(scope="module")
def sampled_alone():
    return [engine.Engine(params(), CFG, config()).run([r])[0].tokens for r in SAMPLED]


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.permutations(range(len(SAMPLED))), st.lists(st.integers(0, 5), min_size=len(SAMPLED), max_size=len(SAMPLED)),
       st.integers(9, 24), st.sampled_from([None, 3]), st.booleans())
def test_sampled_tokens_depend_only_on_the_request_and_its_seed(sampled_alone, order, arrivals, blocks, chunk, prefix):
    eng = engine.Engine(params(), CFG, config(num_blocks=blocks, max_chunk=chunk, prefix_caching=prefix))
    results = eng.run([SAMPLED[i] for i in order], arrivals)
    assert [r.tokens for r in results] == [sampled_alone[i] for i in order]


def test_seeds_and_temperatures_change_the_draw(sampled_alone):
    eng = engine.Engine(params(), CFG, config())
    other_seed = eng.run([request.request(SAMPLED[0].prompt, MAX_NEW, temperature=0.8, seed=99)])[0].tokens
    assert other_seed != sampled_alone[0]
    assert sampled_alone[5] == plain(PROMPTS[2])  # temperature 0 is greedy
    assert len(set(sampled_alone[1])) > 1


BAD = [
    (lambda: request.request([1, CFG.vocab_size], 3), "token id 256 is outside the vocabulary of 256"),
    (lambda: request.request([5], 3, stop=[999]), "token id 999 is outside the vocabulary"),
    (lambda: request.request(list(range(MAX_CONTEXT)), 1), "context holds 32"),
    (lambda: request.request([1, 2], MAX_CONTEXT), "shorten the prompt or lower max_tokens"),
]


@pytest.mark.parametrize("make, message", BAD)
def test_bad_requests_are_refused_and_lose_nothing(make, message):
    eng = engine.Engine(params(), CFG, config())
    good = request.request(PROMPTS[0], 5)
    first = eng.add(good)
    with pytest.raises(ValueError, match=message):
        eng.add(make())
    with pytest.raises(ValueError, match=message):
        eng.run([good, make()])  # a bad workload is refused before any of it runs
    assert len(eng.scheduler.waiting) == 1 and eng.add(good) == first + 1
    while eng.has_work:
        eng.step()
    assert [r.tokens for r in eng.finished.values()] == [plain(PROMPTS[0])[:5]] * 2


def test_requests_that_could_never_fit_and_malformed_ones_are_refused():
    small = engine.Engine(params(), CFG, config(num_blocks=3))
    with pytest.raises(ValueError, match="needs 5 blocks of 4 tokens but the pool has 3; it could never run"):
        small.add(request.request(range(12), 7))
    with pytest.raises(ValueError, match=r"max_tokens \(the most new tokens to generate\) must be a positive int"):
        request.request([1], 0)
    with pytest.raises(ValueError, match=r"unknown sampling option\(s\) \['temprature'\]"):
        request.request([1], 3, temprature=0.5)
    with pytest.raises(TypeError, match="expected a serving.Request"):
        small.add(([1, 2], 3))
    with pytest.raises(ValueError, match="num_blocks must be a positive int"):
        config(num_blocks=0)
    assert not small.has_work


def test_step_records_say_what_ran():
    eng = engine.Engine(params(), CFG, config(token_budget=8, max_chunk=5))
    eng.run([request.request(PROMPTS[6], 3), request.request(PROMPTS[0], 2)], [0, 1])
    first, second = eng.records[0], eng.records[1]
    assert first.entries == ((0, 5, "prefill"),)
    assert second.entries == ((0, 5, "prefill"), (1, 3, "prefill"))  # chunked prompt, then a newcomer's chunk
    decodes = [e for rec in eng.records for e in rec.entries if e[2] == "decode"]
    assert len(decodes) == (3 - 1) + (2 - 1)  # every new token after the first comes from a decode
    assert all(rec.tokens <= 8 and rec.padded_tokens == 16 for rec in eng.records)
    assert eng.step() is None


def test_the_reported_program_count_is_what_jax_compiled():
    if not hasattr(paged.step_jit, "_cache_size"):
        pytest.skip("this JAX does not expose a jitted function's cache size")
    cfg = config(block_size=3, min_token_bucket=8, num_blocks=40)  # a block size no other test uses: new shapes
    before = paged.step_jit._cache_size()
    eng = engine.Engine(params(), CFG, cfg)
    eng.run([request.request(p, 4) for p in PROMPTS[:4]], [0, 0, 3, 6])
    assert eng.compiled_programs == paged.step_jit._cache_size() - before == 2 < len(eng.records)


def test_a_cancelled_request_gives_its_blocks_back_at_once_and_the_others_go_on():
    reqs = [request.request(p, MAX_NEW) for p in (PROMPTS[6], PROMPTS[3], PROMPTS[7], PROMPTS[0])]
    eng = engine.Engine(params(), CFG, config(max_running=2, token_budget=8))
    ids = [eng.add(r) for r in reqs]
    for _ in range(4):
        eng.step()
    running = [s.seq_id for s in eng.scheduler.running]
    waiting = [s.seq_id for s in eng.scheduler.waiting]
    assert ids[1] in running and ids[3] in waiting, (running, waiting)
    held = {b for s in eng.scheduler.running if s.seq_id != ids[1] for b in s.blocks}
    assert eng.cancel(ids[1]) and eng.cancel(ids[3])  # one running (mid-way), one waiting
    assert eng.pool.num_used == len(held)  # its blocks are free now, not at the end of a step
    eng.pool.check()
    assert not eng.cancel(ids[1]) and not eng.cancel(99)  # once only; an unknown id is no error
    while eng.has_work:
        eng.step()
    assert set(eng.finished) == {ids[0], ids[2]} and set(eng.cancelled) == {ids[1], ids[3]}
    assert eng.finished[ids[0]].tokens == plain(PROMPTS[6]) and eng.finished[ids[2]].tokens == plain(PROMPTS[7])
    assert eng.cancelled[ids[3]] == () and eng.cancelled[ids[1]] == plain(PROMPTS[3])[:len(eng.cancelled[ids[1]])]
    assert eng.pool.num_used == 0
