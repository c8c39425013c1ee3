import dataclasses

import pytest

from scalelib import hardware as hw


def test_every_chip_has_positive_specs():
    for chip in hw.CHIPS.values():
        for f in ("bf16_flops_per_s", "int8_ops_per_s", "hbm_bytes", "hbm_bytes_per_s", "ici_one_way_bytes_per_s",
                  "pcie_bytes_per_s", "dcn_bytes_per_s_per_host"):
            assert getattr(chip, f) > 0, (chip.name, f)
        assert chip.int8_ops_per_s >= chip.bf16_flops_per_s


def test_required_chips_present():
    assert {"TPU v3", "TPU v4p", "TPU v5e", "TPU v5p", "TPU v6e", "H100", "H200", "B200"} <= set(hw.CHIPS)


def test_chips_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.TPU_V5E.hbm_bytes_per_s = 1.0


def test_bidirectional_is_twice_one_way():
    for chip in hw.CHIPS.values():
        assert chip.ici_bidi_bytes_per_s == 2 * chip.ici_one_way_bytes_per_s


def test_spec_table_values():
    # The spec table of section 2, and the interconnect table beside it.
    assert hw.TPU_V5P.bf16_flops_per_s == 4.59e14 and hw.TPU_V5P.hbm_bytes_per_s == 2.8e12
    assert hw.TPU_V5E.hbm_bytes_per_s == 8.1e11 and hw.TPU_V5E.ici_bidi_bytes_per_s == 9e10
    assert hw.TPU_V6E.ici_bidi_bytes_per_s == 1.8e11
    assert hw.TPU_V5P.pod_chips == 8960 and hw.TPU_V5P.chips_per_host == 4


def test_v5p_dcn_per_chip_uses_table_host_size():
    # The book's prose divides by 8 chips per host; its table says a v5p host has 4.
    assert hw.TPU_V5P.dcn_bytes_per_s_per_chip == pytest.approx(6.25e9)


def test_wraparound_rules():
    assert hw.TPU_V5P.has_wraparound((4, 4, 4)) == (True, True, True)
    assert hw.TPU_V5P.has_wraparound((2, 2, 4)) == (False, False, False)
    assert hw.TPU_V5E.has_wraparound((8, 16)) == (False, True)
    assert hw.TPU_V5E.has_wraparound((4, 4)) == (False, False)
    assert hw.TPU_V3.has_wraparound((32, 16)) == (True, False)
    assert hw.H100.has_wraparound((8,)) == (False,)
    with pytest.raises(ValueError, match="at most 2 axes"):
        hw.TPU_V5E.has_wraparound((4, 4, 4))


def test_variant_swaps_one_field_and_explains_unknown():
    v = hw.variant(hw.TPU_V5E, "hbm_bytes_per_s")
    assert v.hbm_bytes_per_s == 8.2e11 and v.bf16_flops_per_s == hw.TPU_V5E.bf16_flops_per_s
    with pytest.raises(KeyError, match="no second value"):
        hw.variant(hw.TPU_V5E, "hbm_bytes")


def test_get_chip_forgiving_names():
    assert hw.get_chip("v5e") is hw.TPU_V5E
    assert hw.get_chip("h100") is hw.H100
    with pytest.raises(KeyError, match="known chips"):
        hw.get_chip("v9z")


def test_mxu_arithmetic():
    assert hw.mxu_flops_per_s(128, 1.0) == 2 * 128 * 128
    assert hw.chip_flops_from_mxus(hw.TPU_V5E) == pytest.approx(hw.TPU_V5E.bf16_flops_per_s, rel=0.01)
    with pytest.raises(ValueError, match="does not give"):
        hw.chip_flops_from_mxus(hw.H100)
    assert hw.vpu_alus() == 2048


def test_flops_per_s_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="'bf16' or 'int8'"):
        hw.TPU_V5E.flops_per_s("fp8")


def test_tpu_v2_core_figures_of_the_profiling_example():
    # Section 9's worked profile: 23e12 bf16 FLOPs/s per core, 1.2e11 B/s per axis in both directions.
    assert hw.TPU_V2_CORE.bf16_flops_per_s == 2.3e13 and hw.TPU_V2_CORE.ici_bidi_bytes_per_s == 1.2e11
    assert hw.TPU_V2_CORE.ici_one_way_bytes_per_s == 6e10
