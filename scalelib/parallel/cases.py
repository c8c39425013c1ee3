"""The one table of parallel-scheme cases: each scheme on a small mesh and model, and how to compare it.

Book section 5: every scheme must train exactly like one device. tests/test_parallel_schemes.py runs
the cases of ``CASES`` against the single-device step and against their own predictions, and
``FLOPS_CASES`` (a larger, matmul-dominated model, compiled only) hold ``step_flops`` against XLA's
count. Adding a scheme is a line in ``CASES`` and one in ``FLOPS_CASES``; the tests fail until both
cover every registered scheme. (``python -m scalelib.parallel.selfcheck`` lays the same schemes out for
whatever job it runs in, so its meshes follow the job, not this table.)

Tolerances (float32, ``compare.RTOL`` / ``compare.ATOL``): the sharded steps add the same numbers
in another order, so gradients differ by ~1e-8. Adam turns a gradient g into about g / (|g| + eps);
with the default eps = 1e-8 its derivative at |g| ~ eps is lr / eps = 1e6, so a 1e-8 reordering
error in a near-zero gradient moves that weight by ~1e-4. That is Adam's conditioning, not the
scheme's, so the steps use eps = 1e-3 (``HP``: derivative <= lr / eps = 10), or eps = lr = 1e-2
(``HP_LR``) where microbatches or routing reorder more sums (pipeline, expert, sequence), whose loss
is held at RTOL alone (``loss_atol=0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import jax

from scalelib import compat, model, train
from scalelib import transformer as tf
from scalelib.parallel.compare import ATOL
from scalelib.parallel.data import DataParallel
from scalelib.parallel.expert import ExpertParallel
from scalelib.parallel.fsdp import FSDP
from scalelib.parallel.fsdp_tp import FSDPTensor
from scalelib.parallel.multislice import Multislice
from scalelib.parallel.pipeline import Pipeline
from scalelib.parallel.scheme import Collective, Scheme
from scalelib.parallel.sequence import SequenceParallel
from scalelib.parallel.tensor import TensorParallel

HP = train.Adam(learning_rate=1e-2, eps=1e-3)
HP_LR = train.Adam(learning_rate=1e-2, eps=1e-2)  # eps = lr: see the module docstring

CFG = model.small_config()
TP_CFG = model.small_config(n_heads=8, n_kv_heads=4, head_dim=8)  # a model axis of 4 divides N and K
PP_CFG = model.small_config(n_layers=4)
MOE_CFG = model.small_config(n_experts=8, experts_per_token=2, expert_d_ff=32, n_shared_experts=1, router_bias=True)
# Sequence parallelism on a small MoE model with qkv biases: MoE (dense dispatch) is per token, so it
# runs unchanged on a sequence chunk, and the biases exercise the sharded attention's inputs.
SEQ_CFG = model.small_config(n_layers=1, n_experts=4, experts_per_token=2, expert_d_ff=32, qkv_bias=True)
NO_DROP = MOE_CFG.n_experts / MOE_CFG.experts_per_token  # capacity factor E / k: a slot for every token


def keep_all(c: Collective) -> bool:
    """No predicted op is merged away."""
    return False


def is_regather(c: Collective) -> bool:
    """FSDP's backward regathers: XLA:CPU expands the optimization barrier and CSE merges each with its
    forward twin, keeping the full weights, so the compiled program lacks them."""
    return c.kind == "all_gather" and c.phase == "backward"


@dataclass(frozen=True)
class Case:
    """One scheme on one mesh and model, with how its compiled collectives are compared.

    ``collectives`` is a mode of ``compare.collectives``: "sums" (bytes per (kind, axes) equal; XLA
    may combine ops of one kind, so each count lies in [1, predicted]), "counts" (bytes and op counts
    equal), "each" (every op's kind, axes and bytes, permutes without axes) or "loop" (the pipeline's
    rolled tick loop). ``merged``: predicted ops XLA:CPU folds into others (``is_regather``).
    """

    id: str
    scheme: Scheme
    shape: tuple[int, ...]
    cfg: tf.TransformerConfig = CFG
    hp: train.Adam = HP
    batch: int = 16
    seq: int = 16
    keys: tuple[int, int] = (0, 1)
    loss_atol: float = ATOL
    collectives: str = "sums"
    merged: Callable[[Collective], bool] = field(default=keep_all)

    @property
    def reference_inputs(self) -> tuple[tf.TransformerConfig, train.Adam, int, int, tuple[int, int]]:
        """What the case's single-device reference step depends on: cases with equal inputs share one."""
        return (self.cfg, self.hp, self.batch, self.seq, self.keys)

    @property
    def mesh(self) -> jax.sharding.Mesh:
        """The case's mesh on the first devices of this process."""
        n = math.prod(self.shape)
        return compat.make_mesh(self.shape, self.scheme.mesh_axes, devices=jax.devices()[:n])


