"""What a user and an operator measure: time to first token, time per output token, throughput.

Book: section 7.4 and 8 (latency and throughput of serving: the time to the first token is set by
prefill and queueing, the time per output token by the generate step; throughput is tokens per
second over the whole server).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scalelib.serving.engine import Result, StepRecord


def ttft_s(r: Result) -> float:
    """Time to first token: arrival to the first new token."""
    return r.first_token_s - r.arrival_s


def tpot_s(r: Result) -> float:
    """Time per output token after the first (0 for a one-token answer)."""
    return (r.finish_s - r.first_token_s) / (len(r.tokens) - 1) if len(r.tokens) > 1 else 0.0


@dataclass(frozen=True)
class Summary:
    """A run in a few numbers (times in seconds; prefill tokens are those computed, prefix hits excluded)."""

    requests: int
    output_tokens: int
    prefill_tokens: int
    steps: int
    wall_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_mean_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s


def summarize(results: Sequence[Result], records: Sequence[StepRecord]) -> Summary:
    """Summary of a run: wall time from the first arrival to the last step's end."""
    if not results or not records:
        raise ValueError("summarize needs at least one finished request and one step record")
    ttft = np.array([ttft_s(r) for r in results])
    wall = max(rec.end_s for rec in records) - min(r.arrival_s for r in results)
    prefill = sum(n for rec in records for _, n, kind in rec.entries if kind == "prefill")
    return Summary(len(results), sum(len(r.tokens) for r in results), prefill, len(records), wall,
                   float(np.percentile(ttft, 50)), float(np.percentile(ttft, 99)),
                   float(np.mean([tpot_s(r) for r in results])))
