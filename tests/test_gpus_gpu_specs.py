"""GPU chip records (scalelib.gpus.gpu_specs): counts, rates and memories against the book's tables, one source of
truth with scalelib.hardware, and clear errors for what the book does not give."""

import pytest

from scalelib import hardware as hw
from scalelib.gpus import gpu_specs as gs


def test_each_gpu_reads_its_shared_figures_from_the_hardware_record():
    for gpu in gs.GPUS.values():
        if gpu.chip is None:
            continue
        assert gpu.bf16_flops_per_s == gpu.chip.bf16_flops_per_s
        assert gpu.hbm_bytes == gpu.chip.hbm_bytes
        assert gpu.nvlink.gpu_egress_bytes_per_s == gpu.chip.ici_one_way_bytes_per_s
        assert gpu.sms == gpu.chip.cores_per_chip


def test_counts_follow_from_sms_and_subpartitions():
    h = gs.H100
    assert (h.cuda_cores, h.tensor_cores, h.simd_units, h.fp32_cores_per_sm) == (16896, 528, 528, 128)
    assert gs.B200.cuda_cores == 148 * 128
    assert h.registers_per_subpartition == 16384  # 16k 32-bit registers in each quarter of an SM
    assert h.resident_warps(256) == 8 and h.resident_warps(64) == 32


def test_an_elementwise_kernel_fills_one_sm_per_128_items_up_to_all_of_them():
    h = gs.H100
    assert [h.sms_used(n) for n in (1, 128, 129, 1024, 2**30)] == [1, 1, 2, 8, 132]
    assert h.sms / h.sms_used(1024) == pytest.approx(16.5)  # the book's "roughly 16x longer" for N = 1024


def test_memories_are_binary_sizes():
    assert gs.H100.smem_bytes == gs.H100.register_bytes == 132 * 256 * 1024
    assert gs.B200.tmem_per_sm_bytes == 256 * 1024 and gs.H100.tmem_per_sm_bytes == 0
    assert gs.V100.l2_bytes < gs.A100.l2_bytes < gs.H100.l2_bytes < gs.B200.l2_bytes


def test_tensor_core_rate_implied_by_the_chip_rate():
    # 990 TFLOPs/s over 528 Tensor Cores at 1.76 GHz: about 1024 FLOPs each per cycle (an 8x8x8 matmul)
    c = hw.variant(hw.H100, "bf16_flops_per_s", "gpu part").bf16_flops_per_s
    assert gs.H100.tc_flops_per_cycle_from(c, gs.TC_CLOCK_HZ["H100"]) == pytest.approx(gs.H100.tc_flops_per_cycle,
                                                                                       rel=0.05)
    for gpu in (gs.A100, gs.B200):
        implied = gpu.tc_flops_per_cycle_from(gpu.bf16_flops_per_s, gs.TC_CLOCK_HZ[gpu.name])
        assert implied == pytest.approx(gpu.tc_flops_per_cycle, rel=0.02)


def test_vector_rates_and_clock_round_trip():
    h = gs.H100
    assert h.vector_flops_per_s(fma=True) == 2 * h.vector_flops_per_s()
    assert h.vector_flops_per_s(fma=True) == pytest.approx(h.vector_fp32_fma_flops_per_s, rel=0.02)
    assert h.clock_from_vector_flops(h.vector_flops_per_s(fma=True)) == pytest.approx(h.boost_clock_hz)


def test_critical_intensities_order():
    h = gs.H100
    assert h.critical_intensity("vector") < h.critical_intensity("bf16") < h.critical_intensity("fp8")
    assert h.critical_intensity("bf16") == pytest.approx(hw.H100.bf16_flops_per_s / hw.H100.hbm_bytes_per_s)


def test_nvlink_generations_table():
    assert [g.gpu_egress_bytes_per_s for g in gs.NVLINK_GENERATIONS] == [300e9, 450e9, 900e9]
    assert gs.NVLINK_5.node_gpus == (8, 72) and len(gs.NVLINK_5.nvswitches_per_node) == 2
    assert gs.H800.nvlink.gpu_egress_bytes_per_s == 300e9 and gs.H800.bf16_flops_per_s == gs.H100.bf16_flops_per_s


def test_the_v5p_has_about_half_the_independent_alus_of_an_h100():
    assert gs.tpu_vpu_alus(hw.TPU_V5P) == 2 * 4 * 8 * 128
    assert gs.tpu_vpu_alus(hw.TPU_V5P) / gs.H100.cuda_cores == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize("call, message", [
    (lambda: gs.V100.bf16_flops_per_s, "no bf16"),
    (lambda: gs.B200.vector_flops_per_s(), "no clock"),
    (lambda: gs.H100.critical_intensity("fp16"), "precision must be"),
    (lambda: gs.V100.critical_intensity("fp8"), "no fp8"),
    (lambda: gs.H100.resident_warps(0), "positive int"),
    (lambda: gs.H100.sms_used(0), "elements must be a positive int"),
    (lambda: gs.H100.vector_flops_per_s(clock_hz=-1.0), "clock_hz"),
    (lambda: gs.get_gpu("H300"), "unknown GPU"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises((ValueError, KeyError), match=message):
        call()


def test_lookup_forgives_case():
    assert gs.get_gpu(" h100") is gs.H100 and hw.get_chip("gb200") is hw.GB200
