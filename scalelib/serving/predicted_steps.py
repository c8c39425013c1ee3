"""The engine against chapter 7's cost model, on the machine it runs on.

Book: section 7.1.5 (a generate step of B sequences streams the weights and the B caches from
memory and does about 2PB FLOPs of weight matmuls) and section 8.2 (latency and throughput
against batch). On a TPU the chip's numbers come from its spec sheet; here they come from
``scalelib.machine``, which measures this machine's matmul rate and memory bandwidth, so the
model of chapters 7 and 8 can be set beside what the engine measures step by step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scalelib import hardware as hw
from scalelib.inference import replica_memory
from scalelib.inference import step_time as st
from scalelib.machine import MeasuredRoofline
from scalelib.serving.engine import StepRecord
from scalelib.transformer import TransformerConfig


def measured_chip(fit: MeasuredRoofline, name: str = "this machine") -> hw.Chip:
    """A ``hardware.Chip`` with the measured ceilings (the bf16 and int8 slots both hold the measured matmul rate)."""
    return dataclasses.replace(hw.H100, name=name, bf16_flops_per_s=fit.flops_per_s, int8_ops_per_s=fit.flops_per_s,
                               hbm_bytes_per_s=fit.bytes_per_s, usd_per_hour=None, source="measured")


def predicted_decode_step(cfg: TransformerConfig, chip: hw.Chip, batch: int, context: int,
                          value_bytes: float = 4) -> st.DecodeStepTime:
    """Chapter 7's generate step for ``batch`` sequences of ``context`` cached tokens on one ``chip``."""
    return st.model_decode_step_time(cfg, replica_memory.Replica(chip, 1), batch, context, weights=value_bytes,
                                     kv=value_bytes)


def decode_step_times(records: Sequence[StepRecord]) -> dict[int, list[float]]:
    """Seconds of the steps that only generated (no prompt chunk), grouped by how many sequences they held."""
    out: dict[int, list[float]] = {}
    for rec in records:
        if rec.entries and all(kind == "decode" for _, _, kind in rec.entries):
            out.setdefault(len(rec.entries), []).append(rec.end_s - rec.start_s)
    return out
