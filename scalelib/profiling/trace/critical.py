"""The critical path of one step (book section 9): the chain of ops that set how long it took.

Walk back from the op that finished last. On its device, the op before it is the one that ended
last before it started; a gap between the two is idle time (dispatch, the executor, the OS). A
collective cannot finish before every device taking part has arrived, so when one of them arrived
later than this device, the path jumps to that device at its arrival: the time this device waited
is not on the path, and the late device's earlier ops are. Speeding up any op off the path cannot
shorten the step; speeding up one on it can.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from scalelib.profiling.trace.read import OpRun, Trace
from scalelib.profiling.trace.summary import step_span

_EPS_S = 1e-9  # events are stamped in ns


@dataclass(frozen=True)
class PathSegment:
    device: int
    name: str  # the op ("" for idle time)
    kind: str  # "compute", "collective", "copy" or "idle"
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class CriticalPath:
    step: int
    segments: tuple[PathSegment, ...]  # in time order, from the step's start to its end

    @property
    def span_s(self) -> float:
        return self.segments[-1].end_s - self.segments[0].start_s

    def by_kind(self) -> dict[str, float]:
        """Seconds of the path per kind; they add up to the step's span."""
        out = dict.fromkeys(("compute", "collective", "copy", "idle"), 0.0)
        for s in self.segments:
            out[s.kind] += s.duration_s
        return out


def _runs(ops: list[OpRun]) -> dict[tuple[int, str, int], OpRun]:
    """Each op by (device, name, k): the k-th run of that name on that device (loops repeat names)."""
    out: dict[tuple[int, str, int], OpRun] = {}
    seen: Counter = Counter()
    for op in sorted(ops, key=lambda o: o.start_s):
        out[(op.device, op.name, seen[(op.device, op.name)])] = op
        seen[(op.device, op.name)] += 1
    return out


def critical_path(trace: Trace, step: int = -1) -> CriticalPath:
    """The critical path of step ``step`` (default: the last one)."""
    ops = list(trace.step(step))
    first, _ = step_span(ops)
    by_device: dict[int, list[OpRun]] = {}
    for op in ops:
        by_device.setdefault(op.device, []).append(op)
    runs = _runs(ops)
    occurrence = {id(op): k for (_, _, k), op in runs.items()}
    seen: Counter = Counter()
    cur = max(ops, key=lambda o: o.end_s)
    t = cur.end_s
    segments: list[PathSegment] = []
    for _ in range(2 * len(ops) + 2):
        seen[id(cur)] += 1
        start = cur.start_s
        if cur.kind == "collective":
            peers = cur.peers or tuple(by_device)
            twins = [runs[key] for p in peers if (key := (p, cur.name, occurrence[id(cur)])) in runs]
            last = max(twins, key=lambda o: o.start_s, default=cur)
            if last.device != cur.device and last.start_s > cur.start_s:
                segments.append(PathSegment(cur.device, cur.name, "collective", min(last.start_s, t), t))
                cur, t = last, min(last.start_s, t)
                seen[id(cur)] += 1
                start = t
            else:
                segments.append(PathSegment(cur.device, cur.name, cur.kind, min(start, t), t))
        else:
            segments.append(PathSegment(cur.device, cur.name, cur.kind, min(start, t), t))
        t = min(start, t)
        before = [o for o in by_device[cur.device] if o.end_s <= t + _EPS_S and not seen[id(o)]]
        if not before:
            break
        prev = max(before, key=lambda o: o.end_s)
        if t - prev.end_s > 0:
            segments.append(PathSegment(cur.device, "", "idle", prev.end_s, t))
        cur, t = prev, min(prev.end_s, t)
    if t > first:
        segments.append(PathSegment(cur.device, "", "idle", first, t))
    return CriticalPath(ops[0].step, tuple(reversed(segments)))
