"""A cycle-level model of the MXU's systolic array (book section 2, Appendix B).

Which dataflow: weight-stationary, because that is what the appendix describes. The weights
(the RHS, W[K, N]) enter from the top and stay, one per processing element (PE); the LHS rows
X[M, K] flow in from the left edge with a diagonal skew, one PE to the right per cycle; partial
sums flow down one PE per cycle, and finished outputs leave at the bottom edge.

PE (k, n) holds W[k, n]. X[m, k] enters row k at cycle m + k (the skew) and reaches column n
at cycle m + k + n. The partial sum of Y[m, n] reaches row k at that same cycle, so each PE
adds X[m, k] * W[k, n] to the sum arriving from above and passes it down; Y[m, n] leaves the
bottom row at cycle m + (K - 1) + n. The array is therefore busy for M + K + N - 2 cycles per
weight tile, plus K cycles to shift the weights in (``load_weights=True``).

``mxu_padding`` gives the share of an MXU's work that is padding for a matmul shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scalelib.validate import positive_int

if TYPE_CHECKING:
    from scalelib.hardware import Chip


@dataclass(frozen=True)
class Cycle:
    """State of the array after one clock edge. Arrays are [K, N] (PE rows x columns); NaN = empty."""

    t: int
    phase: str  # "load" (weights shifting down) or "compute"
    weights: np.ndarray  # [K, N] weight held by each PE
    x: np.ndarray  # [K, N] activation in each PE this cycle
    psum: np.ndarray  # [K, N] partial sum each PE passes down
    row: np.ndarray  # [K, N] int, which LHS row m each PE works on (-1 = idle)
    outputs: tuple[tuple[int, int, float], ...]  # (m, n, value) leaving the bottom this cycle


@dataclass(frozen=True)
class SystolicRun:
    result: np.ndarray  # [M, N] = X @ W
    cycles: tuple[Cycle, ...]
    load_cycles: int
    compute_cycles: int

    @property
    def total_cycles(self) -> int:
        return self.load_cycles + self.compute_cycles

    @property
    def utilization(self) -> float:
        """Useful multiply-adds over PE-cycles of the compute phase."""
        busy = sum(int((c.row >= 0).sum()) for c in self.cycles if c.phase == "compute")
        k, n = self.cycles[-1].weights.shape
        return busy / (k * n * self.compute_cycles)


def simulate(x: np.ndarray, w: np.ndarray, load_weights: bool = True) -> SystolicRun:
    """Run X[M, K] @ W[K, N] on a K x N weight-stationary array, one register update per cycle."""
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"need X[M, K] and W[K, N] with equal K; got {x.shape} and {w.shape}")
    (m_rows, k_dim), n_dim = x.shape, w.shape[1]
    if min(m_rows, k_dim, n_dim) < 1:
        raise ValueError(f"every dimension must be at least 1; got X {x.shape}, W {w.shape}")
    cycles: list[Cycle] = []
    weights = np.full((k_dim, n_dim), np.nan)
    empty = np.full((k_dim, n_dim), np.nan)
    idle = np.full((k_dim, n_dim), -1)
    load = k_dim if load_weights else 0
    for t in range(load):  # weight rows shift down; the last row of W goes in first
        weights = np.vstack([w[k_dim - 1 - t][None, :], weights[:-1]])
        cycles.append(Cycle(t, "load", weights.copy(), empty, empty, idle, ()))
    weights = w.copy()
    xs, ps, rows = empty.copy(), np.zeros((k_dim, n_dim)), idle.copy()
    result = np.full((m_rows, n_dim), np.nan)
    compute = m_rows + k_dim + n_dim - 2
    for t in range(compute):
        new_x, new_rows = np.empty_like(xs), np.empty_like(rows)
        new_x[:, 1:], new_rows[:, 1:] = xs[:, :-1], rows[:, :-1]  # activations move right
        m_in = t - np.arange(k_dim)  # skewed feed: row k receives X[t - k, k]
        live = (m_in >= 0) & (m_in < m_rows)
        new_x[:, 0] = np.where(live, x[np.clip(m_in, 0, m_rows - 1), np.arange(k_dim)], np.nan)
        new_rows[:, 0] = np.where(live, m_in, -1)
        above = np.vstack([np.zeros((1, n_dim)), ps[:-1]])  # partial sums move down
        busy = new_rows >= 0
        ps = np.where(busy, above + np.where(busy, new_x, 0.0) * weights, 0.0)
        xs, rows = new_x, new_rows
        outs = []
        for n in np.flatnonzero(rows[-1] >= 0):
            m = int(rows[-1, n])
            result[m, n] = ps[-1, n]
            outs.append((m, int(n), float(ps[-1, n])))
        cycles.append(Cycle(load + t, "compute", weights, xs.copy(), np.where(busy, ps, np.nan),
                            rows.copy(), tuple(outs)))
    return SystolicRun(result, tuple(cycles), load, compute)


def tiled_matmul(x: np.ndarray, w: np.ndarray, mxu_dim: int) -> tuple[np.ndarray, int]:
    """X @ W on one ``mxu_dim`` x ``mxu_dim`` array: zero-pad K and N to whole tiles, run each
    weight tile, add the K tiles. Returns (result, cycles without pipelining between tiles)."""
    x, w = np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64)
    (m_rows, k_dim), n_dim = x.shape, w.shape[1]
    kp, np_ = _round_up(k_dim, mxu_dim), _round_up(n_dim, mxu_dim)
    xp = np.zeros((m_rows, kp)); xp[:, :k_dim] = x  # noqa: E702  [M, K padded]
    wp = np.zeros((kp, np_)); wp[:k_dim, :n_dim] = w  # noqa: E702  [K padded, N padded]
    out, cycles = np.zeros((m_rows, np_)), 0
    for k0 in range(0, kp, mxu_dim):
        for n0 in range(0, np_, mxu_dim):
            run = simulate(xp[:, k0:k0 + mxu_dim], wp[k0:k0 + mxu_dim, n0:n0 + mxu_dim])
            out[:, n0:n0 + mxu_dim] += run.result
            cycles += run.total_cycles
    return out[:, :n_dim], cycles


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclass(frozen=True)
class Padding:
    """How much of the MXU work for X[M, K] @ W[K, N] is padding."""

    shape: tuple[int, int, int]
    padded_shape: tuple[int, int, int]
    mxu_dim: int

    @property
    def useful_fraction(self) -> float:
        return math.prod(self.shape) / math.prod(self.padded_shape)

    @property
    def wasted_fraction(self) -> float:
        return 1.0 - self.useful_fraction


def mxu_padding(m: int, k: int, n: int, mxu_dim: int | None = None, chip: Chip | None = None,
                lhs_rows: int = 8) -> Padding:
    """Padding waste of X[M, K] @ W[K, N] on an MXU of side ``mxu_dim`` (or ``chip.mxu_dim``).

    K and N are padded to whole multiples of the array side (128, or 256 on v6e); M to whole
    groups of ``lhs_rows`` (the MXU takes the LHS 8 rows at a time).
    """
    if mxu_dim is None:
        if chip is None or chip.mxu_dim is None:
            raise ValueError(f"give mxu_dim or a TPU chip; {getattr(chip, 'name', chip)!r} has no MXU size")
        mxu_dim = chip.mxu_dim
    for name, v in (("m", m), ("k", k), ("n", n), ("mxu_dim", mxu_dim), ("lhs_rows", lhs_rows)):
        positive_int(name, v)
    padded = (_round_up(m, lhs_rows), _round_up(k, mxu_dim), _round_up(n, mxu_dim))
    return Padding((m, k, n), padded, mxu_dim)


# The drawings' sizes: a PE's three lines of text at TEXT_PT points fit in a square of PE_INCHES, and a figure of two
# panels of a 3 x 3 array stays under 8 inches wide, so a notebook shows it at its own size (not scaled down).
TEXT_PT = 8.5
PE_INCHES = 1.0
PANEL_MARGIN_INCHES = 0.9


def _panel_inches(shape: tuple[int, ...]) -> tuple[float, float]:
    """(width, height) of one cycle's panel for a PE grid of ``shape`` (rows, columns)."""
    return PE_INCHES * shape[1] + PANEL_MARGIN_INCHES, PE_INCHES * shape[0] + PANEL_MARGIN_INCHES


