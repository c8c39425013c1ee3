"""Plan, cost and run a sharded matmul C[I, K] = A[I, J] @ B[J, K] (book section 3.2).

The planner sorts a pair of input shardings into the book's four cases and lists the
collectives that make the product valid:

1. J sharded on neither input: multiply local blocks, no communication.
2. J sharded on one input only, or on different axes: AllGather J of the sharded input(s)
   (``strategy="gather"``, the book's default), or slice the replicated input locally to the
   same J blocks and reduce the partial sums afterwards (``strategy="reduce"``, Exercise 3.4's
   Strategy 2 / Exercise 3.9).
3. J sharded on the same axes in both: local products are partial sums C{U_X}; an AllReduce
   (or a ReduceScatter when the wanted output is sharded over that axis) finishes them.
4. I of A and K of B sharded over one axis: AllGather one of them first (A by default, or the
   one the wanted output does not keep sharded over that axis).

Several cases can hold at once (A[I_X, J_Y] @ B[J_Y, K_X] is 3 and 4); ``MatmulPlan.cases``
lists all. After the local product the result is moved to the wanted output sharding with
ReduceScatter, AllReduce, AllToAll, AllGather or a free local slice, in that order of
preference. ``run_plan`` executes a plan with ``shard_map`` and explicit ``jax.lax`` collectives;
``plan_cost`` prices it with ``scalelib.collectives`` and ``roofline``; ``xla_collectives`` reads
the collectives ``jax.jit`` inserts for the same shardings out of the compiled HLO, and
``XLA_CHOICES`` records where XLA's choice differs from the book's.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Literal, Mapping, Sequence

from scalelib.hlo import hlo_collectives  # noqa: F401  (re-exported)
from scalelib.sharding import Sharding, as_sharding

Kind = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "slice"]
COLLECTIVE_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
_BOOK_NAMES = {"all_gather": "AllGather", "reduce_scatter": "ReduceScatter", "all_reduce": "AllReduce",
               "all_to_all": "AllToAll", "slice": "LocalSlice"}


@dataclass(frozen=True)
class Step:
    """One data movement: ``before`` becomes ``after`` by ``kind`` over mesh ``axes``.

    ``dim`` is the dimension gathered (all_gather), scattered onto (reduce_scatter), sliced
    (slice) or newly sharded (all_to_all, whose ``src_dim`` is the one it gathers).
    """

    kind: Kind
    axes: tuple[str, ...]
    dim: str | None
    before: Sharding
    after: Sharding
    src_dim: str | None = None

    def __str__(self) -> str:
        sub = "".join(self.axes) if all(len(a) == 1 for a in self.axes) else ",".join(self.axes)
        if self.kind in ("reduce_scatter", "all_to_all"):
            sub += f",{self.dim}"
        return f"{_BOOK_NAMES[self.kind]}_{sub} {self.before} -> {self.after}"


@dataclass(frozen=True)
class MatmulPlan:
    """The steps of one sharded matmul: ``pre`` on the inputs, local product, ``post`` on C."""

    a: Sharding
    b: Sharding
    out: Sharding
    cases: tuple[int, ...]
    pre: tuple[Step, ...]
    local_a: Sharding  # A as it enters the local product
    local_b: Sharding
    local_out: Sharding  # product of the local blocks, unreduced over the contracting axes
    post: tuple[Step, ...]
    strategy: str

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.pre + self.post

    @property
    def collectives(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """(kind, axes) of every communicating step, in order."""
        return tuple((s.kind, s.axes) for s in self.steps if s.kind != "slice")

    def describe(self) -> str:
        lines = [f"{self.a} . {self.b} -> {self.out}   (book case {' + '.join(map(str, self.cases))})"]
        lines += [f"  {s}" for s in self.pre]
        lines.append(f"  local {self.local_a} . {self.local_b} -> {self.local_out}")
        lines += [f"  {s}" for s in self.post]
        return "\n".join(lines)


def _drop(s: Sharding, dim: str, axes: Sequence[str]) -> tuple[Sharding, tuple[str, ...]]:
    """Remove ``axes`` from ``dim`` by gathering the shortest suffix that holds them all.

    Gathering a minor suffix keeps every block contiguous (A[I_XY] -> gather Y -> A[I_X]);
    removing a major axis alone would leave a strided block, so the suffix is gathered instead.
    """
    cur = s.axes_of(dim)
    pos = min(cur.index(a) for a in axes)
    return s.with_axes(dim, cur[:pos]), cur[pos:]


def _prefix(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...]:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return tuple(a[:n])


def plan_matmul(a: Sharding | str, b: Sharding | str, out: Sharding | str | None = None, *,
                strategy: Literal["gather", "reduce"] = "gather",
                gather: Literal["A", "B"] | None = None) -> MatmulPlan:
    """Plan A[I, J] . B[J, K] -> C[I, K] for these shardings (book section 3.2's four cases).

    ``out`` is the wanted sharding of C (default: whatever the local product gives, reduced).
    ``gather`` forces which operand a case-4 clash is resolved on.
    """
    a, b = as_sharding(a).renamed("A"), as_sharding(b).renamed("B")
    if len(a.dims) != 2 or len(b.dims) != 2:
        raise ValueError(f"plan_matmul multiplies 2-D arrays; got {a} and {b}")
    if a.dims[1] != b.dims[0]:
        raise ValueError(f"the contracting dims must share a name: {a} has last dim {a.dims[1]!r}, "
                         f"{b} has first dim {b.dims[0]!r}; rename one")
    if a.unreduced or b.unreduced:
        raise ValueError(f"inputs must be reduced; reduce {a if a.unreduced else b} before multiplying")
    if strategy not in ("gather", "reduce"):
        raise ValueError(f"strategy must be 'gather' or 'reduce', got {strategy!r}")
    a0, b0 = a, b
    i, j, k = a.dims[0], a.dims[1], b.dims[1]
    if i == k:
        raise ValueError(f"A's first dim and B's last dim are both named {i!r}; give C two distinct dims")
    want = None if out is None else as_sharding(out).renamed("C")
    if want is not None and want.dims != (i, k):
        raise ValueError(f"the output sharding {want} must have dims ({i}, {k})")
    cases, pre = set(), []

    clash = [x for x in a.axes_of(i) if x in b.axes_of(k)]
    if clash:  # case 4
        cases.add(4)
        who = gather
        if who is None:
            keeps_i = want is not None and any(x in want.axes_of(i) for x in clash)
            who = "B" if keeps_i else "A"
        op, dim = (a, i) if who == "A" else (b, k)
        new, axes = _drop(op, dim, clash)
        pre.append(Step("all_gather", axes, dim, op, new))
        a, b = (new, b) if who == "A" else (a, new)

    ac, bc = a.axes_of(j), b.axes_of(j)
    if ac != bc:  # case 2
        cases.add(2)
        sharded, repl = (a, b) if not bc else (b, a)
        other = i if repl is a else k
        if strategy == "reduce" and not repl.axes_of(j) and not set(sharded.axes_of(j)) & set(repl.axes_of(other)):
            new = repl.with_axes(j, sharded.axes_of(j))
            pre.append(Step("slice", new.axes_of(j), j, repl, new))
            a, b = (new, b) if repl is a else (a, new)
        else:
            keep = _prefix(ac, bc)
            for op in (a, b):
                if op.axes_of(j) != keep:
                    new = op.with_axes(j, keep)
                    pre.append(Step("all_gather", op.axes_of(j)[len(keep):], j, op, new))
                    a, b = (new, b) if op is a else (a, new)
    if a.axes_of(j):
        cases.add(3)
    local = Sharding((i, k), (a.axes_of(i), b.axes_of(k)), a.axes_of(j), "C")
    target = want if want is not None else local.with_unreduced(())
    post = _reshard(local, target)
    return MatmulPlan(a=a0, b=b0, out=target, cases=tuple(sorted(cases or {1})), pre=tuple(pre),
                      local_a=a, local_b=b, local_out=local, post=tuple(post), strategy=strategy)


def _reshard(c: Sharding, target: Sharding) -> list[Step]:
    """Steps taking the local product ``c`` to ``target``: RS, AR, AllToAll, AG, then slices."""
    if not set(target.unreduced) <= set(c.unreduced):
        raise ValueError(f"{target} is unreduced over axes the product {c} has already summed")
    steps: list[Step] = []
    wanted_somewhere = set(target.used_axes)

    def emit(kind, axes, dim, new, src=None):
        nonlocal c
        steps.append(Step(kind, tuple(axes), dim, c, new, src))
        c = new

    def rs_pass():
        for d in c.dims:
            cur, tgt = c.axes_of(d), target.axes_of(d)
            if tgt[:len(cur)] != cur:
                continue
            run = []
            for x in tgt[len(cur):]:
                if x not in c.unreduced or x in target.unreduced:
                    break
                run.append(x)
            if run:
                new_axes = tuple(cur + tuple(run) if e == d else c.axes_of(e) for e in c.dims)
                emit("reduce_scatter", run, d, replace(c, axes=new_axes,
                                                       unreduced=tuple(u for u in c.unreduced if u not in run)))

    rs_pass()
    early = [u for u in c.unreduced if u not in wanted_somewhere and u not in target.unreduced]
    if early:
        emit("all_reduce", early, None, c.with_unreduced([u for u in c.unreduced if u not in early]))
    for d in c.dims:  # axes a dim holds but the target does not keep there: move or gather them
        cur, tgt = c.axes_of(d), target.axes_of(d)
        keep = _prefix(cur, tgt)
        extra = cur[len(keep):]
        if not extra:
            continue
        dest = next((e for e in c.dims if e != d and target.axes_of(e)[:len(c.axes_of(e)) + len(extra)]
                     == c.axes_of(e) + extra), None)
        if dest is not None:
            moved = c.with_axes(d, keep)
            emit("all_to_all", extra, dest, moved.with_axes(dest, moved.axes_of(dest) + extra), src=d)
        else:
            emit("all_gather", extra, d, c.with_axes(d, keep))
    rs_pass()
    rest = [u for u in c.unreduced if u not in target.unreduced]
    if rest:
        emit("all_reduce", rest, None, c.with_unreduced(target.unreduced))
    for d in c.dims:
        cur, tgt = c.axes_of(d), target.axes_of(d)
        if cur != tgt:
            emit("slice", tgt[len(cur):], d, c.with_axes(d, tgt))
    return steps


# -------------------------------------------------------------------- cost
@dataclass(frozen=True)
class StepCost:
    step: Step
    array_bytes: float  # V as scalelib.collectives defines it for this op
    time_s: float  # the book's bandwidth term, or the latency floor when that is larger


@dataclass(frozen=True)
class MatmulCost:
    """Per-device FLOPs and times of a plan; the collectives run one after another."""

    flops: float
    compute_s: float
    steps: tuple[StepCost, ...]

    @property
    def comms_s(self) -> float:
        return sum(s.time_s for s in self.steps)

    @property
    def lower_bound_s(self) -> float:  # compute and communication overlapped
        return max(self.compute_s, self.comms_s)

    @property
    def upper_bound_s(self) -> float:  # one after the other
        return self.compute_s + self.comms_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.comms_s else "comms"


def _block_elems(s: Sharding, sizes: Mapping[str, float], mesh: Mapping[str, int]) -> float:
    """Elements of one device's block; sizes may be any positive numbers (cost algebra only)."""
    return math.prod(sizes[d] / math.prod(mesh[a] for a in axes) for d, axes in zip(s.dims, s.axes))


def ring_axes_of(slice_, names: Sequence[str]) -> dict:
    """Mesh axis name -> ``topology.RingAxis`` for each axis of a ``topology.Slice``, in order."""
    if len(names) != slice_.ndim:
        raise ValueError(f"{len(names)} mesh axis names for a {slice_.ndim}-D slice {slice_.shape}; "
                         "give one name per slice axis")
    return {n: slice_.axis(i) for i, n in enumerate(names)}


def plan_cost(plan: MatmulPlan, sizes: Mapping[str, float], ring_axes: Mapping, chip,
              dtype_bytes: float = 2, dtype: str = "bf16") -> MatmulCost:
    """FLOPs and time per device of ``plan`` for dims ``sizes`` (e.g. ``{"I": B, "J": D, "K": F}``).

    ``ring_axes`` maps each mesh axis name to a ``scalelib.topology.RingAxis`` (see
    ``ring_axes_of``); collective times come from ``scalelib.collectives`` (the book's closed
    form, on rings both ways where an axis wraps), compute time from ``roofline`` on ``chip``.
    Local slices are free. Sizes need not divide the mesh: this is the book's algebra.
    """
    from scalelib import collectives
    from scalelib.roofline import compute_time_s

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
    return MatmulCost(flops, compute_time_s(flops, chip.flops_per_s(dtype)), tuple(costs))


def shards_at_balance(cost: MatmulCost, shards: int) -> float:
    """Shard count at which compute and comms would take equally long, for a plan whose FLOPs
    split ``shards`` ways and whose collectives are bandwidth-bound (so their time does not
    depend on the axis size, book section 3.3): compute scales as 1 / shards, comms stays."""
    if cost.comms_s <= 0:
        raise ValueError("this plan communicates nothing, so it never becomes comms-bound")
    return shards * cost.compute_s / cost.comms_s


def crossover(f, lo: float, hi: float, rel_tol: float = 1e-9) -> float:
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


# -------------------------------------------------------------------- execution
def _apply(step: Step, x, dims: tuple[str, ...]):
    """One step on a local block ``x`` (inside shard_map) with explicit jax.lax collectives."""
    import jax

    axes = step.axes if len(step.axes) > 1 else step.axes[0]
    if step.kind == "all_gather":  # [.., D/n, ..] -> [.., D, ..]
        return jax.lax.all_gather(x, axes, axis=dims.index(step.dim), tiled=True)
    if step.kind == "reduce_scatter":  # partial [.., D, ..] -> summed [.., D/n, ..]
        return jax.lax.psum_scatter(x, axes, scatter_dimension=dims.index(step.dim), tiled=True)
    if step.kind == "all_reduce":  # partial -> summed, same shape
        return jax.lax.psum(x, axes)
    if step.kind == "all_to_all":  # [src/n, dst] -> [src, dst/n]
        return jax.lax.all_to_all(x, axes, split_axis=dims.index(step.dim),
                                  concat_axis=dims.index(step.src_dim), tiled=True)
    # slice: keep this device's block of a replicated dim, no communication
    axis = dims.index(step.dim)
    n = math.prod(jax.lax.axis_size(a) for a in step.axes)
    size = x.shape[axis] // n
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(axes) * size, size, axis=axis)


