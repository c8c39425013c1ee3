"""Roofline of inference: how long a generate (decode) step and a prefill take.

Book: section 7.1.3 (a matmul over a batch of B tokens is compute-bound only when B passes the
critical batch, which depends on the weights' and the arithmetic's dtypes), 7.1.4 (attention
reads a KV cache per sequence, so at generate time it never becomes compute-bound), 7.1.5 (the
step-time equations and the pop quiz), 7.1.7 (LLaMA 2-13B's latency and throughput tables),
Appendix A, and section 8 (LLaMA 3-70B's step times and the latency / throughput figure).

A generate step of batch B on a replica (``memory.Replica``) is modelled in three parts:

* ``kv_load_s``: every sequence's cache streamed from HBM once (attention, memory-bound);
* ``param_load_s``: every weight streamed from HBM once;
* ``flops_s``: the 2 x params x B FLOPs of the weight matmuls.

The weight matmuls overlap loading and arithmetic, so they cost the larger of the last two;
attention adds its load on top: ``step_s = kv_load_s + max(param_load_s, flops_s)``. For small
batches this is the memory-only bound ``kv_load_s + param_load_s``. Prefill is compute-bound:
2 x params x tokens FLOPs at some fraction (MFU) of peak.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib import roofline as rl
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.hardware import Chip, Dtype
from scalelib.inference.replica_memory import Replica, dtype_bytes, kv_bytes_per_token
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int


def _check_batch(batch: float) -> float:
    if not (isinstance(batch, (int, float)) and math.isfinite(batch) and batch >= 0):
        raise ValueError(f"batch must be a finite number of sequences >= 0, got {batch!r}")
    return float(batch)


def dense_forward_flops(n_params: float, tokens: float) -> float:
    """The 2 N rule: a forward pass does about 2 FLOPs per weight per token (attention left out)."""
    if n_params < 0 or tokens < 0:
        raise ValueError(f"n_params and tokens must be >= 0, got {n_params!r} and {tokens!r}")
    return 2.0 * n_params * tokens


@dataclass(frozen=True)
class DecodeStepTime:
    """One generate step of ``batch`` sequences, split as in the module docstring."""

    batch: float
    chips: int
    kv_load_s: float
    param_load_s: float
    flops_s: float

    @property
    def mlp_s(self) -> float:
        """The weight matmuls: loading and arithmetic overlap, the slower one counts."""
        return max(self.param_load_s, self.flops_s)

    @property
    def step_s(self) -> float:
        """Seconds per step (book eq. 4): cache load plus the weight matmuls."""
        return self.kv_load_s + self.mlp_s

    @property
    def memory_bound_s(self) -> float:
        """The small-batch lower bound: caches and weights both streamed, FLOPs ignored."""
        return self.kv_load_s + self.param_load_s

    @property
    def bound(self) -> str:
        """'compute' when the weight matmuls wait on FLOPs, else 'memory'."""
        return "compute" if self.flops_s > self.param_load_s else "memory"

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second: one per sequence per step."""
        return self.batch / self.step_s

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.tokens_per_s / self.chips

    @property
    def chip_s_per_token(self) -> float:
        """Chip-seconds spent per generated token: what serving a token costs."""
        return self.chips * self.step_s / self.batch


def decode_step_time(replica: Replica, *, n_params: float, weight_bytes: float, kv_bytes_per_seq: float,
                     batch: float, compute: Dtype = "bf16") -> DecodeStepTime:
    """Generate step of ``batch`` sequences, each with ``kv_bytes_per_seq`` of cache.

    ``weight_bytes`` is the whole model in its stored format; ``compute`` is the dtype the MXU
    multiplies in (bf16 FLOPs with int8 weights is the common serving case).
    """
    batch = _check_batch(batch)
    for name, v in (("n_params", n_params), ("weight_bytes", weight_bytes), ("kv_bytes_per_seq", kv_bytes_per_seq)):
        if not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    bw = replica.hbm_bytes_per_s
    return DecodeStepTime(
        batch=batch, chips=replica.chips,
        kv_load_s=rl.comms_time_s(batch * kv_bytes_per_seq, bw),
        param_load_s=rl.comms_time_s(weight_bytes, bw),
        flops_s=rl.compute_time_s(dense_forward_flops(n_params, batch), replica.flops_per_s(compute)))


def model_decode_step_time(cfg: TransformerConfig, replica: Replica, batch: float, seq_len: float, *,
                           weights: str | float = "bf16", kv: str | float = "bf16", compute: Dtype = "bf16",
                           n_params: float | None = None) -> DecodeStepTime:
    """``decode_step_time`` for a config: weights, cache and FLOPs from its shape.

    ``n_params`` overrides the exact count (the book often rounds, e.g. 70e9 for LLaMA 3-70B).
    """
    n = tf.param_counts(cfg).total if n_params is None else n_params
    return decode_step_time(replica, n_params=n, weight_bytes=n * dtype_bytes(weights),
                            kv_bytes_per_seq=kv_bytes_per_token(cfg, kv) * seq_len, batch=batch, compute=compute)


