"""Choosing a serving configuration: the slice and batch with the most throughput under a latency limit.

Book: section 8.3, Exercise 8.3 (serve a model on TPU v5e with a firm limit on the time per token:
which configuration gives the most throughput?). Added for chapter 8's planning exercise; it only
combines ``replica_memory`` and ``step_time``.

Candidates are one replica per power-of-two slice of 1 .. ``max_chips`` chips (the book's rounding
rule), everything fully sharded. On a slice the generate step grows with the batch while the
throughput per chip never falls (``B / (chips x step)`` rises until the weight matmuls turn
compute-bound, then stays flat), so the best batch of a slice is the largest that both fits in the
HBM the weights leave and keeps the step within the limit. Across slices, throughput per chip depends
on the batch alone, and a bigger slice allows a bigger batch; among slices whose throughput per chip
ties with the best (``rel_tol``), the fewest chips win.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib.hardware import Chip, Dtype
from scalelib.inference.replica_memory import Replica, free_hbm_bytes, max_batch
from scalelib.inference.step_time import DecodeStepTime, decode_step_time
from scalelib.validate import positive_int


@dataclass(frozen=True)
class ServingPlan:
    """One replica of ``chips`` chips decoding ``batch`` sequences; ``step`` is its generate step."""

    chips: int
    batch: int
    step: DecodeStepTime

    @property
    def tokens_per_s_per_chip(self) -> float:
        return self.step.tokens_per_s_per_chip


def best_serving_plan(chip: Chip, *, n_params: float, weight_bytes: float, kv_bytes_per_seq: float,
                      max_step_s: float, max_chips: int, compute: Dtype = "bf16",
                      rel_tol: float = 1e-9) -> ServingPlan | None:
    """Most generated tokens per second per chip with every step at most ``max_step_s``.

    Slices: powers of two up to ``max_chips`` that hold the weights and at least one cache. Batch:
    the largest whose caches fit and whose ``decode_step_time`` is within the limit. Returns
    ``None`` when no slice can run even one sequence in time.
    """
    max_chips = positive_int("max_chips", max_chips)
    if not (max_step_s > 0 and math.isfinite(max_step_s)):
        raise ValueError(f"max_step_s must be a positive finite number, got {max_step_s!r}")
    if not (kv_bytes_per_seq > 0 and math.isfinite(kv_bytes_per_seq)):
        raise ValueError(f"kv_bytes_per_seq must be a positive finite number, got {kv_bytes_per_seq!r}")

    plans: list[ServingPlan] = []
    chips = 1
    while chips <= max_chips:
        replica = Replica(chip, chips)

        def step(batch: int, replica: Replica = replica) -> DecodeStepTime:
            return decode_step_time(replica, n_params=n_params, weight_bytes=weight_bytes,
                                    kv_bytes_per_seq=kv_bytes_per_seq, batch=batch, compute=compute)

        if replica.hbm_bytes >= weight_bytes:
            fit = max_batch(free_hbm_bytes(replica, weight_bytes), kv_bytes_per_seq)
            if fit >= 1 and step(1).step_s <= max_step_s:
                lo, hi = 1, fit  # the step grows with the batch: bisect for the last one in time
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if step(mid).step_s <= max_step_s else (lo, mid - 1)
                plans.append(ServingPlan(chips, lo, step(lo)))
        chips *= 2
    if not plans:
        return None
    best = max(p.tokens_per_s_per_chip for p in plans)
    return min((p for p in plans if p.tokens_per_s_per_chip >= best * (1 - rel_tol)), key=lambda p: p.chips)
