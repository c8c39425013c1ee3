"""Pictures for the notebooks: rooflines and the time curves of section 1.

Every function draws on a matplotlib Axes (a new one if none is given) and returns it; none calls
``plt.show()``, so notebooks, tests and scripts all use them the same way.
"""

from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np

from scalelib import roofline
from scalelib.hardware import Chip, Dtype


def _axes(ax: Any) -> tuple[Any, Any]:
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    return ax


def roofline_plot(ceilings: Sequence[tuple[str, float, float]],
                  points: Sequence[tuple[str, float, float]] = (),
                  intensity_range: tuple[float, float] = (0.1, 1e4), ax: Any = None) -> tuple[Any, Any]:
    """Log-log roofline: one line per (label, flops_per_s, bytes_per_s), one dot per
    (label, intensity, achieved flops_per_s). Ridge points are marked."""
    ax = _axes(ax)
    x = np.logspace(np.log10(intensity_range[0]), np.log10(intensity_range[1]), 256)
    for label, peak, bw in ceilings:
        line, = ax.loglog(x, np.minimum(peak, x * bw), label=label)
        ridge = roofline.critical_intensity(peak, bw)
        if intensity_range[0] <= ridge <= intensity_range[1]:
            ax.plot([ridge], [peak], "o", color=line.get_color(), ms=4)
    for label, intensity, achieved in points:
        ax.plot([intensity], [achieved], "x", ms=7, mew=2)
        ax.annotate(label, (intensity, achieved), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("attainable FLOPs / s")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def chip_rooflines(chips: Sequence[Chip], dtype: Dtype = "bf16", ax: Any = None) -> tuple[Any, Any]:
    """The HBM roofline of each chip in ``chips``."""
    return roofline_plot([(c.name, c.flops_per_s(dtype), c.hbm_bytes_per_s) for c in chips], ax=ax)


def matmul_intensity_plot(chip: Chip, d: int, f: int, batches: Sequence[int], ax: Any = None) -> tuple[Any, Any]:
    """Intensity of bf16 x[B, D] @ W[D, F] against B, with the chip's critical intensity."""
    ax = _axes(ax)
    bs = np.asarray(batches)
    intensity = [roofline.matmul_cost(int(b), d, f).intensity for b in bs]
    ax.loglog(bs, intensity, label=f"matmul D={d}, F={f}")
    ax.axhline(roofline.chip_critical_intensity(chip), ls="--", color="gray",
               label=f"{chip.name} critical intensity")
    ax.set_xlabel("batch B (tokens)")
    ax.set_ylabel("FLOPs / byte")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def two_chip_matmul_plot(batch: int, f: int, ds: Sequence[int], flops_per_s: float, link_bytes_per_s: float,
                         ax: Any = None) -> tuple[Any, Any]:
    """Compute and communication time of section 1's two-chip matmul as D grows."""
    ax = _axes(ax)
    times = [roofline.two_chip_contracting_matmul(batch, int(d), f, flops_per_s, link_bytes_per_s) for d in ds]
    ax.loglog(ds, [t.compute_s for t in times], label="T_math (per chip)")
    ax.loglog(ds, [t.comms_s for t in times], label="T_comms (partial sums)")
    ax.axvline(roofline.two_chip_critical_d(flops_per_s, link_bytes_per_s), ls="--", color="gray",
               label="critical D")
    ax.set_xlabel("contracting dimension D")
    ax.set_ylabel("seconds")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def fat_tree_bandwidths(levels: Sequence[Any], ax: Any = None) -> Any:
    """One group per level of a switched tree (``scalelib.gpus.fabric.TreeLevel``, e.g. ``SuperPod.levels()``): the
    bandwidth of one unit's switches and of the cables into it as bars, and the ring collective bandwidth a child
    sees at that level, ``D W / (D - 1)``, as a dot (log scale, bytes/s one direction)."""
    ax = _axes(ax)
    if not levels:
        raise ValueError("levels is empty: pass the levels of a tree, e.g. fabric.H100_SUPERPOD.levels()")
    x = np.arange(len(levels))
    ax.bar(x - 0.2, [lv.switch_bytes_per_s for lv in levels], 0.4, label="switches of one unit")
    ax.bar(x + 0.2, [lv.cable_bytes_per_s for lv in levels], 0.4, label="links into one unit")
    ax.plot(x, [lv.collective_bytes_per_s for lv in levels], "ko", label="ring collective bandwidth of one child")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{lv.name}\n{lv.gpus} GPUs, {lv.degree} children" for lv in levels])
    ax.set_ylabel("bytes / s (one direction)")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
