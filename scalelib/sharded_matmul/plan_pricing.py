"""Pricing a sharded-matmul plan on a slice: the local product's FLOPs and each collective's time.

Book sections 3.2 and 3.3. ``plan_cost`` gives per-device FLOPs and times: collective times from
``scalelib.collectives`` (the book's closed form, on rings both ways where an axis wraps), compute
time from ``roofline``; the collectives run one after another. ``shards_at_balance`` and
``crossover`` find where compute and communication take equally long.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from scalelib import collectives
from scalelib.hardware import Dtype
from scalelib.roofline import RooflineTime, compute_time_s
from scalelib.sharded_matmul.plan import MatmulPlan, Step
from scalelib.sharding import Sharding
from scalelib.topology import RingAxis


@dataclass(frozen=True)
class StepCost:
    step: Step
    array_bytes: float  # V as scalelib.collectives defines it for this op
    time_s: float  # the book's bandwidth term, or the latency floor when that is larger


@dataclass(frozen=True)
class MatmulCost(RooflineTime):
    """Per-device time of a plan as a roofline: ``compute_s`` of its ``flops``, ``comms_s`` of its
    collectives' ``steps`` run one after another (so bounds and ``bound`` are the roofline's)."""

    flops: float = 0.0
    steps: tuple[StepCost, ...] = ()


def _block_elems(s: Sharding, sizes: Mapping[str, float], mesh: Mapping[str, int]) -> float:
    """Elements of one device's block; sizes may be any positive numbers (cost algebra only)."""
    return math.prod(sizes[d] / math.prod(mesh[a] for a in axes) for d, axes in zip(s.dims, s.axes))


def ring_axes_of(slice_: Any, names: Sequence[str]) -> dict[str, RingAxis]:
    """Mesh axis name -> ``topology.RingAxis`` for each axis of a ``topology.Slice``, in order."""
    if len(names) != slice_.ndim:
        raise ValueError(f"{len(names)} mesh axis names for a {slice_.ndim}-D slice {slice_.shape}; "
                         "give one name per slice axis")
    return {n: slice_.axis(i) for i, n in enumerate(names)}


class PeakFlops(Protocol):
    """What ``plan_cost`` reads of a chip: its peak FLOPs/s (a ``hardware.Chip`` has it)."""

    def flops_per_s(self, dtype: Dtype = "bf16") -> float: ...


def plan_cost(plan: MatmulPlan, sizes: Mapping[str, float], ring_axes: Mapping[str, RingAxis], chip: PeakFlops,
              dtype_bytes: float = 2, dtype: Dtype = "bf16") -> MatmulCost:
    """FLOPs and time per device of ``plan`` for dims ``sizes`` (e.g. ``{"I": B, "J": D, "K": F}``).

    ``ring_axes`` maps each mesh axis name to a ``scalelib.topology.RingAxis`` (see
    ``ring_axes_of``); collective times come from ``scalelib.collectives`` (the book's closed
    form, on rings both ways where an axis wraps), compute time from ``roofline`` on ``chip``.
    Local slices are free. Sizes need not divide the mesh: this is the book's algebra.
    """
    missing = sorted({*plan.a.dims, *plan.b.dims} - set(sizes))
    if missing:
        raise ValueError(f"sizes has no entry for dims {missing}; give every dim of {plan.a} and {plan.b}")
    mesh = {n: a.size for n, a in ring_axes.items()}
    for s in (plan.a, plan.b, plan.out):
        s.check_mesh(mesh)
    i, j, k = plan.local_out.dims[0], plan.local_a.dims[1], plan.local_out.dims[1]
    m = {i: sizes[i] / math.prod(mesh[a] for a in plan.local_a.axes_of(i)),
         j: sizes[j] / math.prod(mesh[a] for a in plan.local_a.axes_of(j)),
         k: sizes[k] / math.prod(mesh[a] for a in plan.local_b.axes_of(k))}
    flops = 2 * m[i] * m[j] * m[k]
    costs = []
    for step in plan.steps:
        if step.kind == "slice":
            costs.append(StepCost(step, 0.0, 0.0))
            continue
        n = math.prod(mesh[a] for a in step.axes)
        # V: gathered output / unreduced input / reduced array / all shards together (A2A)
        held = step.after if step.kind == "all_gather" else step.before
        v = _block_elems(held, sizes, mesh) * dtype_bytes * (n if step.kind == "all_to_all" else 1)
        c = collectives.collective(step.kind, v, [ring_axes[a] for a in step.axes])
        costs.append(StepCost(step, v, c.total_s))
    return MatmulCost(compute_time_s(flops, chip.flops_per_s(dtype)), sum(c.time_s for c in costs), flops,
                      tuple(costs))


def shards_at_balance(cost: MatmulCost, shards: int) -> float:
    """Shard count at which compute and comms would take equally long, for a plan whose FLOPs
    split ``shards`` ways and whose collectives are bandwidth-bound (so their time does not
    depend on the axis size, book section 3.3): compute scales as 1 / shards, comms stays."""
    if cost.comms_s <= 0:
        raise ValueError("this plan communicates nothing, so it never becomes comms-bound")
    return shards * cost.compute_s / cost.comms_s


def crossover(f: Callable[[float], float], lo: float, hi: float, rel_tol: float = 1e-9) -> float:
    """The x in [lo, hi] where ``f(x)`` changes sign (bisection in log space), e.g. the batch at
    which a plan's compute time overtakes its comms time: ``f = lambda b: cost(b).compute_s -
    cost(b).comms_s``."""
    flo, fhi = f(lo), f(hi)
    if flo == 0 or fhi == 0:
        return lo if flo == 0 else hi
    if (flo > 0) == (fhi > 0):
        raise ValueError(f"f has the same sign at {lo} and {hi}; widen the interval")
    while hi / lo - 1 > rel_tol:
        mid = math.sqrt(lo * hi)
        if (f(mid) > 0) == (flo > 0):
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)