def draw_cycle(cycle: Cycle, ax: Any = None) -> tuple[Any, Any]:
    """One cycle: PE grid coloured by weight, activations and partial sums written in each PE.

    Returns ``(fig, ax)``; nothing is shown.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=_panel_inches(cycle.weights.shape))
    else:
        fig = ax.figure
    ax.imshow(np.ma.masked_invalid(cycle.weights), cmap="Blues", alpha=0.6)  # empty PEs left white
    for (k, n), m in np.ndenumerate(cycle.row):
        text = f"w={cycle.weights[k, n]:.3g}" if not np.isnan(cycle.weights[k, n]) else ""
        if m >= 0:
            text += f"\nx[{m},{k}]={cycle.x[k, n]:.3g}\nsum={cycle.psum[k, n]:.3g}"
        ax.text(n, k, text, ha="center", va="center", fontsize=TEXT_PT)
    ax.set_xticks(range(cycle.weights.shape[1]))
    ax.set_yticks(range(cycle.weights.shape[0]))
    ax.set_xlabel("column n (output)", fontsize=TEXT_PT)
    ax.set_ylabel("row k (contracting)", fontsize=TEXT_PT)
    ax.tick_params(labelsize=TEXT_PT)
    done = ", ".join(f"y[{m},{n}]" for m, n, _ in cycle.outputs)
    ax.set_title(f"cycle {cycle.t} ({cycle.phase})" + (f": out {done}" if done else ""), fontsize=TEXT_PT + 0.5)
    return fig, ax


def draw_cycles(run: SystolicRun, ts: Sequence[int] | None = None, ncols: int = 2) -> Any:
    """A grid of ``draw_cycle`` panels (default: every cycle). Returns the Figure."""
    import matplotlib.pyplot as plt

    ts = list(range(run.total_cycles)) if ts is None else list(ts)
    nrows = max(1, -(-len(ts) // ncols))
    width, height = _panel_inches(run.cycles[0].weights.shape)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax, t in zip(axes.flat, ts):
        draw_cycle(run.cycles[t], ax)
    for ax in list(axes.flat)[len(ts):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
