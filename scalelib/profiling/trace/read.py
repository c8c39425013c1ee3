"""Read a profiler trace into plain records: which op ran on which device, when, and for how long.

Book section 9 reads a profile in the trace viewer; here the same data becomes frozen records a
program (or a student) can compute with. ``jax.profiler.trace`` writes an ``.xplane.pb`` file
(protobuf ``XSpace``): planes (the host, each accelerator) holding lines (threads, streams) holding
timed events with stats. JAX parses it with ``jax.profiler.ProfileData``; ``read`` keeps the XLA ops:

* On simulated CPU devices every op is an event on an executor thread of the ``/host:CPU`` plane,
  with stats naming the HLO op (``hlo_op``), its module (``hlo_module``; ``program_id`` tells apart
  programs of one name, such as two ``jit__lambda``), the device it ran for (``device_ordinal``)
  and the execution it belongs to (``run_id``: one per step, shared by all devices). A thread is not a
  device (one thread serves several devices over a run), so records are grouped by that stat. A
  collective holds a ``Rendezvous`` event: the time it waited for the other devices to arrive, with
  the devices taking part.
* On a TPU every core has a ``/device:TPU:N`` plane whose ``XLA Ops`` line holds the ops and whose
  ``XLA Modules`` line marks each run of a program (a step). The course checks this layout on a
  hand-written TPU-shaped trace only.
* On a GPU each ``/device:GPU:N`` plane has a line per CUDA stream holding the kernels, each with an
  ``hlo_op`` stat and a ``correlation_id`` that the host's launch of it (on a ``/host:CPU`` thread,
  inside the program execution that carries the ``run_id``) shares: that gives the step. XLA:GPU
  runs a sequence of kernels as one CUDA graph (a "command buffer"); its kernels carry the graph's
  name as ``hlo_op`` (``command_buffer_1``), so the op is read from the kernel's own name, which XLA
  takes from the fusion's with ``.`` written ``_`` (``gemm_fusion_dot_2`` runs ``gemm_fusion_dot.2``).
  A kernel of a graph that is no instruction's (a cuBLAS kernel) keeps its kernel name. The suite
  reads a trace taken on an H200 (tests/data/gpu_trace, made by tools/gpu_trace_sample.py).

A loop (``while``) is traced as one event around the ops of its body; such enclosing events are
dropped, so the records never count the same time twice on one thread.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalelib import compat
from scalelib.profiling.trace.capture import Capture
from scalelib.profiling.trace.match import HloInstruction, index_hlo, kind_by_name, module_name

_DEVICE_PLANE = re.compile(r"^/device:([A-Za-z]+):(\d+)$")
_PEERS = re.compile(r"global_devices=\[([\d, ]*)\]")
_COMMAND_BUFFER = re.compile(r"^command_buffer(_\d+)?$")  # XLA:GPU's CUDA-graph thunk
_KERNEL_NUMBER = re.compile(r"_(\d+)$")  # kernel "loop_reduce_fusion_1" runs instruction "loop_reduce_fusion.1"


class TraceError(ValueError):
    """A trace that cannot be read; the message says what was wrong and what to do."""


@dataclass(frozen=True)
class OpRun:
    """One run of one HLO op on one device (times in seconds from the trace's first op)."""

    name: str  # the HLO instruction, e.g. "fusion.3", "all-gather"
    device: int
    step: int  # 0 for the first traced run of the program, 1 for the next, ...
    start_s: float
    duration_s: float
    kind: str  # "compute", "collective" or "copy"
    wait_s: float = 0.0  # part of duration_s spent waiting for the other devices (collectives)
    scope: str = ""  # named scopes it was written under ("" when none)
    opcode: str = ""  # HLO opcode ("" when no HLO was given)
    flops: float = 0.0  # matmul FLOPs (0 when no HLO was given)
    bytes: int = 0  # operand + result bytes (0 when no HLO was given)
    peers: tuple[int, ...] = ()  # devices taking part in a collective, when the trace says
    thread: str = ""  # the trace line (executor thread, stream) it ran on

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(frozen=True)
class Trace:
    """The ops of one program in a trace, sorted by step, device and start."""

    module: str  # HLO module name, e.g. "jit_step"
    platform: str  # "cpu", "tpu", "gpu"
    ops: tuple[OpRun, ...]
    matched: int = 0  # ops found in the compiled HLO (0 when none was given)
    instructions: tuple[HloInstruction, ...] = field(default=(), repr=False)

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({op.device for op in self.ops}))

    @property
    def steps(self) -> int:
        return 1 + max(op.step for op in self.ops)

    @property
    def median_step(self) -> int:
        """The step of median length (first op to last op over all devices): a typical step to look at."""
        spans: dict[int, tuple[float, float]] = {}
        for op in self.ops:
            lo, hi = spans.get(op.step, (op.start_s, op.end_s))
            spans[op.step] = (min(lo, op.start_s), max(hi, op.end_s))
        return sorted(spans, key=lambda k: (spans[k][1] - spans[k][0], k))[(len(spans) - 1) // 2]

    def step(self, k: int) -> tuple[OpRun, ...]:
        """The ops of step ``k`` (negative counts from the end)."""
        k = k + self.steps if k < 0 else k
        if not 0 <= k < self.steps:
            raise ValueError(f"step {k} is not in the trace, which holds steps 0..{self.steps - 1}")
        return tuple(op for op in self.ops if op.step == k)

    def on(self, device: int, step: int | None = None) -> tuple[OpRun, ...]:
        """The ops of one device (of one step, or of all)."""
        return tuple(op for op in self.ops if op.device == device and (step is None or op.step == step))


def _load(source: bytes | str | os.PathLike) -> tuple[bytes, str]:
    """The serialized XSpace of ``source`` (bytes, an .xplane.pb file, or a directory holding one)."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), "the trace data"
    path = Path(os.fspath(source))
    if path.is_dir():
        found = sorted(path.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise TraceError(f"no .xplane.pb file under {path}: jax.profiler.trace writes it when its block ends, "
                             "so run the program inside the block and read the directory after it")
        path = found[-1]
    if not path.exists():
        raise TraceError(f"{path} does not exist; pass the .xplane.pb file or the directory given to "
                         "jax.profiler.trace")
    return path.read_bytes(), str(path)


def _module_run(ev: Any) -> tuple[int, str, str | None]:
    """(start, module, program id) of an ``XLA Modules`` event such as "jit_step(7)"."""
    named = re.fullmatch(r"(.*?)(?:\((\d+)\))?", ev.name)
    assert named is not None  # the pattern matches every string
    return ev.start_ns, named.group(1), named.group(2)


def _launch_runs(pd: Any) -> dict[str, Any]:
    """GPU traces: correlation id of each launch on a host thread -> run id of the program execution around it."""
    runs: dict[str, Any] = {}
    for plane in pd.planes:
        if _DEVICE_PLANE.match(plane.name):
            continue
        for line in plane.lines:
            executions, launches = [], []
            for ev in line.events:
                stats = dict(ev.stats)
                if "run_id" in stats and "hlo_op" not in stats:  # an execution, not a CPU op
                    executions.append((ev.start_ns, ev.start_ns + ev.duration_ns, stats["run_id"]))
                elif "correlation_id" in stats:
                    launches.append((ev.start_ns, str(stats["correlation_id"])))
            executions.sort(key=lambda x: x[0])
            starts = [lo for lo, _, _ in executions]
            for start, corr in launches:  # the last execution begun before the launch, if it is still running
                k = bisect.bisect_right(starts, start) - 1
                if k >= 0 and start <= executions[k][1]:
                    runs[corr] = executions[k][2]
    return runs


def _kernel_op(hlo_op: str, kernel: str, index: dict[str, HloInstruction]) -> tuple[str, bool]:
    """(instruction, found) for a GPU kernel: its ``hlo_op``, or inside a CUDA graph the kernel's own name.

    ``found`` is False for a graph's kernel that is no instruction of ``index`` (a library kernel, such as
    cuBLAS's): it keeps its kernel name.
    """
    if not _COMMAND_BUFFER.match(hlo_op):
        return hlo_op, True
    named = _KERNEL_NUMBER.sub(r".\1", kernel)
    if not index:
        return named, True
    return next(((n, True) for n in (kernel, named) if n in index), (kernel, False))


def _events(pd: Any, index: dict[str, HloInstruction]) -> list[dict]:
    """Every XLA op event of a parsed XSpace, as mutable dicts (module, device, run, times, waits)."""
    ops: list[dict] = []
    launch_runs: dict[str, Any] | None = None
    for plane in pd.planes:
        dev_plane = _DEVICE_PLANE.match(plane.name)
        platform = dev_plane.group(1).lower() if dev_plane else "cpu"
        modules = []  # (start, name, program id) of each program run on a device plane: "jit_step(7)"
        for line in plane.lines:
            if dev_plane and line.name == "XLA Modules":
                modules += sorted((_module_run(ev) for ev in line.events), key=lambda m: m[0])
        for line in plane.lines:
            open_op: dict | None = None
            on_device_ops = bool(dev_plane) and line.name == "XLA Ops"
            gpu_stream = bool(dev_plane) and not on_device_ops  # one kernel per event; no loop events around them
            for ev in sorted(line.events, key=lambda e: e.start_ns):
                stats = dict(ev.stats)
                if "hlo_op" in stats or on_device_ops:
                    if open_op is not None and ev.start_ns < open_op["end"] and not gpu_stream:
                        open_op["container"] = True  # a loop or call around this op (a GPU's kernels may overlap)
                    device = stats.get("device_ordinal", dev_plane.group(2) if dev_plane else 0)
                    name, found = str(stats.get("hlo_op", ev.name)), True
                    if gpu_stream:
                        name, found = _kernel_op(name, ev.name, index)
                    open_op = {"name": name, "found": found, "module": str(stats.get("hlo_module", "")),
                               "device": int(device or 0), "program": stats.get("program_id"),
                               "run": stats.get("run_id"), "start": ev.start_ns, "end": ev.start_ns + ev.duration_ns,
                               "wait": 0.0, "peers": (), "thread": line.name, "platform": platform}
                    if open_op["run"] is None and "correlation_id" in stats:  # a GPU kernel: its launch's run
                        launch_runs = _launch_runs(pd) if launch_runs is None else launch_runs
                        open_op["run"] = launch_runs.get(str(stats["correlation_id"]))
                    if open_op["run"] is None:  # a device plane: the step is the module run around the op
                        before = [m for m in modules if m[0] <= ev.start_ns]
                        open_op["run"] = len(before)
                        open_op["module"] = open_op["module"] or (before[-1][1] if before else "")
                        open_op["program"] = before[-1][2] if before else None
                    ops.append(open_op)
                elif ev.name == "Rendezvous" and open_op is not None and ev.start_ns < open_op["end"]:
                    open_op["wait"] += ev.duration_ns
                    peers = _PEERS.search(str(stats.get("name", "")))
                    if peers:
                        open_op["peers"] = tuple(int(p) for p in peers.group(1).replace(" ", "").split(",") if p)
    return [op for op in ops if not op.get("container")]


def _one_program(module: str, events: list[dict], index: dict[str, HloInstruction]) -> list[dict]:
    """The events of the one program that was traced, among programs that share its module name.

    A trace records every program the process ran, and module names are not unique: every
    ``jax.jit(lambda ...)`` is ``jit__lambda``. When another thread runs such a namesake during a
    capture, the trace's program ids tell the two apart, and the compiled HLO picks the one traced:
    the program all of whose ops are its instructions.
    """
    programs = sorted({str(e["program"]) for e in events if e["program"] is not None})
    if len(programs) < 2:
        return events
    if index:
        fits = [p for p in programs  # every op of it an instruction (a library kernel in a CUDA graph aside)
                if all(e["name"] in index for e in events if str(e["program"]) == p and e["found"])
                and any(e["found"] for e in events if str(e["program"]) == p)]
        if len(fits) == 1:
            return [e for e in events if e["program"] is None or str(e["program"]) == fits[0]]
        if not fits:
            return events  # none is the HLO given: read() says which ops it lacks
    raise TraceError(f"the trace holds ops of {len(programs)} programs named {module!r} (program ids "
                     f"{', '.join(programs)}){' whose ops all match the HLO given' if index else ''}: several "
                     "programs of that name ran while the trace was taken. Trace with nothing else running "
                     "in the process, or give each function its own name (def step(...) rather than a lambda)"
                     f"{'' if index else ' and pass hlo_text= the compiled program traced (a Capture carries it)'}")


def read(source: Capture | bytes | str | os.PathLike, hlo_text: str | None = None,
         module: str | None = None) -> Trace:
    """Read the ops of one program from a trace into a ``Trace`` of ``OpRun`` records.

    ``source``: a ``capture.Capture`` (which brings its compiled HLO and module name), the bytes of
    an ``.xplane.pb``, its path, or the directory given to ``jax.profiler.trace``. ``hlo_text``: the
    compiled program (``jitted.lower(*args).compile().as_text()``); with it each op gets its opcode,
    kind, named scope, FLOPs and bytes, without it the kind is guessed from the op's name. ``module``:
    the HLO module to keep (default: the one ``hlo_text`` names, or the only one in the trace).
    """
    if isinstance(source, Capture):
        hlo_text, module, source = hlo_text or source.hlo_text, module or source.module, source.xspace
    data, what = _load(source)
    try:
        pd = compat.parse_xspace(data)
    except ValueError as err:
        raise TraceError(f"{what} is cut short or damaged: {err}. A trace is complete only once the "
                         "jax.profiler.trace block has ended; capture it again "
                         "(scalelib.profiling.trace.capture) and read the file after that") from None
    if not list(pd.planes):
        raise TraceError(f"{what} is empty (no profile planes): nothing was recorded. Run the jitted program "
                         "inside jax.profiler.trace, or use scalelib.profiling.trace.capture")
    index = index_hlo(hlo_text) if hlo_text else {}
    module = module or (module_name(hlo_text) if hlo_text else None)
    events = _events(pd, index)
    found: dict[str, int] = {}
    for e in events:
        found[e["module"]] = found.get(e["module"], 0) + 1
    if module is None:
        named = [m for m in found if m]
        if len(named) > 1:
            raise TraceError(f"the trace holds ops of several programs {found}; pass module= the one to read "
                             "(or hlo_text= its compiled HLO)")
        module = named[0] if named else ""
    events = _one_program(module, [e for e in events if e["module"] in (module, "")], index)
    if not events:
        raise TraceError(f"the trace holds no XLA ops of module {module!r} (ops per module: {found or 'none'}). "
                         "Call the jitted program once before the trace (to compile) and again inside it, "
                         "or pass module= one of the modules listed")
    runs = sorted({e["run"] for e in events}, key=lambda r: min(e["start"] for e in events if e["run"] == r))
    step_of = {r: k for k, r in enumerate(runs)}
    t0 = min(e["start"] for e in events)
    records, matched = [], 0
    for e in events:
        ins = index.get(e["name"])
        matched += ins is not None
        records.append(OpRun(e["name"], e["device"], step_of[e["run"]], (e["start"] - t0) * 1e-9,
                             (e["end"] - e["start"]) * 1e-9, ins.kind if ins else kind_by_name(e["name"]),
                             e["wait"] * 1e-9, ins.scope if ins else "", ins.opcode if ins else "",
                             ins.flops if ins else 0.0, ins.bytes if ins else 0, e["peers"], e["thread"]))
    missing = sorted({e["name"] for e in events if e["found"]} - set(index))
    if index and missing:
        raise TraceError(f"{len(missing)} of the trace's ops (e.g. {missing[:3]}) are not instructions of the HLO "
                         "given; pass the compiled text of the program that was traced")
    records.sort(key=lambda o: (o.step, o.device, o.start_s))
    return Trace(module, events[0]["platform"], tuple(records), matched,
                 tuple(index[n] for n in sorted(index)) if index else ())
