"""scalelib.parallel.thresholds: the book's closed-form thresholds of section 5, and the layer it reasons with."""

import pytest

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib.parallel import thresholds
from scalelib.parallel.layer import LayerModel

V5P = hw.TPU_V5P


def test_layer_model_from_config_drops_the_gate_unless_asked():
    cfg = tf.preset("llama3-70b")
    assert LayerModel.from_config(cfg).effective_d_ff == 28672
    assert LayerModel.from_config(cfg, count_gate=True).effective_d_ff == 1.5 * 28672
    with pytest.raises(ValueError, match="d_ff"):
        LayerModel(8192, 0)


def test_book_thresholds_on_v5p():
    assert thresholds.dp_critical_batch_per_chip_tokens(V5P) == pytest.approx(2550)
    assert thresholds.dp_critical_batch_per_chip_tokens(V5P, 3) == pytest.approx(850)
    assert thresholds.mixed_critical_batch_per_chip_tokens(28672, V5P) == pytest.approx(453.58, rel=1e-4)
    lo, hi = thresholds.mixed_fsdp_ways_range(4.19e6, 28672, 8960, V5P)
    assert hi == pytest.approx(1928, rel=1e-3) and lo < thresholds.optimal_fsdp_ways(4.19e6, 28672, 8960) < hi
    assert thresholds.power_of_two_split(8960, hi) == (2048, 4)
    assert thresholds.mixed_fsdp_ways_range(1e5, 28672, 8960, V5P) is None  # 11 tokens per chip: no split works
    assert thresholds.pipeline_bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert thresholds.dcn_budget(V5P, 8000).critical_batch_tokens == pytest.approx(8000 * 4.59e14 / 5e13)
