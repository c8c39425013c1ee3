"""The book's closed forms for training parallelism: when each scheme is compute-bound.

Book: "How to Scale Your Model", section 5 (How to Parallelize a Transformer for Training):
5.1.1 data parallelism (critical batch C / W_ici), 5.1.2 FSDP (the same threshold), 5.1.3 tensor
parallelism (Y < F / alpha), 5.1.4 mixed FSDP x tensor parallelism, its optimal split and the
range of FSDP degrees that stay compute-bound (with Appendix C), 5.1.5 the pipeline bubble, 5.1.6
data parallelism between pods over DCN, and section 5.2's closing remark on HBM.

These are plain formulas over a ``hardware.Chip``; they import no scheme. The per-layer pricing
that asks each scheme for its collectives is ``scalelib.parallel.pricing``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib import roofline
from scalelib.hardware import Chip, Dtype
from scalelib.validate import positive_int


# ------------------------------------------------------------------ closed-form thresholds

def ici_intensity(chip: Chip, n_axes: int = 1, dtype: Dtype = "bf16") -> float:
    """alpha = C / (n_axes x W_ici bidi): FLOPs per byte the ICI can feed (2550 per axis on v5p)."""
    positive_int("n_axes", n_axes)
    return roofline.critical_intensity(chip.flops_per_s(dtype), n_axes * chip.ici_bidi_bytes_per_s)


def critical_batch_tokens(flops_per_s: float, bytes_per_s: float) -> float:
    """Tokens per replica above which data parallelism's weight sync hides under the FLOPs.

    Per layer the backward does 8 B D F FLOPs against an AllReduce of 8 D F bytes (bf16), so
    the threshold is the channel's critical intensity C / W (section 5.1.1; 5.1.6 for DCN).
    """
    return roofline.critical_intensity(flops_per_s, bytes_per_s)


def dp_critical_batch_per_chip_tokens(chip: Chip, n_axes: int = 1, dtype: Dtype = "bf16") -> float:
    """DP and FSDP stay compute-bound while batch per chip > C / (n_axes W_ici) (5.1.1, 5.1.2)."""
    return ici_intensity(chip, n_axes, dtype)


def tp_max_ways(d_ff: float, chip: Chip, n_axes: int = 1) -> float:
    """Tensor parallelism is compute-bound while Y < n_axes x F / alpha (section 5.1.3)."""
    return d_ff / ici_intensity(chip, n_axes)


def tp_min_d_ff(ways: float, chip: Chip, n_axes: int = 1) -> float:
    """Smallest F for which ``ways``-way tensor parallelism stays compute-bound: Y x alpha / n_axes."""
    return ways * ici_intensity(chip, n_axes)


def mixed_critical_batch_per_chip_tokens(d_ff: float, chip: Chip, m_x: int = 2, m_y: int = 1) -> float:
    """FSDP x TP at the optimal split is compute-bound while B / N > 4 alpha^2 / (M_X M_Y F)
    (section 5.1.4 and Appendix C); alpha is the single-axis C / W_ici."""
    alpha = ici_intensity(chip)
    return 4 * alpha**2 / (m_x * m_y * d_ff)


def optimal_fsdp_ways(batch_tokens: float, d_ff: float, chips: float, m_x: int = 2, m_y: int = 1) -> float:
    """X_opt = sqrt(B M_X N / (F M_Y)), the FSDP degree minimizing FSDP + TP comms (5.1.4)."""
    for name, v in (("batch_tokens", batch_tokens), ("d_ff", d_ff), ("chips", chips)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    return math.sqrt(batch_tokens * m_x * chips / (d_ff * m_y))


def mixed_fsdp_ways_range(batch_tokens: float, d_ff: float, chips: float, chip: Chip, m_x: int = 2,
                          m_y: int = 1) -> tuple[float, float] | None:
    """FSDP degrees X (with Y = N / X) at which FSDP x TP is compute-bound: the roots of
    X^2 F / (N M_X) - X B F / (N alpha) + B / M_Y = 0 (Appendix C). None below the threshold.
    Chapter 6 trains LLaMA 3-70B with the larger root (the most FSDP that still keeps up)."""
    alpha = ici_intensity(chip)
    a, b, c = d_ff / (chips * m_x), -batch_tokens * d_ff / (chips * alpha), batch_tokens / m_y
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root = math.sqrt(disc)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


def power_of_two_split(chips: int, fsdp_target: float) -> tuple[int, int]:
    """(X, Y): X the power of two nearest ``fsdp_target`` (in log scale), Y the largest power
    of two with X Y <= chips (chapter 6 turns X ~ 1927 on 8960 chips into 2048 x 4)."""
    chips = positive_int("chips", chips)
    if not fsdp_target >= 1:
        raise ValueError(f"fsdp_target must be >= 1 (an FSDP degree), got {fsdp_target!r}")
    x = min(2 ** round(math.log2(fsdp_target)), 2 ** int(math.log2(chips)))
    return x, 2 ** int(math.log2(chips // x))


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a GPipe-style schedule: (Z - 1) / (M + Z - 1) for Z stages, M microbatches."""
    positive_int("stages", stages)
    positive_int("microbatches", microbatches)
    return (stages - 1) / (microbatches + stages - 1)


def hbm_critical_batch_tokens(chip: Chip, dtype: Dtype = "bf16") -> float:
    """Batch per chip below which the matmuls wait on HBM (section 5.2's closing remark)."""
    return roofline.chip_matmul_critical_batch(chip, dtype)


@dataclass(frozen=True)
class DcnBudget:
    """A slice's FLOPs and DCN bandwidth, and the per-slice batch that keeps DCN DP compute-bound."""

    chips: int
    hosts: int
    flops_per_s: float
    dcn_bytes_per_s: float

    @property
    def critical_batch_tokens(self) -> float:
        return critical_batch_tokens(self.flops_per_s, self.dcn_bytes_per_s)


def dcn_budget(chip: Chip, chips: int, dtype: Dtype = "bf16") -> DcnBudget:
    """Section 5.1.6: hosts = chips / chips per host, each with ``dcn_bytes_per_s_per_host``."""
    chips = positive_int("chips", chips)
    hosts = math.ceil(chips / chip.chips_per_host)
    return DcnBudget(chips, hosts, chips * chip.flops_per_s(dtype), hosts * chip.dcn_bytes_per_s_per_host)
