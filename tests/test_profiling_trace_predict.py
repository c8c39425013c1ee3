"""scalelib.profiling.trace.predict: each op's measured time next to its roofline time (a table, never a speed)."""

import math

import pytest

from scalelib.machine import MeasuredRoofline
from scalelib.profiling import trace
from tests import trace_cases

ROOF = MeasuredRoofline(flops_per_s=2e10, bytes_per_s=5e9)


def test_roofline_time_is_the_slower_ceiling():
    assert trace.roofline_time_s(4e10, 1e9, ROOF) == (2.0, "compute")
    assert trace.roofline_time_s(1e9, 1e10, ROOF) == (2.0, "memory")


def test_table_is_well_formed_for_every_program():
    for case in trace_cases.cases():
        tr = case.trace
        table = trace.predicted_vs_measured(tr, ROOF)
        names = [p.name for p in table]
        assert len(names) == len(set(names)) and set(names) == {op.name for op in tr.ops if op.flops or op.bytes}
        assert [p.measured_s for p in table] == sorted((p.measured_s for p in table), reverse=True)
        for p in table:
            runs = [op for op in tr.ops if op.name == p.name]
            assert p.runs == len(runs) and p.kind == runs[0].kind and p.scope == runs[0].scope
            assert p.predicted_s == max(p.flops / ROOF.flops_per_s, p.bytes / ROOF.bytes_per_s) > 0
            assert p.bound == ("compute" if p.flops / ROOF.flops_per_s >= p.bytes / ROOF.bytes_per_s else "memory")
            lo, hi = min(op.duration_s - op.wait_s for op in runs), max(op.duration_s - op.wait_s for op in runs)
            assert lo <= p.measured_s <= hi and math.isfinite(p.ratio) and p.ratio >= 0
        one = trace.predicted_vs_measured(tr, ROOF, step=-1)
        assert {p.name for p in one} == set(names) and all(p.runs == p_all.runs // tr.steps for p, p_all in
                                                           zip(sorted(one, key=lambda p: p.name),
                                                               sorted(table, key=lambda p: p.name)))


def test_the_ffw_matmuls_are_compute_bound_rows():
    table = trace.predicted_vs_measured(trace_cases.case("ffw").trace, ROOF)
    dots = [p for p in table if p.flops]
    assert sorted(p.scope for p in dots) == ["down_projection", "up_projection"]
    assert all(p.predicted_s == pytest.approx(p.flops / ROOF.flops_per_s) for p in dots if p.bound == "compute")


def test_a_trace_read_without_hlo_cannot_be_predicted():
    cap = trace_cases.case("ffw").capture
    with pytest.raises(ValueError, match="without the compiled HLO"):
        trace.predicted_vs_measured(trace.read(cap.xspace, module=cap.module), ROOF)
