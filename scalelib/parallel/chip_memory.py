"""Bytes per chip of a training step under each parallel layout.

Book: "How to Scale Your Model", section 5.1.1 (Adam's 10 bytes per parameter and the largest
model pure data parallelism fits), Exercises 5.2-5.3 (checkpoints after the three big MLP
matmuls) and section 6.2 (LLaMA 3-70B: parameters, optimizer state and gradient checkpoints,
the fewest chips that hold them, the memory per chip of a full pod). Per-parameter state comes
from ``transformer_memory.training_state_memory``; activations from its remat policies, or
from the book's count of D-sized checkpoints per layer.

Sharding (a ``Layout``): the layout's scheme says into how many pieces it cuts the state
(``Scheme.state_shards``: DP replicates it; FSDP, tensor parallelism and pipelining cut it by their
degrees; expert parallelism cuts only the expert weights); activations are split across every
chip that holds different tokens or a different slice of them. Gathered weights in flight, the
optimizer's temporaries and XLA's scratch space are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

from scalelib import hardware
from scalelib import transformer as tf
from scalelib import transformer_memory as tmem
from scalelib.hardware import Chip
from scalelib.parallel import registry
from scalelib.parallel.layout import Layout

# 'mlp_outputs': the checkpoints of Exercise 5.2, the outputs of the MLP's three big matmuls.
MLP_CHECKPOINTS = ("up", "gate", "down")


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of the weights, gradients and Adam state."""

    param_bytes: float = 2
    grad_bytes: float = 2
    adam_moment_bytes: float = 4
    master_copy_bytes: float = 0

    def memory(self, n_params: float) -> tmem.TrainingStateMemory:
        return tmem.training_state_memory(n_params, self.param_bytes, self.grad_bytes, self.adam_moment_bytes,
                                          self.master_copy_bytes)

    @property
    def bytes_per_param(self) -> float:
        return self.memory(1).total_bytes


# Section 5: bf16 weights and two fp32 Adam moments, 10 bytes a parameter; gradients not counted.
BOOK_ADAM = StateBytes(grad_bytes=0)
# With a bf16 gradient buffer as well (12 bytes a parameter).
ADAM_WITH_GRADS = StateBytes()


@dataclass(frozen=True)
class ChipMemory:
    """Bytes held by one chip (or, unsharded, by the whole model)."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float

    @property
    def state_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        return self.state_bytes + self.activations_bytes

    def fits(self, chip: Chip) -> bool:
        return self.total_bytes <= chip.hbm_bytes


def activation_bytes(cfg: tf.TransformerConfig, tokens: float, seq_len: int, remat: str | float = "full",
                     dtype_bytes: float = 2) -> float:
    """Activations a step on ``tokens`` tokens keeps for its backward pass.

    ``remat`` is one of scalelib's policies ('none', 'dots', 'dots_no_batch', 'block_inputs',
    'full': the exact per-array count of ``transformer_memory.activation_memory``, peak),
    'mlp_outputs' (Exercise 5.2: the three big MLP matmul outputs, 2 L B (D + 2F) bytes in
    bf16), or a number k of D-sized checkpoints per layer and token (section 6.2's 4 or 12).
    """
    if not (tokens >= 0 and math.isfinite(tokens)):
        raise ValueError(f"tokens must be a finite number >= 0, got {tokens!r}")
    if isinstance(remat, (int, float)) and not isinstance(remat, bool):
        if remat < 0:
            raise ValueError(f"checkpoints per layer must be >= 0, got {remat!r}")
        return float(remat * tokens * cfg.d_model * cfg.n_layers * dtype_bytes)
    if remat == "mlp_outputs":
        saved = tmem.saved_activation_elements(cfg, "dots_no_batch", seq_len)
        per_token_layer = sum(saved.get(k, 0) for k in MLP_CHECKPOINTS)
        return float(tokens * cfg.n_layers * per_token_layer * dtype_bytes)
    if remat not in tf.REMAT_POLICIES:
        raise ValueError(f"remat must be one of {tf.REMAT_POLICIES}, 'mlp_outputs' or a number of D-sized "
                         f"checkpoints per layer, got {remat!r}")
    return tmem.activation_memory(cfg, tokens / seq_len, seq_len, cast(tf.RematPolicy, remat), dtype_bytes).peak_bytes


def training_memory(cfg: tf.TransformerConfig, tokens: float, seq_len: int, remat: str | float = "full",
                    state: StateBytes = BOOK_ADAM, n_params: float | None = None) -> ChipMemory:
    """Unsharded bytes of a step: state for ``n_params`` (default: the config's exact count)
    plus the activations of ``tokens`` tokens."""
    n = tf.param_counts(cfg).total if n_params is None else n_params
    st = state.memory(n)
    return ChipMemory(st.params_bytes, st.grads_bytes, st.optimizer_bytes,
                      activation_bytes(cfg, tokens, seq_len, remat))


def memory_per_chip(layout: Layout, cfg: tf.TransformerConfig, global_batch_tokens: float, seq_len: int,
                    remat: str | float = "full", state: StateBytes = BOOK_ADAM,
                    n_params: float | None = None) -> ChipMemory:
    """``training_memory`` cut up by ``layout`` (see the module docstring)."""
    whole = training_memory(cfg, global_batch_tokens, seq_len, remat, state, n_params)
    shards = registry.get(layout.scheme).state_shards(layout, cfg)
    act_shards = layout.batch_ways * layout.model_ways * layout.stages
    return ChipMemory(whole.params_bytes / shards, whole.grads_bytes / shards, whole.optimizer_bytes / shards,
                      whole.activations_bytes / act_shards)


def min_chips_for_memory(total: ChipMemory | float, chip: Chip) -> int:
    """Fewest chips whose HBM holds ``total`` bytes if spread evenly (section 6.2)."""
    return hardware.min_chips_to_hold(total.total_bytes if isinstance(total, ChipMemory) else float(total), chip)


def max_params_data_parallel(chip: Chip, state: StateBytes = BOOK_ADAM) -> float:
    """Largest model whose state fits on each chip when nothing is sharded: HBM / bytes per param."""
    return chip.hbm_bytes / state.bytes_per_param
