"""Measure the roofline of the machine you are on: peak matmul FLOPs/s and memory bandwidth.

Book section 1 draws rooflines for TPUs and GPUs from their spec sheets; here a student measures
their own CPU (or accelerator) and places real ops on the same kind of plot. Matmuls of
x[B, D] @ W[D, D] with growing B sweep the arithmetic intensity from memory-bound to
compute-bound; ``fit_roofline`` recovers the two ceilings from the measurements.

Timings are noisy: each point is the best of several runs after a warm-up, and nothing here is
asserted in a test beyond "positive and finite".
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from scalelib import roofline
from scalelib.validate import positive_int


@dataclass(frozen=True)
class Measurement:
    """One timed op: its work and its best observed time."""

    label: str
    flops: float
    bytes: float
    seconds: float

    @property
    def intensity(self) -> float:
        return roofline.arithmetic_intensity(self.flops, self.bytes)

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds


@dataclass(frozen=True)
class MeasuredRoofline:
    """The two ceilings fitted to a set of measurements."""

    flops_per_s: float
    bytes_per_s: float

    @property
    def ridge_intensity(self) -> float:
        """Intensity where the ceilings meet: the machine's critical intensity."""
        return roofline.critical_intensity(self.flops_per_s, self.bytes_per_s)


def best_time_s(fn: Callable[[], jax.Array], repeats: int = 5, calls: int = 1) -> float:
    """Best wall time of one ``fn()`` over ``repeats`` samples, after one warm-up (compilation) run.

    Each sample times ``calls`` runs issued back to back, waiting only for the last, and counts a
    run as the sample's time over ``calls``. On an accelerator JAX returns before the device has
    finished, so runs queue on the device and its own time dominates; with ``calls=1`` each sample
    also holds the host's dispatch and the wait for the result: on an H200 about 0.2 ms a run, which
    made an 8192^3 bf16 matmul look 15% slower and a 3 GB add 29% slower. Keep ``calls=1`` on a CPU,
    where XLA may run queued programs side by side.
    """
    repeats, calls = positive_int("repeats", repeats), positive_int("calls (runs per timed sample)", calls)
    fn().block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls - 1):
            fn()
        fn().block_until_ready()  # one stream: the last run ends after the others
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def measure_matmul(batch: int, d: int, dtype: Any = jnp.float32, repeats: int = 5, calls: int = 1) -> Measurement:
    """Time x[batch, d] @ W[d, d] on the default device (``calls``: see ``best_time_s``)."""
    kx, kw = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (batch, d), dtype)  # [B, D]
    w = jax.random.normal(kw, (d, d), dtype)  # [D, D]
    matmul = jax.jit(jnp.matmul)
    seconds = best_time_s(lambda: matmul(x, w), repeats, calls)
    itemsize = jnp.dtype(dtype).itemsize
    cost = roofline.matmul_cost(batch, d, d, itemsize, itemsize)
    return Measurement(f"matmul B={batch} D={d}", cost.flops, cost.bytes, seconds)


def measure_bandwidth(num_bytes: int = 64 * 2**20, repeats: int = 5) -> Measurement:
    """Time y = x * 2 + 1 over ``num_bytes`` of float32: read once, write once, 2 FLOPs/element."""
    n = num_bytes // 4
    x = jnp.arange(n, dtype=jnp.float32)  # [n]
    scale = jax.jit(lambda a: a * 2.0 + 1.0)
    seconds = best_time_s(lambda: scale(x), repeats)
    return Measurement(f"axpy {num_bytes / 2**20:.0f} MiB", 2.0 * n, 8.0 * n, seconds)


def sweep_matmuls(batches: Sequence[int] = (1, 4, 16, 64, 256, 1024), d: int = 2048,
                  repeats: int = 3) -> list[Measurement]:
    """Matmuls of growing batch: intensity rises from ~1 to ~d/3 FLOPs/byte (float32)."""
    return [measure_matmul(b, d, repeats=repeats) for b in batches]


def fit_roofline(points: Sequence[Measurement]) -> MeasuredRoofline:
    """Fit the roofline as the upper envelope of the measurements.

    No op can beat either ceiling, so the peak is the fastest FLOPs/s seen and the bandwidth is
    the largest ``flops_per_s / intensity`` (= bytes/s) seen. Needs at least one memory-bound
    and one compute-bound point to be meaningful.
    """
    if len(points) < 2:
        raise ValueError(f"fit_roofline needs at least 2 measurements, got {len(points)}")
    return MeasuredRoofline(
        flops_per_s=max(p.flops_per_s for p in points),
        bytes_per_s=max(p.bytes_per_s for p in points),
    )
