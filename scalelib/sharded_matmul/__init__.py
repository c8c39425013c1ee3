"""Plan, cost and run a sharded matmul C[I, K] = A[I, J] @ B[J, K] (book section 3.2), and compare with XLA.

One module per idea: ``plan`` sorts a pair of input shardings into the book's four cases and lists
the collectives that make the product valid; ``plan_pricing`` prices a plan with ``scalelib.collectives``
and ``roofline``; ``run`` executes it under ``shard_map`` with explicit ``jax.lax`` collectives;
``xla`` reads the collectives ``jax.jit`` inserts for the same shardings out of the compiled HLO,
with ``XLA_CHOICES`` recording where XLA's choice differs from the book's.
"""

from scalelib.hlo import hlo_collectives
from scalelib.sharded_matmul.plan_pricing import (MatmulCost, StepCost, crossover, plan_cost, ring_axes_of,
                                                  shards_at_balance)
from scalelib.sharded_matmul.plan import Kind, MatmulPlan, Step, plan_matmul
from scalelib.sharded_matmul.run import run_plan
from scalelib.sharded_matmul.xla import XLA_CHOICES, xla_choice_recorded, xla_collectives

__all__ = ["XLA_CHOICES", "Kind", "MatmulCost", "MatmulPlan", "Step", "StepCost", "crossover", "hlo_collectives",
           "plan_cost", "plan_matmul", "ring_axes_of", "run_plan", "shards_at_balance", "xla_choice_recorded",
           "xla_collectives"]