CASES: tuple[Case, ...] = (
    Case("data-8", DataParallel(microbatches=2, remat="full"), (8,)),
    Case("data-2x4", DataParallel(axes=("x", "y")), (2, 4)),
    Case("zero1-8", FSDP(stage=1), (8,)),
    Case("zero2-8", FSDP(stage=2), (8,)),
    Case("zero3-8", FSDP(stage=3), (8,), collectives="counts", merged=is_regather),
    Case("tensor-2x4", TensorParallel(), (2, 4), TP_CFG),
    Case("tensor-4x2", TensorParallel(), (4, 2), TP_CFG),
    Case("fsdp_tp-2x4", FSDPTensor(), (2, 4), TP_CFG, collectives="counts", merged=is_regather),
    Case("fsdp_tp-4x2", FSDPTensor(), (4, 2), TP_CFG, collectives="counts", merged=is_regather),
    Case("multislice-2x4", Multislice(), (2, 4)),
    # GPipe with M = 2 < S = 4 microbatches; 1F1B with S = 2 stages of 1 layer and M = 3.
    Case("gpipe-4", Pipeline(2, "gpipe"), (4,), PP_CFG, HP_LR, 4, 8, loss_atol=0, collectives="loop"),
    Case("1f1b-2", Pipeline(3, "1f1b"), (2,), CFG, HP_LR, 6, 8, (2, 3), loss_atol=0, collectives="loop"),
    Case("expert-4", ExpertParallel(NO_DROP), (4,), MOE_CFG, HP_LR, 4, 8, loss_atol=0, collectives="each"),
    Case("seq-all_gather-4", SequenceParallel("all_gather"), (4,), SEQ_CFG, HP_LR, 2, 16, loss_atol=0,
         collectives="each"),
    Case("seq-ring-4", SequenceParallel("ring"), (4,), SEQ_CFG, HP_LR, 2, 16, loss_atol=0, collectives="each"),
)
BY_ID = {c.id: c for c in CASES}

# Compiled only, for ``step_flops`` against XLA's ``cost_analysis``: a matmul-dominated model
# (D = 256, F = 1024, T = 128; attention scores are small next to 3 D F).
FLOPS_CFG = model.small_config(d_model=256, head_dim=64, d_ff=1024, vocab_size=512)
FLOPS_SEQ = 128
FLOPS_MOE = FLOPS_CFG.replace(n_experts=8, experts_per_token=2, expert_d_ff=512, n_shared_experts=1, router_bias=True)
FLOPS_CASES: tuple[Case, ...] = (
    Case("data-4", DataParallel(), (4,), FLOPS_CFG, HP, 4, FLOPS_SEQ),
    Case("zero3-4", FSDP(stage=3), (4,), FLOPS_CFG, HP, 4, FLOPS_SEQ),
    Case("tensor-1x2", TensorParallel(), (1, 2), FLOPS_CFG, HP, 1, FLOPS_SEQ),
    Case("fsdp_tp-2x2", FSDPTensor(), (2, 2), FLOPS_CFG, HP, 2, FLOPS_SEQ),
    # both run one sequence per microbatch on each of 2 stages: GPipe with M = 2 (6 ticks), 1F1B with M = 4 (10)
    Case("gpipe-2", Pipeline(2, "gpipe"), (2,), FLOPS_CFG, HP, 2, FLOPS_SEQ),
    Case("1f1b-2", Pipeline(4, "1f1b"), (2,), FLOPS_CFG, HP, 4, FLOPS_SEQ),
    # capacity factor 1.25: C = 40 slots per expert and sending device where tokens x k / E = 32 would do
    Case("expert-4", ExpertParallel(1.25), (4,), FLOPS_MOE, HP, 4, FLOPS_SEQ),
    Case("multislice-2x4", Multislice(), (2, 4), FLOPS_CFG, HP, 8, FLOPS_SEQ),  # one sequence per chip
    Case("seq-ring-4", SequenceParallel("ring"), (4,), FLOPS_CFG, HP, 1, FLOPS_SEQ),
)
FLOPS_BY_ID = {c.id: c for c in FLOPS_CASES}
