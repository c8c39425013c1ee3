"""Profiling from real traces (book section 9): capture, read, summarise and draw what actually ran.

* ``capture``: trace a jitted program's steady-state runs (compiled and warmed up outside the trace)
  and keep the trace with the compiled HLO whose instruction names the trace uses.
* ``read``: the trace as frozen ``OpRun`` records, per device: which op, when, how long, its kind
  (compute, collective, copy; a collective's wait for the other devices kept apart), its named scope,
  and from the HLO its FLOPs and bytes. Empty or cut-short traces raise ``TraceError`` saying what to do.
* ``summary``: the ops that dominate, time per kind per device, communication hidden under compute
  vs exposed; ``critical``: the chain of ops that set a step's length; ``predict``: each op's time
  next to the time its FLOPs and bytes predict on a measured roofline (``scalelib.machine``).
* ``plot``: a timeline with one row per device, and an export Perfetto's UI opens; ``synthetic``: a trace
  laid out as an accelerator writes it (device planes, async collectives) from op times you choose.

Only ``scalelib.compat`` knows how JAX versions differ in parsing a trace and in naming XLA:CPU ops.
"""

from scalelib.profiling.trace.capture import Capture, capture
from scalelib.profiling.trace.critical import CriticalPath, PathSegment, critical_path
from scalelib.profiling.trace.match import KINDS, HloInstruction, index_hlo, scope_of
from scalelib.profiling.trace.plot import timeline, to_perfetto
from scalelib.profiling.trace.predict import OpPrediction, predicted_vs_measured, roofline_time_s
from scalelib.profiling.trace.read import OpRun, Trace, TraceError, read
from scalelib.profiling.trace.summary import (
    CommOverlap,
    KindTimes,
    OpStat,
    comm_overlap,
    op_stats,
    step_span,
    time_by_kind,
)
from scalelib.profiling.trace.synthetic import device_trace

__all__ = ["KINDS", "Capture", "CommOverlap", "CriticalPath", "HloInstruction", "KindTimes", "OpPrediction", "OpRun",
           "OpStat", "PathSegment", "Trace", "TraceError", "capture", "comm_overlap", "critical_path", "device_trace",
           "index_hlo", "op_stats", "predicted_vs_measured", "read", "roofline_time_s", "scope_of", "step_span",
           "time_by_kind", "timeline", "to_perfetto"]
