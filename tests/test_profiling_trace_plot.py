"""scalelib.profiling.trace.plot: the timeline draws, and the Perfetto export is valid trace-event JSON."""

import gzip
import json

import matplotlib.pyplot as plt
import pytest

from scalelib.profiling import trace
from scalelib.profiling.trace import plot
from tests import trace_cases


def test_timeline_draws_one_row_per_device_and_a_bar_per_op():
    tr = trace_cases.case("ffw").trace
    ax = trace.timeline(tr)
    try:
        assert [t.get_text() for t in ax.get_yticklabels()] == [f"device {d}" for d in range(8)]
        step = tr.step(-1)
        waits = sum(op.wait_s > 0 for op in step)
        spans = sum(len(plot._scope_spans(tr.on(d, step[0].step))) for d in tr.devices)
        assert len(ax.collections) == len(step) + waits + spans  # a collective that waited is drawn in two colours
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend == [*plot.COLOURS, "scope down_projection", "scope up_projection"]  # named scopes are labelled
        assert {t.get_text() for t in ax.texts} <= {"up_projection", "down_projection"}
    finally:
        plt.close(ax.figure)
    ax = trace.timeline(trace_cases.case("ring_loop").trace, step=0, devices=[0, 3], scopes=False)
    assert len(ax.get_yticklabels()) == 2 and not ax.texts
    plt.close(ax.figure)


def test_overlapping_ops_get_their_own_lanes():
    ops = tuple(trace.OpRun(n, 0, 0, s, d, "compute") for n, s, d in (("a", 0.0, 2.0), ("b", 1.0, 2.0), ("c", 2.5, 1.0)))
    lanes = plot._lanes(ops)
    assert [lanes[id(o)] for o in ops] == [(0, 2), (1, 2), (0, 2)]


def test_perfetto_export_holds_every_op_per_device(tmp_path):
    tr = trace_cases.case("reduce_scatter").trace
    for name, load in (("t.json", lambda p: json.loads(p.read_text())),
                       ("t.json.gz", lambda p: json.loads(gzip.decompress(p.read_bytes())))):
        data = load(trace.to_perfetto(tr, tmp_path / name))
        events = data["traceEvents"]
        ops = [e for e in events if e["ph"] == "X" and e["cat"] != "waiting"]
        assert len(ops) == len(tr.ops) and {e["pid"] for e in ops} == set(tr.devices)
        assert sum(e.get("cat") == "waiting" for e in events) == sum(op.wait_s > 0 for op in tr.ops)
        names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
        assert names == {f"device {d}" for d in tr.devices}
        first = min(ops, key=lambda e: e["ts"])
        assert first["ts"] == 0 and {"step", "scope", "flops", "bytes"} <= set(first["args"])


def test_short_steps_are_drawn_in_microseconds_and_touching_ops_share_a_lane():
    ops = [(0, 0, "fusion.1", 0.0, 2e-6), (0, 0, "all-gather-start", 2e-6, 0.5e-6), (0, 0, "fusion.2", 2.5e-6, 3e-6)]
    tr = trace.read(trace.device_trace(ops))
    ax = trace.timeline(tr)
    try:
        assert ax.get_xlabel() == "us from the start of step 0" and ax.get_xlim()[1] == pytest.approx(5.5)
        assert {lane for lane, _ in plot._lanes(tr.ops).values()} == {0}
    finally:
        plt.close(ax.figure)
