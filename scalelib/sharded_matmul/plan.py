"""Planning a sharded matmul C[I, K] = A[I, J] @ B[J, K]: the book's four cases and the collectives they need.

Book section 3.2. The planner sorts a pair of input shardings into the book's four cases and lists
the collectives that make the product valid:

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
ReduceScatter, AllReduce, AllToAll, AllGather or a free local slice, in that order of preference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Sequence

from scalelib.collectives import BOOK_NAMES
from scalelib.sharding import Sharding, as_sharding

Kind = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "slice"]
_BOOK_NAMES = {**BOOK_NAMES, "slice": "LocalSlice"}


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

    def emit(kind: Kind, axes: Sequence[str], dim: str | None, new: Sharding, src: str | None = None) -> None:
        nonlocal c
        steps.append(Step(kind, tuple(axes), dim, c, new, src))
        c = new

    def rs_pass() -> None:
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
