"""Each op's measured time next to the time its FLOPs and bytes predict (book sections 1 and 9).

The roofline says an op takes at least max(FLOPs / peak FLOPs/s, bytes / memory bandwidth). With
the ceilings of *this* machine, measured as in chapter 1 (``scalelib.machine``), each op of a trace
can be placed against its own lower bound: a ratio near 1 means the op runs at the roofline, a large
ratio means time lost somewhere (overheads, a poor kernel, a busy machine). FLOPs count matmuls
only, and bytes are what the op reads plus what it writes, once each (``match.index_hlo``): the two
quantities the roofline needs, without the small elementwise arithmetic a memory-bound op also does.

A collective is timed from the moment every device arrived (its waiting is not data movement), and
on simulated CPU devices its bytes move through the same memory as everything else, so it is held
against the memory ceiling too.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from scalelib.machine import MeasuredRoofline
from scalelib.profiling.trace.read import OpRun, Trace


@dataclass(frozen=True)
class OpPrediction:
    """One op: its median measured time over devices and steps, and its roofline time."""

    name: str
    kind: str
    scope: str
    runs: int
    flops: float
    bytes: int
    measured_s: float  # median over runs (collectives: after every device arrived)
    predicted_s: float  # max(flops / peak, bytes / bandwidth)
    bound: str  # "compute" or "memory": the ceiling that sets predicted_s

    @property
    def ratio(self) -> float:
        """Measured over predicted: how many times slower than the roofline allows."""
        return self.measured_s / self.predicted_s


def roofline_time_s(flops: float, nbytes: float, roofline: MeasuredRoofline) -> tuple[float, str]:
    """The roofline's lower bound on an op's time, and which ceiling sets it."""
    compute, memory = flops / roofline.flops_per_s, nbytes / roofline.bytes_per_s
    return (compute, "compute") if compute >= memory else (memory, "memory")


def busy_s(op: OpRun) -> float:
    """An op's time doing its work: a collective's wait for the other devices is left out."""
    return op.duration_s - op.wait_s


def predicted_vs_measured(trace: Trace, roofline: MeasuredRoofline,
                          step: int | None = None) -> tuple[OpPrediction, ...]:
    """Every op with known FLOPs or bytes, measured against its roofline time; longest measured first.

    Needs a trace read with the compiled HLO (``read(capture)`` or ``read(..., hlo_text=...)``).
    """
    if trace.matched == 0:
        raise ValueError("the trace was read without the compiled HLO, so no op has FLOPs or bytes; read it "
                         "with read(capture) or read(path, hlo_text=jitted.lower(*args).compile().as_text())")
    k = None if step is None else trace.step(step)[0].step
    runs: dict[str, list[OpRun]] = {}
    for op in trace.ops:
        if (k is None or op.step == k) and (op.flops or op.bytes):
            runs.setdefault(op.name, []).append(op)
    out = []
    for name, rs in runs.items():
        predicted, bound = roofline_time_s(rs[0].flops, rs[0].bytes, roofline)
        out.append(OpPrediction(name, rs[0].kind, rs[0].scope, len(rs), rs[0].flops, rs[0].bytes,
                                statistics.median(busy_s(r) for r in rs), predicted, bound))
    return tuple(sorted(out, key=lambda p: (-p.measured_s, p.name)))
