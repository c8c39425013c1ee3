"""Capture a profiler trace of a jitted program's steady-state runs (book section 9).

``capture`` calls the program ``warmup`` times outside the trace (the first call traces and
compiles it; timing that would measure the compiler), then ``steps`` more times inside
``jax.profiler.trace``, each waited for with ``block_until_ready`` so that every run ends inside the
trace. It keeps the serialized trace (the ``.xplane.pb`` bytes) with the compiled HLO of the
program, whose instruction names are the names the trace gives its ops; ``jax.named_scope`` labels
reach the trace through that HLO's metadata. JAX allows one profiler session per process, so
captures made from several threads take turns.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalelib import compat
from scalelib.profiling.trace.match import module_name
from scalelib.validate import positive_int

_PROFILER = threading.Lock()


@dataclass(frozen=True)
class Capture:
    """A trace of ``steps`` runs of one compiled program."""

    xspace: bytes = field(repr=False)  # the .xplane.pb file's content
    hlo_text: str = field(repr=False)  # the compiled program (its op names are the trace's)
    module: str  # HLO module name, e.g. "jit_step"
    steps: int
    platform: str  # "cpu", "gpu", "tpu"
    capture_s: float  # wall time of the traced runs, profiler start and stop included
    directory: str | None  # where the trace files were kept (None: a deleted temporary directory)


def _lowerable(fn: Callable[..., Any]) -> Any:
    if hasattr(fn, "lower"):
        return fn
    inner = getattr(fn, "jitted", None)  # e.g. scalelib.kernels.collective_matmul.on_mesh
    if inner is not None and hasattr(inner, "lower"):
        return inner
    raise TypeError(f"capture needs a jax.jit function (or a wrapper with a .jitted one), got {fn!r}; "
                    "wrap it with jax.jit first")


def capture(fn: Callable[..., Any], *args: Any, steps: int = 3, warmup: int = 1,
            directory: str | Path | None = None) -> Capture:
    """Trace ``steps`` runs of ``fn(*args)`` (a ``jax.jit`` function) after ``warmup`` untraced ones.

    With ``directory`` the trace files stay there (open them with XProf or TensorBoard); without it
    they go to a temporary directory that is removed once the trace is read into memory.
    """
    import jax

    positive_int("steps", steps)
    positive_int("warmup (runs before the trace, so the compile stays outside it)", warmup)
    hlo_text = _lowerable(fn).lower(*args).compile().as_text()
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    with _PROFILER, tempfile.TemporaryDirectory(prefix="scalelib-trace-") as tmp:
        where = Path(directory) if directory is not None else Path(tmp)
        before = {p: p.stat().st_mtime_ns for p in where.rglob("*.xplane.pb")}
        start = time.perf_counter()
        with compat.profiler_trace(str(where)):
            for _ in range(steps):
                jax.block_until_ready(fn(*args))
        capture_s = time.perf_counter() - start
        # a capture in the same second as the last one rewrites that one's file: look at times, not names
        written = sorted((p for p in where.rglob("*.xplane.pb") if before.get(p) != p.stat().st_mtime_ns),
                         key=lambda p: p.stat().st_mtime_ns)
        if not written:
            raise RuntimeError(f"jax.profiler.trace wrote no .xplane.pb under {where}; is another profiler "
                               "session running in this process?")
        data = written[-1].read_bytes()
    return Capture(data, hlo_text, module_name(hlo_text), steps, jax.devices()[0].platform, capture_s,
                   str(directory) if directory is not None else None)
