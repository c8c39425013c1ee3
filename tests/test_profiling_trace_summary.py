"""scalelib.profiling.trace.summary: op totals, time per kind per device, hidden vs exposed communication."""

import math

import pytest

from scalelib.profiling import trace
from scalelib.profiling.trace import summary
from tests import trace_cases

US = 1e-6


def op(name, device, start_us, dur_us, kind="compute", wait_us=0.0, step=0):
    return trace.OpRun(name, device, step, start_us * US, dur_us * US, kind, wait_us * US)


def test_interval_arithmetic():
    assert summary.union([(3, 4), (0, 2), (1, 2.5), (5, 5)]) == [(0, 2.5), (3, 4)]
    assert summary.length([(0, 2), (1, 3), (10, 11)]) == 4
    assert summary.overlap_length([(0, 4), (6, 8)], [(1, 2), (3, 7)]) == 1 + 1 + 1
    assert summary.overlap_length([(0, 1)], []) == 0


def test_hand_made_step_splits_into_kinds_and_exposed_communication():
    """Device 0: matmul 0-4 us, all-reduce 4-10 (waits 3), a copy 10-11. Device 1: matmul 1-7 us (late),
    a compute op 8-9 next to its all-reduce 7-10: 1 us of that collective is hidden."""
    ops = (op("dot", 0, 0, 4), op("all-reduce", 0, 4, 6, "collective", 3), op("copy", 0, 10, 1, "copy"),
           op("dot", 1, 1, 6), op("all-reduce", 1, 7, 3, "collective"), op("fusion", 1, 8, 1))
    tr = trace.Trace("jit_hand", "cpu", ops)
    k0, k1 = summary.time_by_kind(tr)
    assert (k0.compute_s, k0.collective_s, k0.waiting_s, k0.copy_s, k0.idle_s) == pytest.approx(
        (4 * US, 3 * US, 3 * US, 1 * US, 0.0))
    assert (k1.compute_s, k1.idle_s, k1.span_s) == pytest.approx((7 * US, 2 * US, 11 * US))
    c0, c1 = summary.comm_overlap(tr)
    assert (c0.collective_s, c0.hidden_s, c0.exposed_fraction) == pytest.approx((6 * US, 0.0, 6 / 11))
    assert (c1.collective_s, c1.hidden_s, c1.exposed_s) == pytest.approx((3 * US, 1 * US, 2 * US))
    assert c1.hidden_fraction == pytest.approx(1 / 3)
    stats = summary.op_stats(tr)
    assert [s.name for s in stats] == ["dot", "all-reduce", "copy", "fusion"]
    assert stats[0].total_s == pytest.approx(10 * US) and stats[0].mean_s == pytest.approx(5 * US)
    assert math.isclose(sum(s.share for s in stats), 1.0)


def test_async_collective_is_in_flight_from_start_to_done():
    tr = trace.read(trace_cases.tpu_shaped_xspace())
    for c in summary.comm_overlap(tr):
        assert (c.collective_s, c.hidden_s, c.exposed_s) == pytest.approx((4.5 * US, 3 * US, 1.5 * US))
    by_kind = summary.time_by_kind(tr, step=1)
    assert [k.compute_s for k in by_kind] == pytest.approx([5 * US, 5 * US])


def test_real_traces_add_up():
    for case in trace_cases.cases():
        tr = case.trace
        stats = summary.op_stats(tr)
        assert stats[0].total_s == max(s.total_s for s in stats) and sum(s.runs for s in stats) == len(tr.ops)
        assert math.isclose(sum(s.share for s in stats), 1.0)
        for kinds, comm in zip(summary.time_by_kind(tr), summary.comm_overlap(tr)):
            # XLA:CPU runs one op of a device at a time here, so kinds and idle time tile the step
            assert sum(kinds.as_dict().values()) == pytest.approx(kinds.span_s, rel=1e-9)
            assert 0 <= comm.hidden_s <= comm.collective_s <= comm.span_s
            assert comm.collective_s == pytest.approx(kinds.collective_s + kinds.waiting_s, rel=1e-9)
        with pytest.raises(ValueError, match="step 9 is not in the trace"):
            summary.time_by_kind(tr, step=9)