def run_plan(plan: MatmulPlan, a, b, mesh):
    """Execute ``plan`` on global arrays ``a`` [I, J] and ``b`` [J, K] over ``mesh``.

    Inputs are placed with the plan's input shardings, the body runs per device under
    ``compat.shard_map`` and every communication is an explicit ``jax.lax`` collective.
    Returns the global C [I, K] sharded as ``plan.out``.
    """
    import jax
    import jax.numpy as jnp

    from scalelib import compat

    if plan.out.unreduced:
        raise ValueError(f"run_plan returns finished arrays; {plan.out} is unreduced. Plan with a "
                         "reduced output, or stop before the reduction with plan.local_out")
    for s, x in ((plan.a, a), (plan.b, b)):
        s.local_shape(x.shape, mesh)  # clear error when a mesh size does not divide a dim
    put = lambda x, s: jax.device_put(x, jax.sharding.NamedSharding(mesh, s.spec))  # noqa: E731

    def body(x, y):  # x: A block [I/.., J/..], y: B block [J/.., K/..]
        for step in plan.pre:
            if step.before.name == "A":
                x = _apply(step, x, plan.a.dims)
            else:
                y = _apply(step, y, plan.b.dims)
        c = jnp.dot(x, y, preferred_element_type=jnp.float32)  # [I/.., K/..], partial over J's axes
        for step in plan.post:
            c = _apply(step, c, plan.out.dims)
        return c

    # check_vma=False: JAX 0.10's public all_gather marks its (identical) result as varying over
    # the gathered axes, so the replication check would reject correct plans. Correctness is
    # instead checked against the unsharded product in tests/test_sharded_matmul.py.
    f = compat.shard_map(body, mesh=mesh, in_specs=(plan.a.spec, plan.b.spec), out_specs=plan.out.spec,
                         check_vma=False)
    return jax.jit(f)(put(a, plan.a), put(b, plan.b))


