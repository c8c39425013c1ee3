"""scalelib.serving.static: fixed, padded batches give the engine's tokens, at the padded cost."""

import pytest

from scalelib.serving import engine, request, static
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


def test_static_batches_give_the_engines_tokens_greedy_and_sampled():
    reqs = [request.request(PROMPTS[0], 3), request.request(PROMPTS[3], MAX_NEW), request.request(PROMPTS[1], 1),
            request.request(PROMPTS[6], 7, temperature=0.9, top_k=30, seed=8), request.request(PROMPTS[2], 6),
            request.request(PROMPTS[5], 4, stop=[plain(PROMPTS[5])[1]])]
    results, records = static.serve_static(params(), CFG, reqs, batch_size=3, block_size=4)
    served = engine.Engine(params(), CFG, config()).run(reqs)
    assert [r.tokens for r in results] == [r.tokens for r in served]
    assert results[5].tokens == plain(PROMPTS[5])[:2] and results[5].finish_reason == "stop"
    # batch 1: prompts of 7, 19 and 7 tokens padded to 19; one prefill step, then generate steps until the longest
    # answer (10 tokens) is done
    batch1 = records[:MAX_NEW]
    assert [r.entries[0][2] for r in batch1] == ["prefill"] + ["decode"] * (MAX_NEW - 1)
    assert [len(r.entries) for r in batch1] == [3, 2, 2] + [1] * 7  # rows leave; their slots stay
    assert batch1[0].padded_tokens == 64 and batch1[0].tokens == 7 + 19 + 7  # 3 x 19 run, rounded up to 64
    longest = max(len(r.prompt) + r.max_tokens for r in reqs)
    assert {r.used_blocks for r in batch1} == {3 * -(-longest // 4)}  # every row reserves the longest, to the end
    assert all(r.first_token_s == results[0].first_token_s for r in results[:3])


def test_static_rejects_a_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        static.serve_static(params(), CFG, [request.request([1], 1)], 0)
    assert static.serve_static(params(), CFG, [], 2) == ([], [])
