"""Pictures of a trace (book section 9): a timeline like the trace viewer's, and a Perfetto file.

``timeline`` draws one row per device, each op a bar coloured by its kind, a collective's wait for
the other devices in its own colour, and under the ops a band naming the ``jax.named_scope`` each
run of ops was written in. Ops of one device that ran at the same time get stacked lanes.
``to_perfetto`` writes the same records as a Chrome trace-event JSON file, which
https://ui.perfetto.dev opens (one process per device), for zooming and clicking through an op's
details as in the real viewer. Like ``scalelib.plotting``, nothing here calls ``plt.show()``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Patch

from scalelib.profiling.trace.read import OpRun, Trace
from scalelib.profiling.trace.summary import step_span

COLOURS = {"compute": "#4C72B0", "collective": "#DD8452", "waiting": "#C9C9C9", "copy": "#55A868"}
_TOUCH_S = 1e-12  # ops closer than a picosecond (the trace's resolution) follow each other
SCOPE_COLOURS = ("#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD")


def _lanes(ops: Sequence[OpRun]) -> dict[int, tuple[int, int]]:
    """For each op (by id): its lane and the device's lane count, so overlapping ops do not hide each other."""
    ends: list[float] = []
    lane_of = {}
    for op in sorted(ops, key=lambda o: o.start_s):
        lane = next((i for i, end in enumerate(ends) if end <= op.start_s + _TOUCH_S), len(ends))
        if lane == len(ends):
            ends.append(op.end_s)
        ends[lane] = op.end_s
        lane_of[id(op)] = lane
    return {k: (v, max(len(ends), 1)) for k, v in lane_of.items()}


def _scope_spans(ops: Sequence[OpRun]) -> list[tuple[str, float, float]]:
    """Runs of consecutive ops under the same named scope: (scope, start, end)."""
    spans: list[tuple[str, float, float]] = []
    for op in sorted(ops, key=lambda o: o.start_s):
        if spans and spans[-1][0] == op.scope:
            spans[-1] = (op.scope, spans[-1][1], max(spans[-1][2], op.end_s))
        else:
            spans.append((op.scope, op.start_s, op.end_s))
    return [s for s in spans if s[0]]


def timeline(trace: Trace, step: int = -1, ax: Axes | None = None, devices: Sequence[int] | None = None,
             scopes: bool = True) -> Axes:
    """Draw step ``step`` (default: the last): one row per device, time from the step's start (ms or us).

    Each named scope gets its own colour in the band under the ops (and in the legend); its name is
    also written on the band wherever the band is wide enough to hold it.
    """
    ops = trace.step(step)
    devices = list(devices) if devices is not None else sorted({op.device for op in ops})
    t0, t1 = step_span(ops)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.55 * len(devices) + 1.2))
    unit, per_s = ("ms", 1e3) if t1 - t0 >= 1e-3 else ("us", 1e6)

    def at(t: float) -> float:  # time on the axis, in `unit` from the step's start
        return (t - t0) * per_s

    names = sorted({op.scope for op in ops if op.scope})
    scope_colour = {name: SCOPE_COLOURS[i % len(SCOPE_COLOURS)] for i, name in enumerate(names)}
    char_s = 0.0075 * (t1 - t0)  # about one character of the labels, in seconds of the axis
    for row, device in enumerate(devices):
        mine = [op for op in ops if op.device == device]
        lanes = _lanes(mine)
        for op in mine:
            lane, n = lanes[id(op)]
            height = 0.62 / n
            y = row - 0.31 + lane * height
            wait = min(op.wait_s, op.duration_s)
            if wait > 0:
                ax.broken_barh([(at(op.start_s), wait * per_s)], (y, height), color=COLOURS["waiting"])
            ax.broken_barh([(at(op.start_s + wait), (op.duration_s - wait) * per_s)], (y, height),
                           color=COLOURS[op.kind], edgecolor="white", linewidth=0.3)
        if scopes:
            for scope, start, end in _scope_spans(mine):
                ax.broken_barh([(at(start), (end - start) * per_s)], (row + 0.33, 0.12), color=scope_colour[scope])
                if end - start >= char_s * (len(scope) + 1):
                    ax.text(at(start), row + 0.5, scope, fontsize=7, va="bottom", ha="left", clip_on=True)
    ax.set_yticks(range(len(devices)), [f"device {d}" for d in devices])
    ax.set_ylim(len(devices) - 0.35, -0.6)
    ax.set_xlim(0, at(t1))
    ax.set_xlabel(f"{unit} from the start of step {ops[0].step}")
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    if scopes:
        handles += [Patch(color=scope_colour[name], label=f"scope {name}") for name in names]
    ax.legend(handles=handles, ncol=min(len(handles), 5), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              frameon=False)
    ax.set_title(f"{trace.module}: {len(devices)} devices, {sum(op.device in devices for op in ops)} op runs")
    return ax


def to_perfetto(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as trace-event JSON (gzipped if ``path`` ends in .gz) for https://ui.perfetto.dev."""
    path = Path(path)
    events: list[dict] = []
    for device in trace.devices:
        events.append({"ph": "M", "name": "process_name", "pid": device, "args": {"name": f"device {device}"}})
        mine = trace.on(device)
        lanes = _lanes(mine)
        for lane in range(max((n for _, n in lanes.values()), default=1)):
            events.append({"ph": "M", "name": "thread_name", "pid": device, "tid": lane,
                           "args": {"name": "XLA ops" if lane == 0 else f"XLA ops (lane {lane})"}})
        for op in mine:
            lane = lanes[id(op)][0]
            events.append({"ph": "X", "name": op.name, "cat": op.kind, "pid": device, "tid": lane,
                           "ts": op.start_s * 1e6, "dur": op.duration_s * 1e6,
                           "args": {"step": op.step, "scope": op.scope, "opcode": op.opcode, "flops": op.flops,
                                    "bytes": op.bytes, "wait_us": op.wait_s * 1e6, "thread": op.thread}})
            if op.wait_s > 0:
                events.append({"ph": "X", "name": "waiting for the other devices", "cat": "waiting", "pid": device,
                               "tid": lane, "ts": op.start_s * 1e6, "dur": min(op.wait_s, op.duration_s) * 1e6})
    text = json.dumps({"traceEvents": events, "displayTimeUnit": "ns",
                       "otherData": {"module": trace.module, "platform": trace.platform}})
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
