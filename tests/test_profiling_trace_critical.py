"""scalelib.profiling.trace.critical: the chain of ops that set a step's length."""

from itertools import pairwise

import pytest

from scalelib.profiling import trace
from tests import trace_cases

US = 1e-6


def op(name, device, start_us, dur_us, kind="compute", wait_us=0.0, peers=()):
    return trace.OpRun(name, device, 0, start_us * US, dur_us * US, kind, wait_us * US, peers=peers)


def test_a_late_device_puts_its_own_ops_on_the_path():
    """Device 1's matmul ends at 7 us, so device 0 waits in the all-reduce from 4 to 7 us: that wait is not on
    the path, device 1's matmul is."""
    ops = (op("dot", 0, 0, 4), op("all-reduce", 0, 4, 6, "collective", 3, (0, 1)), op("copy", 0, 10, 1, "copy"),
           op("fetch", 1, 0, 0.5), op("dot", 1, 1, 6), op("all-reduce", 1, 7, 3, "collective", 0, (0, 1)))
    path = trace.critical_path(trace.Trace("jit_hand", "cpu", ops), step=0)
    got = [(s.device, s.name, s.kind, round(s.start_s / US, 6), round(s.end_s / US, 6)) for s in path.segments]
    assert got == [(1, "fetch", "compute", 0, 0.5), (1, "", "idle", 0.5, 1), (1, "dot", "compute", 1, 7),
                   (0, "all-reduce", "collective", 7, 10), (0, "copy", "copy", 10, 11)]
    assert path.by_kind() == pytest.approx({"compute": 6.5 * US, "collective": 3 * US, "copy": 1 * US,
                                            "idle": 0.5 * US})
    assert path.span_s == pytest.approx(11 * US)


def test_repeated_collectives_are_matched_run_by_run():
    """A loop runs ppermute twice; each run waits for its own twin on the other device."""
    ops = (op("p", 0, 0, 2, "collective", 1.5, (0, 1)), op("f", 0, 2, 1), op("p", 0, 3, 6.2, "collective", 5, (0, 1)),
           op("p", 1, 1.5, 0.5, "collective", 0, (0, 1)), op("g", 1, 2, 6), op("p", 1, 8, 1, "collective", 0, (0, 1)))
    path = trace.critical_path(trace.Trace("jit_loop", "cpu", ops), step=0)
    assert [(s.device, s.name) for s in path.segments if s.kind != "idle"] == [(1, "p"), (1, "g"), (0, "p")]
    assert path.segments[0].start_s == 0 and path.segments[-1].end_s == pytest.approx(9.2 * US)
    assert path.segments[-1].start_s == pytest.approx(8 * US)  # device 0's second ppermute, once device 1 came


def test_real_steps_are_tiled_by_their_path():
    for case in trace_cases.cases():
        tr = case.trace
        for step in range(tr.steps):
            path = trace.critical_path(tr, step)
            start, end = trace.step_span(tr.step(step))
            segs = path.segments
            assert segs[0].start_s == start and segs[-1].end_s == end
            assert all(a.end_s == pytest.approx(b.start_s, abs=1e-12) for a, b in pairwise(segs))
            assert all(s.duration_s >= 0 for s in segs) and path.step == step
            assert sum(path.by_kind().values()) == pytest.approx(end - start, rel=1e-9)
            names = {op.name for op in tr.step(step)}
            assert all(s.name in names for s in segs if s.kind != "idle")
