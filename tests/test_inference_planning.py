"""scalelib.inference.planning: the best slice and batch under a latency limit, against brute force."""

import itertools

import pytest

from scalelib import hardware as hw
from scalelib.inference import replica_memory
from scalelib.inference import planning
from scalelib.inference import step_time as st

V5E = hw.TPU_V5E
N = 70e9
W_INT8 = replica_memory.param_bytes(N, "int8")
KV_8K = replica_memory.kv_bytes(163_840, 8192)  # LLaMA 3-70B int8 cache of an 8k-token sequence


def brute_force(max_step_s, max_chips, weight_bytes=W_INT8, kv=KV_8K):
    """Every power-of-two slice and every batch that fits: the most tokens/s/chip (equal within 1e-9),
    then the fewest chips, then the largest batch (once the weight matmuls are compute-bound, tokens/s
    per chip stops growing with the batch, so many batches tie)."""
    best = None
    for chips in (2 ** i for i in itertools.count()):
        if chips > max_chips:
            break
        replica = replica_memory.Replica(V5E, chips)
        if replica.hbm_bytes < weight_bytes:
            continue
        for batch in range(1, replica_memory.max_batch(replica_memory.free_hbm_bytes(replica, weight_bytes), kv) + 1):
            s = st.decode_step_time(replica, n_params=N, weight_bytes=weight_bytes, kv_bytes_per_seq=kv, batch=batch)
            if s.step_s <= max_step_s:
                rate = s.tokens_per_s_per_chip
                tie = best is not None and abs(rate - best[0]) <= 1e-9 * best[0]
                if best is None or (rate > best[0] and not tie) or (tie and chips == best[1] and batch > best[2]):
                    best = (max(rate, best[0]) if tie else rate, chips, batch)
    return None if best is None else (best[1], best[2])


@pytest.mark.parametrize("max_step_s, max_chips", [(0.015, 256), (0.030, 64), (0.010, 32), (0.005, 16)])
def test_plan_equals_brute_force(max_step_s, max_chips):
    plan = planning.best_serving_plan(V5E, n_params=N, weight_bytes=W_INT8, kv_bytes_per_seq=KV_8K,
                                      max_step_s=max_step_s, max_chips=max_chips)
    want = brute_force(max_step_s, max_chips)
    got = None if plan is None else (plan.chips, plan.batch)
    assert got == want
    if plan is not None:
        assert plan.step.step_s <= max_step_s


def test_no_plan_when_the_limit_is_below_one_sequence():
    assert planning.best_serving_plan(V5E, n_params=N, weight_bytes=W_INT8, kv_bytes_per_seq=KV_8K,
                                      max_step_s=1e-6, max_chips=256) is None


@pytest.mark.parametrize("kw, match", [(dict(max_chips=0), "max_chips"), (dict(max_step_s=-1.0), "max_step_s"),
                                       (dict(kv_bytes_per_seq=0.0), "kv_bytes_per_seq")])
def test_bad_input_is_named(kw, match):
    args = dict(n_params=N, weight_bytes=W_INT8, kv_bytes_per_seq=KV_8K, max_step_s=0.015, max_chips=64) | kw
    with pytest.raises(ValueError, match=match):
        planning.best_serving_plan(V5E, **args)
