"""What ``jax.jit`` does with the same shardings: the collectives XLA's partitioner inserts.

Book section 3.2 predicts the collectives; ``xla_collectives`` reads the ones XLA compiles out of
the HLO (``scalelib.hlo``), and ``XLA_CHOICES`` records every place XLA's choice differs from the
planner's, so ``xla_choice_recorded`` can tell a known difference from a new one.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp

from scalelib.hlo import hlo_collectives
from scalelib.sharded_matmul.plan import MatmulPlan


def xla_collectives(plan: MatmulPlan, mesh: jax.sharding.Mesh, shape_a: Sequence[int], shape_b: Sequence[int],
                    dtype: Any = None) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """Collectives XLA inserts when ``jax.jit`` compiles A @ B with the plan's shardings.

    ``mesh`` must have Auto axes (``compat.make_mesh(..., kind="auto")``): with Explicit axes
    JAX 0.10 refuses cases 3 and 4 outright (it asks for an output sharding, or calls the
    result illegally sharded) instead of letting the partitioner choose, which is the point here.
    """
    named = lambda s: jax.sharding.NamedSharding(mesh, s.spec)  # noqa: E731
    f = jax.jit(lambda x, y: x @ y, in_shardings=(named(plan.a), named(plan.b)), out_shardings=named(plan.out))
    dtype = dtype or jnp.float32
    args = jax.ShapeDtypeStruct(tuple(shape_a), dtype), jax.ShapeDtypeStruct(tuple(shape_b), dtype)
    text = f.lower(*args).compile().as_text() or ""
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
