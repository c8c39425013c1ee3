"""Pictures of a run: which requests ran in each step, and how full the block pool was.

Book: section 7.4 (continuous batching lets sequences join and leave between steps; chunked
prefill mixes prompt chunks with generate tokens; paged caches follow the tokens held).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from scalelib.serving.engine import StepRecord

PREFILL_COLOR, DECODE_COLOR, PREEMPT_COLOR = "tab:orange", "tab:blue", "tab:red"


def timeline(records: Sequence[StepRecord], ax: plt.Axes | None = None, title: str = "") -> plt.Axes:
    """One row per request, one column per step: prefill chunks, decode tokens, preemptions."""
    ax = ax or plt.subplots(figsize=(8, 3.5))[1]
    for kind, color in (("prefill", PREFILL_COLOR), ("decode", DECODE_COLOR)):
        xs = [rec.index for rec in records for _, _, k in rec.entries if k == kind]
        ys = [sid for rec in records for sid, _, k in rec.entries if k == kind]
        ax.scatter(xs, ys, s=18, marker="s", color=color, label=kind, linewidths=0)
    px = [rec.index for rec in records for _ in rec.preempted]
    py = [sid for rec in records for sid in rec.preempted]
    if px:
        ax.scatter(px, py, s=40, marker="x", color=PREEMPT_COLOR, label="preempted")
    ax.set(xlabel="step", ylabel="request", title=title or "what ran in each step")
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return ax


def occupancy(records: Sequence[StepRecord], ax: plt.Axes | None = None, title: str = "") -> plt.Axes:
    """Blocks held by running sequences and free blocks still holding cached prefixes, per step."""
    ax = ax or plt.subplots(figsize=(8, 2.8))[1]
    steps = np.array([rec.index for rec in records])
    used = np.array([rec.used_blocks for rec in records])
    cached = np.array([rec.cached_free_blocks for rec in records])
    ax.stackplot(steps, used, cached, labels=["in use", "free, cached prefix"], colors=[DECODE_COLOR, "tab:green"],
                 alpha=0.8)
    if records:
        ax.axhline(records[0].num_blocks, color="k", lw=1, ls="--", label="pool size")
    ax.set(xlabel="step", ylabel="blocks", title=title or "block pool occupancy")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    return ax
