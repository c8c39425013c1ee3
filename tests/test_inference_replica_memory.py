import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib.inference import replica_memory

V5E = hw.TPU_V5E


def test_dtype_bytes_names_numbers_and_errors():
    assert [replica_memory.dtype_bytes(d) for d in ("fp32", "bf16", "int8", "int4")] == [4, 2, 1, 0.5]
    assert replica_memory.dtype_bytes(3) == 3.0
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        replica_memory.dtype_bytes("fp8")
    with pytest.raises(ValueError, match="positive number"):
        replica_memory.dtype_bytes(0)


def test_kv_bytes_per_token_follows_kv_heads_and_dtype():
    cfg = tf.preset("llama3-70b")
    assert replica_memory.kv_bytes_per_token(cfg, "bf16") == 2 * 80 * 8 * 128 * 2
    assert replica_memory.kv_bytes_per_token(cfg, "int8") == replica_memory.kv_bytes_per_token(cfg, "bf16") / 2
    mha = cfg.replace(n_kv_heads=64)
    mqa = cfg.replace(n_kv_heads=1)
    assert replica_memory.kv_bytes_per_token(mha) == 8 * replica_memory.kv_bytes_per_token(cfg) == 64 * replica_memory.kv_bytes_per_token(mqa)


def test_kv_bytes_and_serving_memory():
    assert replica_memory.kv_bytes(100.0, 8, batch=3) == 2400.0
    m = replica_memory.serving_memory(1e9, 1e3, 1000, 4)
    assert (m.weight_bytes, m.kv_bytes, m.total_bytes) == (1e9, 4e6, 1e9 + 4e6)
    with pytest.raises(ValueError, match="seq_len must be a finite number >= 0"):
        replica_memory.kv_bytes(1.0, -1)


def test_replica_totals_and_errors():
    r = replica_memory.Replica(V5E, 8)
    assert r.hbm_bytes == 8 * V5E.hbm_bytes
    assert r.hbm_bytes_per_s == 8 * V5E.hbm_bytes_per_s
    assert r.flops_per_s("int8") == 8 * V5E.int8_ops_per_s
    assert r.hosts == 1 and replica_memory.Replica(V5E, 16).hosts == 2
    for bad in (0, 2.5, -4):
        with pytest.raises(ValueError, match="chips must be a positive int"):
            replica_memory.Replica(V5E, bad)


def test_free_hbm_and_max_batch():
    r = replica_memory.Replica(V5E, 16)
    free = replica_memory.free_hbm_bytes(r, 140e9)
    assert free == 16 * 16e9 - 140e9
    assert replica_memory.free_hbm_bytes(256e9, 140e9) == free  # a plain byte total works too
    assert replica_memory.free_hbm_per_chip_bytes(r, 140e9) == free / 16
    assert replica_memory.max_batch(3e9, 1e9) == 3  # an exact fit counts
    assert replica_memory.max_batch(3e9 - 1, 1e9) == 2
    with pytest.raises(ValueError, match="do not fit"):
        replica_memory.free_hbm_bytes(replica_memory.Replica(V5E, 4), 140e9)
    with pytest.raises(ValueError, match="kv_bytes_per_seq must be a positive"):
        replica_memory.max_batch(1e9, 0)


def test_sequences_exceeding_is_strict():
    assert replica_memory.sequences_exceeding(26e9, 6.71e9) == 4
    assert replica_memory.sequences_exceeding(4e9, 1e9) == 5  # 4 caches only equal the weights


@given(st.floats(min_value=1.0, max_value=4e12))
def test_smallest_slice_is_the_least_power_of_two_that_fits(total_bytes):
    n = replica_memory.smallest_slice_chips(total_bytes, V5E)
    assert n & (n - 1) == 0
    assert n * V5E.hbm_bytes >= total_bytes
    assert n == 1 or (n // 2) * V5E.hbm_bytes < total_bytes


def test_slice_shapes():
    assert replica_memory.slice_of(V5E, 8).shape == (2, 4)
    assert replica_memory.slice_of(V5E, 16).shape == (4, 4)
    assert replica_memory.slice_of(V5E, 32).shape == (4, 8)
    assert replica_memory.smallest_slice(112e9, V5E).num_chips == 8
    assert replica_memory.chips_to_hold(140e9, V5E) == pytest.approx(8.75)
    with pytest.raises(ValueError, match="power of two"):
        replica_memory.slice_of(V5E, 12)
    with pytest.raises(ValueError, match="does not fit in a TPU v5e pod"):
        replica_memory.slice_of(V5E, 512)


def test_kv_token_capacity():
    assert replica_memory.kv_token_capacity(1e9, 1e3) == pytest.approx(1e6)
    assert math.isclose(replica_memory.kv_token_capacity(0.0, 1.0), 0.0)
