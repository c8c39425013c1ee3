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
    reqs = [request.request(p, m) for p, m in zip(PROMPTS[:5], (3, MAX_NEW, 1, 6, 2))]
    reqs += [request.request(PROMPTS[6], 7, temperature=0.9, top_k=30, seed=8),
             request.request(PROMPTS[5], 4, stop=[plain(PROMPTS[5])[1]])]
    results, records = static.serve_static(params(), CFG, reqs, batch_size=3, block_size=4)
    served = engine.Engine(params(), CFG, config()).run(reqs)
    assert [r.tokens for r in results] == [r.tokens for r in served]
    assert results[6].tokens == plain(PROMPTS[5])[:2] and results[6].finish_reason == "stop"
    # batch 1 holds prompts of 7, 7, 7 tokens and runs 1 prefill + (10 - 1) decode steps
    batch1 = records[:MAX_NEW]
    assert [r.entries[0][2] for r in batch1] == ["prefill"] + ["decode"] * (MAX_NEW - 1)
    assert [len(r.entries) for r in batch1] == [3, 2, 2] + [1] * 7  # rows leave; their slots stay
    assert all(r.padded_tokens == 32 for r in records if r.entries[0][2] == "prefill" and r.index == 0)
    longest = max(len(r.prompt) + r.max_tokens for r in reqs)
    assert {r.used_blocks for r in batch1} == {3 * -(-longest // 4)}  # every row reserves the longest, to the end
    assert all(r.first_token_s == results[0].first_token_s for r in results[:3])


def test_static_rejects_a_bad_batch_size():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        static.serve_static(params(), CFG, [request.request([1], 1)], 0)
    assert static.serve_static(params(), CFG, [], 2) == ([], [])
