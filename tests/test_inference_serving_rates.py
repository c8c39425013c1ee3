import pytest

from scalelib import hardware as hw
from scalelib.inference import replica_memory
from scalelib.inference import serving_rates


def test_flops_per_usd_and_a_chip_without_a_price():
    assert serving_rates.flops_per_usd(hw.TPU_V5E) == pytest.approx(1.97e14 * 3600 / 1.2)
    assert serving_rates.flops_per_usd(hw.TPU_V5E) > serving_rates.flops_per_usd(hw.TPU_V5P) > serving_rates.flops_per_usd(hw.H100)
    with pytest.raises(ValueError, match="no hourly price for TPU v6e"):
        serving_rates.flops_per_usd(hw.TPU_V6E)


def test_rates_of_a_generate_batch():
    assert serving_rates.tokens_per_s(32, 0.016) == pytest.approx(2000)
    assert serving_rates.per_chip(2000, 8) == 250
    assert serving_rates.decode_time_s(0.02, 500) == pytest.approx(10)
    assert serving_rates.queries_per_s(40, 0.02, 500) == pytest.approx(serving_rates.tokens_per_s(40, 0.02) / 500)
    assert serving_rates.sequences_finished_per_step(32, 4096) == 32 / 4096
    assert serving_rates.kv_tokens_evicted_per_step(32, 8192, 4096) == pytest.approx(96)
    with pytest.raises(ValueError, match="step_s must be a positive"):
        serving_rates.tokens_per_s(32, 0)
    with pytest.raises(ValueError, match="chips must be a positive int"):
        serving_rates.per_chip(1.0, 0)
    with pytest.raises(ValueError, match="decode_tokens must be a positive"):
        serving_rates.queries_per_s(32, 0.02, 0)


def test_prefill_generate_ratio_balances_the_two_rates():
    prefill_s, step_s, batch, decode = 0.91, 0.019, 32, 512
    ratio = serving_rates.prefill_servers_per_generate_server(prefill_s, step_s, batch, decode)
    generate_server = serving_rates.queries_per_s(batch, step_s, decode)
    assert ratio * (1 / prefill_s) == pytest.approx(generate_server)  # sequences in == sequences out


def test_prefix_cache_fraction():
    assert serving_rates.prefix_cache_compute_fraction(3, 2) == pytest.approx(1 / 3)
    assert serving_rates.prefix_cache_compute_fraction(10, 0) == 1.0
    with pytest.raises(ValueError, match="cached_tokens <= prompt_tokens"):
        serving_rates.prefix_cache_compute_fraction(3, 4)


def test_kv_transfer_goes_at_the_pace_of_the_smaller_end():
    v5e = hw.TPU_V5E
    big, small = replica_memory.Replica(v5e, 16), replica_memory.Replica(v5e, 8)  # 2 hosts and 1 host
    kv = 5.3e9
    assert serving_rates.kv_transfer_s(kv, big, big) == pytest.approx(kv / (2 * v5e.dcn_bytes_per_s_per_host))
    assert serving_rates.kv_transfer_s(kv, big, small) == serving_rates.kv_transfer_s(kv, small, big)
    assert serving_rates.kv_transfer_s(kv, big, small) == pytest.approx(kv / v5e.dcn_bytes_per_s_per_host)
    assert serving_rates.kv_transfer_share(kv, big, big, prefill_s=0.91) == pytest.approx(
        serving_rates.kv_transfer_s(kv, big, big) / 0.91)