# -------------------------------------------------------------------- what XLA does
# HLO parsing lives in scalelib.hlo; hlo_collectives is re-exported here for callers of this module.
def xla_collectives(plan: MatmulPlan, mesh, shape_a: Sequence[int], shape_b: Sequence[int],
                    dtype=None) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """Collectives XLA inserts when ``jax.jit`` compiles A @ B with the plan's shardings.

    ``mesh`` must have Auto axes (``compat.make_mesh(..., kind="auto")``): with Explicit axes
    JAX 0.10 refuses cases 3 and 4 outright (it asks for an output sharding, or calls the
    result illegally sharded) instead of letting the partitioner choose, which is the point here.
    """
    import jax
    import jax.numpy as jnp

    named = lambda s: jax.sharding.NamedSharding(mesh, s.spec)  # noqa: E731
    f = jax.jit(lambda x, y: x @ y, in_shardings=(named(plan.a), named(plan.b)), out_shardings=named(plan.out))
    dtype = dtype or jnp.float32
    text = f.lower(jax.ShapeDtypeStruct(tuple(shape_a), dtype), jax.ShapeDtypeStruct(tuple(shape_b), dtype)).compile().as_text()
    return hlo_collectives(text, dict(mesh.shape))


# Where jax.jit departs from the planner. Observed with JAX 0.10.2 on 8 CPU devices (meshes 2x4,
# 4x2 and 8, Auto axes, f32 shapes (64,32)@(32,48), (16,256)@(256,64), (256,16)@(16,256)).
# Each entry lists every collective multiset seen or accepted, the planner's (book's) choice
# first; cases not listed here must match the plan exactly. "collective_permute" has no axes.
_AG, _AR, _RS, _PERM = "all_gather", "all_reduce", "reduce_scatter", ("collective_permute", None)
XLA_CHOICES: dict[str, tuple[tuple[tuple[str, tuple[str, ...] | None], ...], ...]] = {
    # Case 2. When C[I, K] is smaller than A[I, J], XLA slices the replicated B to J_X and
    # AllReduces the partial sums: Exercise 3.4's Strategy 2 (plan_matmul(strategy="reduce")).
    "A[I, J_X] . B[J, K] -> C[I, K]": (((_AG, ("X",)),), ((_AR, ("X",)),)),
    # Case 3 into a sharded C. The book's ReduceScatter never appears on the CPU backend: it
    # AllReduces (often only the block a device will keep, picked with the idle axis) and then
    # slices, adding a collective-permute on 2x4 to move blocks to the devices that own them.
    "A[I, J_X] . B[J_X, K] -> C[I, K_X]": (((_RS, ("X",)),), ((_AR, ("X",)),), ((_AR, ("X",)), _PERM)),
    "A[I, J_X] . B[J_X, K] -> C[I_X, K]": (((_RS, ("X",)),), ((_AR, ("X",)),), ((_AR, ("X",)), _PERM)),
    "A[I, J_XY] . B[J_XY, K] -> C[I, K_XY]": (((_RS, ("X", "Y")),), ((_AR, ("X", "Y")),)),
    # (XLA in jax 0.7 instead AllReduces once over both axes, then slices.)
    "A[I, J_XY] . B[J_XY, K] -> C[I_Y, K_X]": (((_RS, ("Y",)), (_RS, ("X",))), ((_AR, ("X",)), (_AR, ("Y",))),
                                              ((_AR, ("X", "Y")),)),
    # I_XY -> I_Y: the planner only gathers minor suffixes (no permutes), so it gathers both
    # axes and slices; XLA permutes blocks into I_YX order and gathers over X alone.
    "A[I_XY, J] . B[J, K] -> C[I_Y, K_X]": (((_AG, ("X", "Y")),), (_PERM, (_AG, ("X",)))),
    # Case 4. On 8 and 4x2 XLA gathers the operand the planner picks; on 2x4 it first permutes
    # that operand so its blocks are spread over the longer Y axis and gathers over Y instead.
    "A[I_X, J] . B[J, K_X] -> C[I, K_X]": (((_AG, ("X",)),), (_PERM, (_AG, ("Y",)))),
    "A[I_X, J] . B[J, K_X] -> C[I_X, K]": (((_AG, ("X",)),), (_PERM, (_AG, ("Y",)))),
    # Moving X from I to K: the planner uses an AllToAll on C; XLA gathers A over X and slices
    # the replicated B to K_X before the product (cheaper than the AllToAll when J < K / |X|).
    "A[I_X, J] . B[J, K] -> C[I, K_X]": ((("all_to_all", ("X",)),), ((_AG, ("X",)),)),
}


def xla_choice_recorded(plan: MatmulPlan, observed: Sequence[tuple[str, tuple[str, ...] | None]]) -> bool:
    """True when XLA's collectives (any order) are the plan's or one of ``XLA_CHOICES``."""
    key = f"{plan.a} . {plan.b} -> {plan.out}"
    allowed = XLA_CHOICES.get(key, (plan.collectives,))
    canon = lambda cs: sorted(cs, key=repr)  # noqa: E731
    return canon(observed) in [canon(a) for a in allowed]
