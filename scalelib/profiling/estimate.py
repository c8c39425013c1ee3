"""Expected time of one sharded einsum (book section 9.2.4) from shapes, shardings and a peak.

``sharded_einsum_time`` folds the einsum into the 2-D product of ``scalelib.sharded_matmul`` and
prices it with ``plan_cost`` (``roofline`` + ``collectives``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from scalelib.hardware import Chip, Dtype
from scalelib.sharded_matmul import MatmulCost, MatmulPlan, plan_cost, plan_matmul
from scalelib.sharding import Sharding, as_sharding
from scalelib.topology import RingAxis

# ------------------------------------------------------------------ expected time of a sharded einsum


@dataclass(frozen=True)
class _Peak:
    """What ``plan_cost`` asks of a chip: only its peak FLOPs/s."""

    value: float

    def flops_per_s(self, dtype: str = "bf16") -> float:
        return self.value


@dataclass(frozen=True)
class EinsumEstimate:
    """Per-device cost of one sharded einsum, folded into the 2-D product ``plan``."""

    lhs: Sharding
    rhs: Sharding
    out: Sharding
    plan: MatmulPlan  # I = lhs-only dims, J = contracted dims, K = rhs-only dims
    cost: MatmulCost
    lhs_local_shape: tuple[int, ...]
    rows_per_device: int  # product of the local lhs-only dims (tokens, for activations)

    @property
    def flops_per_device(self) -> float:
        return self.cost.flops

    @property
    def compute_s(self) -> float:
        return self.cost.compute_s

    @property
    def comms_s(self) -> float:
        return self.cost.comms_s

    @property
    def time_s(self) -> float:
        """Compute and collectives overlapped (the lower bound)."""
        return self.cost.lower_bound_s


def _group(s: Sharding, dims: Sequence[str]) -> tuple[str, ...]:
    return tuple(a for d in dims for a in s.axes_of(d))


def sharded_einsum_time(lhs: Sharding | str, rhs: Sharding | str, sizes: Mapping[str, int],
                        mesh: Mapping[str, RingAxis | int], chip: Chip | float,
                        out: Sharding | str | None = None, dtype_bytes: float = 2,
                        dtype: Dtype = "bf16") -> EinsumEstimate:
    """Time of lhs . rhs on one device, e.g. ``"X[B_X, T, D]", "W[D, F_Y]" -> "Out[B_X, T, F_Y]"``.

    Dims in both inputs are contracted. ``mesh`` maps each axis name to a ``topology.RingAxis``
    (an int size is enough for axes no collective runs over). ``chip`` is a ``Chip`` or a peak
    in FLOPs/s of one device (e.g. one core). Collectives follow ``sharded_matmul.plan_matmul``.
    """
    lhs, rhs = as_sharding(lhs), as_sharding(rhs)
    missing = sorted({*lhs.dims, *rhs.dims} - set(sizes))
    if missing:
        raise ValueError(f"sizes has no entry for dims {missing}; give every dim of {lhs} and {rhs}")
    contracted = [d for d in lhs.dims if d in rhs.dims]
    free_l = [d for d in lhs.dims if d not in contracted]
    free_r = [d for d in rhs.dims if d not in contracted]
    if not contracted:
        raise ValueError(f"{lhs} and {rhs} share no dim, so nothing is contracted; name the contracted dim alike")
    if out is None:
        out = Sharding(tuple(free_l + free_r), tuple(lhs.axes_of(d) for d in free_l)
                       + tuple(rhs.axes_of(d) for d in free_r), (), "Out")
    out = as_sharding(out)
    if list(out.dims) != free_l + free_r:
        raise ValueError(f"{out} must list the free dims of the lhs then of the rhs, {free_l + free_r}; "
                         "batched dims shared by all three are not supported")
    shape = {n: (a.size if isinstance(a, RingAxis) else int(a)) for n, a in mesh.items()}
    lhs_local = lhs.local_shape([sizes[d] for d in lhs.dims], shape)
    rhs.local_shape([sizes[d] for d in rhs.dims], shape)
    a2 = Sharding(("I", "J"), (_group(lhs, free_l), _group(lhs, contracted)), (), "A")
    b2 = Sharding(("J", "K"), (_group(rhs, contracted), _group(rhs, free_r)), (), "B")
    c2 = Sharding(("I", "K"), (_group(out, free_l), _group(out, free_r)), out.unreduced, "C")
    plan = plan_matmul(a2, b2, c2)
    ring_axes = {}
    for name, axis in mesh.items():
        if isinstance(axis, RingAxis):
            ring_axes[name] = axis
        elif any(name in axes for _, axes in plan.collectives):
            kinds = [kind for kind, axes in plan.collectives if name in axes]
            raise ValueError(f"mesh axis {name!r} is given only as a size, but the plan runs {kinds} over it; "
                             f"give a topology.RingAxis for {name!r} so its bandwidth is known")
        else:  # no collective runs here, so its bandwidth is never read
            ring_axes[name] = RingAxis(int(axis), True, 1.0, 1.0, 0.0)
    folded = {"I": math.prod(sizes[d] for d in free_l), "J": math.prod(sizes[d] for d in contracted),
              "K": math.prod(sizes[d] for d in free_r)}
    peak = chip.flops_per_s(dtype) if isinstance(chip, Chip) else float(chip)
    cost = plan_cost(plan, folded, ring_axes, _Peak(peak), dtype_bytes, dtype)
    rows = math.prod(n for d, n in zip(lhs.dims, lhs_local) if d in free_l)
    return EinsumEstimate(lhs, rhs, out, plan, cost, lhs_local, rows)


