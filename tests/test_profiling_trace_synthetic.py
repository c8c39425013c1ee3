"""scalelib.profiling.trace.synthetic: accelerator-shaped traces from chosen op times read back exactly."""

import pytest

from scalelib.profiling import trace
from scalelib.profiling.trace import synthetic

US = 1e-6


def _rounded(ops):
    return sorted((d, s, n, round(t / US, 6), round(u / US, 6)) for d, s, n, t, u in ops)


def test_a_tpu_layout_round_trips():
    ops = [(d, s, name, (10 * s + start + d) * US, dur * US) for d in range(3) for s in range(2)
           for name, start, dur in (("fusion.7", 0.0, 1.5), ("collective-permute-start", 1.5, 0.25),
                                    ("collective-permute-done", 2.0, 0.75))]
    tr = trace.read(synthetic.device_trace(ops, "jit_ring"))
    assert (tr.platform, tr.module, tr.devices, tr.steps) == ("tpu", "jit_ring", (0, 1, 2), 2)
    assert _rounded((o.device, o.step, o.name, o.start_s, o.duration_s) for o in tr.ops) == _rounded(ops)
    assert {o.thread for o in tr.ops} == {"XLA Ops"}


def test_a_gpu_layout_puts_overlapping_kernels_on_streams():
    """A communication kernel on its own stream overlaps a compute kernel: 2 of its 3 us are hidden."""
    ops = [(0, 0, "fusion.1", 0.0, 4 * US), (0, 0, "all-reduce.2", 2 * US, 3 * US), (0, 0, "fusion.3", 5 * US, 1 * US)]
    tr = trace.read(synthetic.device_trace(ops, "jit_mlp", platform="GPU"))
    assert tr.platform == "gpu" and tr.module == "jit_mlp"
    assert _rounded((o.device, o.step, o.name, o.start_s, o.duration_s) for o in tr.ops) == _rounded(ops)
    assert sorted({o.thread for o in tr.ops}) == ["Stream #1", "Stream #2"]
    (overlap,) = trace.comm_overlap(tr)
    assert (overlap.collective_s, overlap.hidden_s) == pytest.approx((3 * US, 2 * US))


def test_bad_op_lists_say_what_is_wrong():
    with pytest.raises(ValueError, match="at least one"):
        synthetic.device_trace([])
    with pytest.raises(ValueError, match="must be >= 0"):
        synthetic.device_trace([(0, 0, "f", 0.0, -1.0)])
    with pytest.raises(ValueError, match="'TPU' or 'GPU'"):
        synthetic.device_trace([(0, 0, "f", 0.0, 1.0)], platform="CPU")
    with pytest.raises(ValueError, match="one at a time.*platform='GPU'"):
        synthetic.device_trace([(0, 0, "f", 0.0, 2.0), (0, 0, "all-gather", 1.0, 2.0)])
