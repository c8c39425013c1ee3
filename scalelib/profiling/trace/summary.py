"""What a trace says about a step (book section 9): where the time went, op by op and kind by kind.

* ``op_stats``: every op's total and mean time, heaviest first; the first one dominates the step.
* ``time_by_kind``: per device and step, seconds of compute, of collectives moving data, of
  collectives waiting for the other devices to arrive, of copies, and idle (no op running).
* ``comm_overlap``: per device and step, how much of the time a collective was in flight had a
  compute op running next to it on the same device (hidden) and how much had none (exposed). An
  asynchronous collective (``all-gather-start`` ... ``all-gather-done`` on a TPU or GPU) is in
  flight from its start op to its done op; a synchronous one (XLA:CPU) only while its op runs.

All times are means per step over the steps asked for (default: every step in the trace).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scalelib.profiling.trace.read import OpRun, Trace

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same time as ``intervals``."""
    out: list[Interval] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        elif end > start:
            out.append((start, end))
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in union(intervals))


def overlap_length(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Time covered by both ``a`` and ``b``."""
    ua, ub = union(a), union(b)
    total, j = 0.0, 0
    for start, end in ua:
        while j < len(ub) and ub[j][1] <= start:
            j += 1
        k = j
        while k < len(ub) and ub[k][0] < end:
            total += min(end, ub[k][1]) - max(start, ub[k][0])
            k += 1
    return total


def _steps(trace: Trace, step: int | None) -> list[int]:
    return list(range(trace.steps)) if step is None else [trace.step(step)[0].step]


def step_span(ops: Sequence[OpRun]) -> Interval:
    """From the first op's start to the last op's end, over every device."""
    return min(op.start_s for op in ops), max(op.end_s for op in ops)


@dataclass(frozen=True)
class OpStat:
    """One HLO op over every device and step it ran on."""

    name: str
    kind: str
    scope: str
    runs: int
    total_s: float
    mean_s: float
    share: float  # of the time of all op runs together


def op_stats(trace: Trace, step: int | None = None) -> tuple[OpStat, ...]:
    """Per op name: runs, total and mean time, share of all op time; heaviest total first."""
    ops = [op for op in trace.ops if step is None or op.step in _steps(trace, step)]
    by_name: dict[str, list[OpRun]] = {}
    for op in ops:
        by_name.setdefault(op.name, []).append(op)
    grand = sum(op.duration_s for op in ops)
    stats = [OpStat(name, runs[0].kind, runs[0].scope, len(runs), sum(r.duration_s for r in runs),
                    statistics.fmean(r.duration_s for r in runs), sum(r.duration_s for r in runs) / grand)
             for name, runs in by_name.items()]
    return tuple(sorted(stats, key=lambda s: (-s.total_s, s.name)))


@dataclass(frozen=True)
class KindTimes:
    """Seconds per step one device spent on each kind of op (means over steps)."""

    device: int
    compute_s: float
    collective_s: float  # collectives after every peer arrived: moving data
    waiting_s: float  # collectives before that: waiting for the other devices
    copy_s: float
    idle_s: float  # no op of this device running
    span_s: float  # the step, first op to last op over all devices

    def as_dict(self) -> dict[str, float]:
        return {"compute": self.compute_s, "collective": self.collective_s, "waiting": self.waiting_s,
                "copy": self.copy_s, "idle": self.idle_s}


def time_by_kind(trace: Trace, step: int | None = None) -> tuple[KindTimes, ...]:
    """Per device: compute, collective (moving data), waiting, copy and idle seconds per step.

    When ops of one device overlap (an executor may run independent ops at once) the kinds add up
    to more than the busy time; ``idle_s`` is always the step minus the time any op was running.
    """
    steps = _steps(trace, step)
    out = []
    for device in trace.devices:
        sums = dict.fromkeys(("compute", "collective", "waiting", "copy", "idle", "span"), 0.0)
        for k in steps:
            ops, mine = trace.step(k), trace.on(device, k)
            start, end = step_span(ops)
            sums["span"] += end - start
            sums["idle"] += (end - start) - length((op.start_s, op.end_s) for op in mine)
            for op in mine:
                sums[op.kind] += op.duration_s - op.wait_s
                sums["waiting"] += op.wait_s
        n = len(steps)
        out.append(KindTimes(device, sums["compute"] / n, sums["collective"] / n, sums["waiting"] / n,
                             sums["copy"] / n, sums["idle"] / n, sums["span"] / n))
    return tuple(out)


def in_flight(ops: Sequence[OpRun], trace: Trace | None = None) -> list[Interval]:
    """When the collectives among ``ops`` (one device) were in flight.

    A ``-done`` op closes the interval its ``-start`` op opened (matched through the HLO operand when
    the trace has the compiled program, else by name); any other collective is in flight while it runs.
    """
    start_of = {i.name: i.operands[0] for i in (trace.instructions if trace else ()) if i.opcode.endswith("-done")
                and i.operands}
    out, opened = [], {}
    for op in sorted(ops, key=lambda o: o.start_s):
        if op.kind != "collective":
            continue
        if "-start" in op.name or op.opcode.endswith("-start"):
            opened[op.name] = op.start_s
        elif "-done" in op.name or op.opcode.endswith("-done"):
            begin = opened.pop(start_of.get(op.name, op.name.replace("-done", "-start")), op.start_s)
            out.append((begin, op.end_s))
        else:
            out.append((op.start_s, op.end_s))
    return out


@dataclass(frozen=True)
class CommOverlap:
    """Collective time of one device per step, split by whether a compute op ran next to it."""

    device: int
    collective_s: float  # time any collective was in flight
    hidden_s: float  # ... while a compute op of this device was running
    span_s: float

    @property
    def exposed_s(self) -> float:
        return self.collective_s - self.hidden_s

    @property
    def exposed_fraction(self) -> float:
        """Share of the step spent in communication that nothing hid."""
        return self.exposed_s / self.span_s if self.span_s > 0 else 0.0

    @property
    def hidden_fraction(self) -> float:
        """Share of the communication that ran under compute."""
        return self.hidden_s / self.collective_s if self.collective_s > 0 else 0.0


def comm_overlap(trace: Trace, step: int | None = None) -> tuple[CommOverlap, ...]:
    """Per device: seconds of collectives in flight per step, and how many of them compute hid."""
    steps = _steps(trace, step)
    out = []
    for device in trace.devices:
        coll = hidden = span = 0.0
        for k in steps:
            mine = trace.on(device, k)
            flight = in_flight(mine, trace)
            compute = [(op.start_s, op.end_s) for op in mine if op.kind == "compute"]
            coll += length(flight)
            hidden += overlap_length(flight, compute)
            start, end = step_span(trace.step(k))
            span += end - start
        n = len(steps)
        out.append(CommOverlap(device, coll / n, hidden / n, span / n))
    return tuple(out)