def weight_load_s(weight_bytes: float, replica: Replica) -> float:
    """Streaming every weight once from HBM: the floor under any step's latency (Exercise 7.3)."""
    return rl.comms_time_s(weight_bytes, replica.hbm_bytes_per_s)


def full_hbm_read_s(replica: Replica) -> float:
    """Reading all of the replica's HBM once: the step time when weights and caches fill it."""
    return rl.comms_time_s(replica.hbm_bytes, replica.hbm_bytes_per_s)


def decode_critical_batch(chip: Chip, weights: str | float = "bf16", compute: Dtype = "bf16") -> float:
    """Tokens per step above which the weight matmuls are compute-bound (B << D, F).

    Each token brings 2 FLOPs per weight and each weight costs ``weights`` bytes to load, so
    B* = (FLOPs/s of ``compute``) / (HBM bytes/s) x bytes per weight / 2: 240 on v5e in bf16,
    120 with int8 weights and bf16 arithmetic, 240 again with int8 arithmetic.
    """
    return rl.matmul_critical_batch(chip.flops_per_s(compute), chip.hbm_bytes_per_s, weight_bytes=dtype_bytes(weights))


def moe_critical_batch(dense_critical_batch: float, n_experts: int, experts_per_token: int) -> float:
    """Tokens per step for an MoE layer's experts to be compute-bound (Exercise 7.5).

    Every expert's weights are loaded but a token uses only k of the E, so the dense figure
    grows by E / k.
    """
    positive_int("n_experts", n_experts)
    if not positive_int("experts_per_token", experts_per_token) <= n_experts:
        raise ValueError(f"need ints 1 <= experts_per_token <= n_experts, got k={experts_per_token!r}, E={n_experts!r}")
    return dense_critical_batch * n_experts / experts_per_token


def prefill_attention_compute_bound_len(critical_intensity: float) -> float:
    """Prompt length above which prefill's (MHA) attention is compute-bound.

    Self-attention over T tokens has intensity T S / (T + S) = T / 2 per head (section 7.1.4),
    so it passes the chip's critical intensity at T = 2 x that (480 on v5e).
    """
    return fl.attention_compute_bound_seq_len(critical_intensity, group_size=1)


def prefill_time_s(n_params: float, tokens: float, replica: Replica, mfu: float = 1.0,
                   compute: Dtype = "bf16") -> float:
    """Prefill of ``tokens`` prompt tokens: compute-bound, 2 N FLOPs a token at ``mfu`` of peak."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    return rl.compute_time_s(dense_forward_flops(n_params, tokens), mfu * replica.flops_per_s(compute))


def kv_flops_crossover_seq_len(n_params: float, bytes_per_token: float, chip: Chip, compute: Dtype = "bf16") -> float:
    """Context length at which loading one sequence's cache takes as long as its 2 N FLOPs.

    Longer contexts make a large-batch step spend more time on caches than on arithmetic
    (section 8.2): S x bytes_per_token / W_hbm = 2 N / C.
    """
    per_seq_flops_s = rl.compute_time_s(dense_forward_flops(n_params, 1), chip.flops_per_s(compute))
    per_token_load_s = rl.comms_time_s(bytes_per_token, chip.hbm_bytes_per_s)
    return per_seq_flops_s / per_token_load_s


def decode_step_cost(cfg: TransformerConfig, batch: int, cache_len: int, value_bytes: float = 4) -> rl.OpCost:
    """FLOPs and HBM bytes of one step of ``scalelib.inference.decode`` (one new token per sequence).

    FLOPs: the matmuls of ``transformer_flops.forward_flops`` for ``batch`` tokens that attend
    over the whole ``cache_len`` buffer (the masked slots are multiplied too). Bytes: every
    weight read once except the embedding table, of which only the ``batch`` looked-up rows
    are read (unless tied, when the unembedding reads it all), plus the whole cache read once
    and the new keys and values written. Activations ([batch, D]-sized) are left out.
    """
    positive_int("batch", batch)
    positive_int("cache_len", cache_len)
    counts = tf.param_counts(cfg)
    embed_read = counts.embedding if cfg.tied_embeddings else batch * cfg.d_model
    weights = (counts.total - counts.embedding + embed_read) * value_bytes
    cache = kv_bytes_per_token(cfg, value_bytes) * batch * (cache_len + 1)
    flops = fl.forward_flops(cfg, batch, cache_len).matmul_flops
    return rl.OpCost(flops=flops, bytes=float(weights + cache))
