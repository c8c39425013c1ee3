"""scalelib.profiling.trace.synthetic: accelerator-shaped traces from chosen op times read back exactly."""

import pytest

from scalelib.profiling import trace
from scalelib.profiling.trace import synthetic


def test_synthetic_device_traces_round_trip():
    ops = [(d, s, name, (10 * s + start + d) * 1e-6, dur * 1e-6) for d in range(3) for s in range(2)
           for name, start, dur in (("fusion.7", 0.0, 1.5), ("collective-permute-start", 1.5, 0.25),
                                    ("collective-permute-done", 2.0, 0.75))]
    tr = trace.read(synthetic.device_trace(ops, "jit_ring", platform="GPU"))
    assert (tr.platform, tr.module, tr.devices, tr.steps) == ("gpu", "jit_ring", (0, 1, 2), 2)
    got = sorted((o.device, o.step, o.name, round(o.start_s * 1e6, 9), round(o.duration_s * 1e6, 9)) for o in tr.ops)
    assert got == sorted((d, s, n, round(t * 1e6, 9), round(u * 1e6, 9)) for d, s, n, t, u in ops)
    with pytest.raises(ValueError, match="at least one"):
        synthetic.device_trace([])
    with pytest.raises(ValueError, match="must be >= 0"):
        synthetic.device_trace([(0, 0, "f", 0.0, -1.0)])
