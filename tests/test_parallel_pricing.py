"""scalelib.parallel.pricing: one layer's compute and comms per chip under each scheme's layout (section 5)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib import hardware as hw
from scalelib import transformer as tf
from scalelib.parallel import thresholds, pricing
from scalelib.parallel.layer import LayerModel
from scalelib.parallel.layout import Layout

V5P = hw.TPU_V5P
LAYER = LayerModel(d_model=8192, d_ff=28672)
pow2 = st.integers(min_value=0, max_value=6).map(lambda k: 2**k)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=10, max_value=1e5), st.sampled_from([(16,), (8, 8), (16, 20, 28)]),
       st.sampled_from(["data", "fsdp"]))
def test_dp_fsdp_compute_bound_iff_batch_per_chip_above_threshold(per_chip, axes, scheme):
    layout = Layout(scheme, data_axes=axes)
    lc = pricing.layer_cost(layout, LAYER, V5P, per_chip * layout.chips)
    threshold = thresholds.dp_critical_batch_per_chip_tokens(V5P, len(axes))
    if not math.isclose(per_chip, threshold, rel_tol=1e-9):
        assert lc.compute_bound == (per_chip > threshold)
    assert lc.batch_per_chip_tokens == pytest.approx(per_chip)


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=64), st.floats(min_value=1e3, max_value=1e7))
def test_tensor_compute_bound_iff_ways_below_f_over_alpha(ways, batch):
    lc = pricing.layer_cost(Layout("tensor", model_axes=(ways,)), LAYER, V5P, batch)
    limit = thresholds.tp_max_ways(LAYER.d_ff, V5P)
    if not math.isclose(ways, limit, rel_tol=1e-9):
        assert lc.compute_bound == (ways < limit)  # independent of the batch


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=1e5, max_value=1e8), pow2, pow2)
def test_mixed_compute_bound_inside_the_quadratic_roots(batch, x, y):
    layout = Layout("fsdp_tp", data_axes=(x, 2), model_axes=(y,))
    lc = pricing.layer_cost(layout, LAYER, V5P, batch)
    rng = thresholds.mixed_fsdp_ways_range(batch, LAYER.d_ff, layout.chips, V5P, 2, 1)
    inside = rng is not None and rng[0] < 2 * x < rng[1]
    near = rng is not None and any(math.isclose(2 * x, r, rel_tol=1e-6) for r in rng)
    if not near:
        assert lc.forward.compute_bound == inside


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=1e5, max_value=1e8), st.integers(min_value=1, max_value=5))
def test_more_chips_never_slow_a_fixed_batch(batch, k):
    small, big = (pricing.layer_cost(Layout("fsdp", data_axes=(2**j, 4)), LAYER, V5P, batch) for j in (k, k + 1))
    assert big.step_s <= small.step_s * (1 + 1e-12)
    assert big.compute_s == pytest.approx(small.compute_s / 2)


def test_collective_convention_matches_the_book_closed_form():
    # FSDP forward: AllGather of 2 matrices x 2 D F bytes over 3 bidirectional axes
    lc = pricing.layer_cost(Layout("fsdp", data_axes=(16, 20, 28)), LAYER, V5P, 1e6)
    assert lc.forward.comms_s == pytest.approx(4 * 8192 * 28672 / (3 * V5P.ici_bidi_bytes_per_s))
    one_way = pricing.layer_cost(Layout("fsdp", data_axes=(16,)), LAYER, V5P, 1e6, wraparound=False)
    assert one_way.forward.comms_s == pytest.approx(15 / 16 * 4 * 8192 * 28672 / V5P.ici_one_way_bytes_per_s)


def test_pipeline_multislice_and_expert_layouts():
    layer = LayerModel.from_config(tf.preset("llama3-70b"))
    pipe = pricing.layer_cost(Layout("pipeline", data_axes=(8,), stages=8, microbatches=32), layer, V5P, 4e6)
    assert pipe.bubble_fraction == pytest.approx(7 / 39) and pipe.step_s > pipe.forward.time_s + pipe.backward.time_s
    with pytest.raises(ValueError, match="stages"):
        pricing.layer_cost(Layout("pipeline", stages=128), layer, V5P, 4e6)
    one = pricing.layer_cost(Layout("multislice", data_axes=(16, 20, 28), slices=1), layer, V5P, 4e6)
    many = pricing.layer_cost(Layout("multislice", data_axes=(16, 20, 28), slices=64), layer, V5P, 64 * 1e4)
    assert many.backward.comms_s >= one.backward.comms_s
    moe = LayerModel.from_config(tf.preset("mixtral-8x7b"))
    ep = pricing.layer_cost(Layout("expert", expert_axes=(8,), data_axes=(4,)), moe, V5P, 1e6)
    assert ep.forward.comms_s > 0
    with pytest.raises(ValueError, match="MoE"):
        pricing.layer_cost(Layout("expert", expert_axes=(8,)), LAYER, V5P, 1e6)
    with pytest.raises(ValueError, match="unknown scheme 'zero'"):
        pricing.layer_cost(Layout("zero"), LAYER, V5P, 1e6)
    with pytest.raises(ValueError, match="scheme"):
        Layout("")
