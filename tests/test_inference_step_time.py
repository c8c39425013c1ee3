import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.inference import replica_memory
from scalelib.inference import step_time as stt

V5E = hw.TPU_V5E
R16 = replica_memory.Replica(V5E, 16)


def _step(batch, kv=0.0, weight_bytes=70e9, compute="bf16"):
    return stt.decode_step_time(R16, n_params=70e9, weight_bytes=weight_bytes, kv_bytes_per_seq=kv, batch=batch,
                                compute=compute)


def test_step_is_cache_load_plus_slower_of_weights_and_flops():
    s = _step(64, kv=1e9)
    assert s.kv_load_s == pytest.approx(64e9 / R16.hbm_bytes_per_s)
    assert s.param_load_s == pytest.approx(70e9 / R16.hbm_bytes_per_s)
    assert s.flops_s == pytest.approx(2 * 70e9 * 64 / R16.flops_per_s())
    assert s.step_s == pytest.approx(s.kv_load_s + max(s.param_load_s, s.flops_s))
    assert s.tokens_per_s == pytest.approx(64 / s.step_s)
    assert s.tokens_per_s_per_chip == pytest.approx(s.tokens_per_s / 16)
    assert s.chip_s_per_token == pytest.approx(16 * s.step_s / 64)


@given(st.floats(min_value=1, max_value=4000))
def test_weight_matmuls_turn_compute_bound_at_the_critical_batch(batch):
    crit = stt.decode_critical_batch(V5E, weights="int8", compute="bf16")
    s = _step(batch)
    assert (s.bound == "compute") == (batch > crit * (1 + 1e-9)) or abs(batch / crit - 1) < 1e-9
    if s.bound == "memory":
        assert s.step_s == pytest.approx(s.memory_bound_s)


def test_critical_batches_follow_dtypes():
    bf16 = stt.decode_critical_batch(V5E)
    assert bf16 == pytest.approx(V5E.bf16_flops_per_s / V5E.hbm_bytes_per_s)
    assert stt.decode_critical_batch(V5E, weights="int8") == pytest.approx(bf16 / 2)
    assert stt.decode_critical_batch(V5E, weights="int8", compute="int8") == pytest.approx(bf16)
    assert stt.moe_critical_batch(120, 16, 2) == 960
    with pytest.raises(ValueError, match="experts_per_token <= n_experts"):
        stt.moe_critical_batch(120, 2, 4)
    with pytest.raises(ValueError, match="dtype must be 'bf16' or 'int8'"):
        stt.decode_critical_batch(V5E, compute="fp8")


def test_bigger_batches_trade_latency_for_throughput():
    steps = [_step(b, kv=5e8) for b in (1, 8, 32, 64, 120)]  # below int8-weight v5e's critical batch (122)
    assert all(a.step_s < b.step_s for a, b in zip(steps, steps[1:]))
    assert all(a.tokens_per_s < b.tokens_per_s for a, b in zip(steps, steps[1:]))
    # diminishing returns: each step up in batch buys less per added sequence
    gains = [(b.tokens_per_s - a.tokens_per_s) / (b.batch - a.batch) for a, b in zip(steps, steps[1:])]
    assert gains == sorted(gains, reverse=True)
    # past the critical batch both the cache load and the FLOPs grow with B: throughput is flat
    assert _step(480, kv=5e8).tokens_per_s == pytest.approx(_step(240, kv=5e8).tokens_per_s)


def test_model_step_uses_the_config():
    cfg = tf.preset("llama3-70b")
    a = stt.model_decode_step_time(cfg, R16, 8, 4096, weights="int8", kv="int8")
    n = tf.param_counts(cfg).total
    b = stt.decode_step_time(R16, n_params=n, weight_bytes=n, kv_bytes_per_seq=4096 * 163_840, batch=8)
    assert a == b
    assert stt.model_decode_step_time(cfg, R16, 8, 4096, n_params=70e9).flops_s == pytest.approx(_step(8).flops_s)


def test_kv_flops_crossover_makes_the_two_times_equal_at_any_batch():
    chip = hw.variant(V5E, "hbm_bytes_per_s")
    s_star = stt.kv_flops_crossover_seq_len(70e9, 163_840, chip)
    replica = replica_memory.Replica(chip, 16)
    for batch in (1, 37, 500):
        s = stt.decode_step_time(replica, n_params=70e9, weight_bytes=70e9, kv_bytes_per_seq=163_840 * s_star,
                                 batch=batch)
        assert s.kv_load_s == pytest.approx(s.flops_s)


def test_prefill_and_weight_load():
    assert stt.prefill_time_s(70e9, 8192, R16, mfu=0.5) == pytest.approx(2 * 70e9 * 8192 / (0.5 * R16.flops_per_s()))
    assert stt.weight_load_s(70e9, R16) == pytest.approx(_step(1).param_load_s)
    assert stt.full_hbm_read_s(replica_memory.Replica(V5E, 4)) == pytest.approx(V5E.hbm_bytes / V5E.hbm_bytes_per_s)
    assert stt.prefill_attention_compute_bound_len(240) == 480
    with pytest.raises(ValueError, match=r"mfu must be in \(0, 1\]"):
        stt.prefill_time_s(70e9, 8192, R16, mfu=40)
    with pytest.raises(ValueError, match="batch must be a finite number"):
        _step(-1)
    with pytest.raises(ValueError, match="kv_bytes_per_seq must be"):
        _step(1, kv=float("nan"))
    with pytest.raises(ValueError, match="n_params and tokens must be >= 0"):
        stt.dense_forward_flops(-1, 3)


def test_decode_step_cost_parts():
    cfg = tf.preset("llama3-8b")
    c = stt.decode_step_cost(cfg, 4, 1024, 2)
    counts = tf.param_counts(cfg)
    weights = (counts.total - counts.embedding + 4 * cfg.d_model) * 2
    cache = replica_memory.kv_bytes_per_token(cfg, 2) * 4 * 1025
    assert c.bytes == weights + cache
    assert c.flops == fl.forward_flops(cfg, 4, 1024).matmul_flops
    tied = cfg.replace(tied_embeddings=True)
    assert stt.decode_step_cost(tied, 4, 1024, 2).bytes == tf.param_counts(tied).total * 2 + cache
    # a decode step sits far below the chip's critical intensity: memory-bound
    assert rl.op_time_on_chip(c, V5E).bound == "comms"
    with pytest.raises(ValueError, match="batch must be a positive int, got 0"):
        stt.decode_step_cost(cfg, 0, 1024)
