"""Measuring and reading programs (book section 9): fair timings and what a compiled program holds.

``time_jitted``: wall time of a jitted function, compile excluded, each run waited for with
``block_until_ready``, the median of several runs. ``program_summary``: the collectives (via
``scalelib.hlo``) and the heaviest ops of a compiled program; ``jaxpr_primitive_counts`` counts
primitives in a traced one.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from scalelib import hlo
from scalelib.hlo_text import array_bytes, called_computations, computation_flops, dot_flops, parse_module
from scalelib.validate import positive_int

# ------------------------------------------------------------------ timing a jitted function


@dataclass(frozen=True)
class Timing:
    """Wall times of one jitted function: the first call (compile) and the timed runs."""

    first_call_s: float  # trace + compile + one run; excluded from the statistics
    runs_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)

    @property
    def min_s(self) -> float:
        return min(self.runs_s)


def time_jitted(fn: Callable, *args: Any, runs: int = 5, warmup: int = 1) -> Timing:
    """Time ``fn(*args)`` (a ``jax.jit`` function): ``warmup`` untimed calls, then ``runs`` timed ones.

    Every call is waited for with ``jax.block_until_ready``; JAX dispatches asynchronously, so
    without it the clock would stop before the device finished.
    """
    import jax

    positive_int("runs", runs)
    positive_int("warmup (untimed runs, the first of which compiles)", warmup)
    times = []
    for _ in range(warmup + runs):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return Timing(times[0], tuple(times[warmup:]))


# ------------------------------------------------------------------ what a program contains

@dataclass(frozen=True)
class HloOp:
    """One instruction of the entry computation."""

    name: str
    opcode: str
    result_bytes: int
    flops: float  # matmul FLOPs, counting dots inside the computations it calls


def hlo_ops(hlo_text: str) -> tuple[HloOp, ...]:
    """Instructions of the ENTRY computation, with result bytes and matmul FLOPs.

    An op's FLOPs are those of its dots, including dots in the computations it calls (a fusion's
    body; a while loop's body counted once, whatever its trip count), read by ``scalelib.hlo_text``.
    """
    module = parse_module(hlo_text)
    if module.entry is None:
        raise ValueError("no ENTRY computation found; pass the text of a compiled HLO module")
    shapes = module.shapes()
    out = []
    for i in module.computations[module.entry]:
        op_flops = dot_flops(i, shapes) + sum(computation_flops(module, c, shapes)
                                                        for c in called_computations(i.rest))
        out.append(HloOp(i.name, i.opcode, array_bytes(i.type_text), op_flops))
    return tuple(out)


@dataclass(frozen=True)
class ProgramSummary:
    """What XLA compiled a program into, per device."""

    collectives: tuple[hlo.CollectiveOp, ...]
    top_ops: tuple[HloOp, ...]  # heaviest first: by FLOPs, then by result bytes
    flops: float  # XLA's own count (cost_analysis)
    bytes_accessed: float

    @property
    def collective_kinds(self) -> Counter:
        return Counter(c.kind for c in self.collectives)


def program_summary(jitted: Any, *args: Any, mesh_shape: Mapping[str, int] | None = None,
                    top: int = 5) -> ProgramSummary:
    """Compile ``jitted`` for ``args`` and list its collectives and its ``top`` heaviest ops."""
    compiled = jitted.lower(*args).compile()
    text = compiled.as_text()
    analysis = compiled.cost_analysis() or {}
    if isinstance(analysis, (list, tuple)):  # older JAX returned one dict per program
        analysis = analysis[0] if analysis else {}
    ops = sorted(hlo_ops(text), key=lambda o: (-o.flops, -o.result_bytes))
    ops = [o for o in ops if o.opcode not in ("parameter", "constant", "bitcast", "tuple", "get-tuple-element")]
    return ProgramSummary(hlo.collective_ops(text, dict(mesh_shape or {"all": 1})), tuple(ops[:top]),
                          float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0)))


def jaxpr_primitive_counts(fn: Callable, *args: Any) -> Counter:
    """How often each primitive occurs in the traced ``fn(*args)``, nested jaxprs included."""
    import jax
    import jax.extend.core as jex_core

    counts: Counter = Counter()

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            counts[eqn.primitive.name] += 1
            for value in eqn.params.values():
                for v in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(v, jex_core.ClosedJaxpr):
                        walk(v.jaxpr)
                    elif isinstance(v, jex_core.Jaxpr):
                        walk(v)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return counts


__all__ = ["HloOp", "ProgramSummary", "Timing", "hlo_ops", "jaxpr_primitive_counts", "program_summary", "time_jitted"]

