"""Pipeline timetables: which stage runs the forward (F) or backward (B) of which microbatch, tick by tick.

Book section 5.1.5 (Pipelining). The L layers are cut into S stages and the batch into M
microbatches. A stage can run F of microbatch i once the stage before it has, and B once it has run
F and the stage after it has run B. Two orders are common:

* GPipe: every forward, then every backward (newest first: what autodiff of a loop does); each
  stage holds all M microbatches' activations at the peak;
* 1F1B: fill the pipe, then alternate one forward and one backward, then drain; stage s holds at
  most S - s microbatches.

Both take 2 (M + S - 1) ticks when every op is one tick long, so (S - 1) / (M + S - 1) of each
stage's time is idle: the bubble. ``scalelib.parallel.pipeline`` executes such a timetable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from scalelib.validate import positive_int

Kind = Literal["gpipe", "1f1b"]
KINDS: tuple[str, ...] = ("gpipe", "1f1b")


class Op(NamedTuple):
    time: int  # tick
    stage: int
    op: str  # "F" or "B"
    microbatch: int


@dataclass(frozen=True)
class Schedule:
    kind: str
    n_stages: int
    n_microbatches: int
    table: tuple[Op, ...]  # sorted by (time, stage)

    @property
    def n_ticks(self) -> int:
        return 1 + max(o.time for o in self.table)

    @property
    def bubble_fraction(self) -> float:
        """Idle fraction of the stage-ticks (each stage is busy for 2 M of them)."""
        return 1 - len(self.table) / (self.n_stages * self.n_ticks)

    def peak_in_flight(self) -> tuple[int, ...]:
        """Per stage: most microbatches whose F has run but whose B has not (stored activations)."""
        peaks = []
        for s in range(self.n_stages):
            live = peak = 0
            for o in (o for o in self.table if o.stage == s):
                live += 1 if o.op == "F" else -1
                peak = max(peak, live)
            peaks.append(peak)
        return tuple(peaks)


def _stage_order(kind: str, s: int, n_stages: int, m: int) -> list[tuple[str, int]]:
    if kind == "gpipe":  # all forwards, then backwards newest first (what autodiff of a loop does)
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    warm = min(n_stages - s - 1, m)  # 1F1B: fill the pipe, then alternate, then drain
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def schedule(kind: Kind, n_stages: int, n_microbatches: int) -> Schedule:
    """Timetable of ``kind`` ("gpipe" or "1f1b"): each stage runs its op order as early as the
    dependencies allow (F(s, i) after F(s-1, i); B(s, i) after F(s, i) and B(s+1, i))."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'gpipe' or '1f1b', got {kind!r}")
    positive_int("n_stages", n_stages)
    positive_int("n_microbatches", n_microbatches)
    s_, m = n_stages, n_microbatches
    orders = [_stage_order(kind, s, s_, m) for s in range(s_)]
    done: dict[tuple[str, int, int], int] = {}  # (op, stage, mb) -> tick
    table: list[Op] = []
    t = 0
    while any(orders):
        now = []
        for s in range(s_):
            if not orders[s]:
                continue
            op, i = orders[s][0]
            if op == "F":
                ready = s == 0 or ("F", s - 1, i) in done
            else:
                ready = ("F", s, i) in done and (s == s_ - 1 or ("B", s + 1, i) in done)
            if ready:
                orders[s].pop(0)
                now.append(Op(t, s, op, i))
        done.update({(o.op, o.stage, o.microbatch): t for o in now})  # visible from the next tick on
        table += now
        t += 1
    return Schedule(kind, s_, m, tuple(table))


def draw_schedule(sched: Schedule, ax: Any = None) -> tuple[Any, Any]:
    """Gantt chart: one row per stage, F blue / B green boxes labelled by microbatch -> (fig, ax)."""
    import matplotlib.pyplot as plt  # only when drawing: importing scalelib.parallel stays light

    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * sched.n_ticks), 0.5 * sched.n_stages + 1.2)) if ax is None \
        else (ax.figure, ax)
    for o in sched.table:
        ax.broken_barh([(o.time, 1)], (o.stage - 0.4, 0.8), color="tab:blue" if o.op == "F" else "tab:green",
                       edgecolor="white")
        ax.text(o.time + 0.5, o.stage, f"{o.op}{o.microbatch}", ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(sched.n_stages), [f"stage {s}" for s in range(sched.n_stages)])
    ax.set_ylim(sched.n_stages - 0.5, -0.5)
    ax.set_xlim(0, sched.n_ticks)
    ax.set_xlabel("tick")
    ax.set_title(f"{sched.kind}: S={sched.n_stages}, M={sched.n_microbatches}, "
                 f"bubble {sched.bubble_fraction:.0%}")
    return fig, ax
