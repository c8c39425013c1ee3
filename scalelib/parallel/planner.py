"""Plan a training run: which schemes fit, how fast each is, what the run costs.

Book: "How to Scale Your Model", section 5.1.6 (LLaMA-3 70B on TPU v5p: the FSDP, FSDP x TP and
DCN limits) and section 6 (the whole plan: FLOPs of the run, days on a pod, the fewest chips by
memory, memory per chip, why FSDP alone is comms-bound, the 2048 x 4 FSDP x TP split).

Step time. Compute: the run's 6 N FLOPs per token (section 4) over the chips at ``mfu`` of peak.
Communication: the per-layer ratio of comms to peak-rate compute from ``pricing.layer_cost`` (the
book's MLP layer), applied pass by pass to the whole model, i.e. every weight is assumed to
travel like the MLP's. A pass takes max(compute, comms); a pipeline is stretched by its bubble.

Two verdicts: ``compute_bound`` is the book's (each pass's comms fit under its FLOPs at PEAK rate,
whatever ``mfu``: section 5's thresholds, e.g. 850 tokens per chip for FSDP on v5p); ``comms_hidden``
asks the same at ``mfu``, so the step time is compute alone. The first implies the second; FSDP at
468 tokens per chip and 40% MFU is comms-bound by the book yet shows no comms in its step time.
Schemes that leave chips idle (an FSDP x TP split rounded to powers of two) are timed on the
chips they use.

Several slices (``slices > 1``): only the "multislice" scheme spans them, each slice taking
1 / slices of the batch. Every other scheme is the single-pod alternative: one slice runs the
whole global batch while the others sit idle. Its shape (the FSDP x TP split included) is chosen
for that whole batch and it is priced for it, so all schemes are compared on the same step of
``global_batch_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from scalelib import transformer as tf
from scalelib.hardware import Chip, Dtype
from scalelib.parallel import thresholds, pricing, registry
from scalelib.parallel.context import PlanContext, split_axes
from scalelib.parallel.layer import LayerModel
from scalelib.parallel.layout import Layout
from scalelib.parallel.chip_memory import BOOK_ADAM, ChipMemory, StateBytes, memory_per_chip, min_chips_for_memory, \
    training_memory
from scalelib.topology import Slice
from scalelib.transformer_flops import six_n_train_flops
from scalelib.validate import positive_int

SECONDS_PER_DAY = 86_400.0
_PASS_SHARE = (1 / 3, 2 / 3)  # forward, backward share of a step's FLOPs (2 + 4 per param-token)


def training_flops(n_params: float, tokens: float) -> float:
    """FLOPs of a run: 6 x params x tokens (section 4; 6.3e24 for LLaMA 3-70B on 15T tokens)."""
    return six_n_train_flops(n_params, tokens)


def training_time_s(total_flops: float, chips: int, chip: Chip, mfu: float = 1.0, dtype: Dtype = "bf16") -> float:
    """Seconds to do ``total_flops`` on ``chips`` chips at ``mfu`` of their peak, if compute-bound."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}; 0.4 is a typical training MFU")
    if not (chips >= 1):
        raise ValueError(f"chips must be >= 1, got {chips!r}")
    return total_flops / (chips * chip.flops_per_s(dtype) * mfu)


def max_chips_compute_bound(global_batch_tokens: float, min_batch_per_chip_tokens: float) -> float:
    """Most chips a batch can be spread over before falling under the per-chip threshold."""
    return global_batch_tokens / min_batch_per_chip_tokens


def min_global_batch_tokens(min_batch_per_chip_tokens: float, chips: int) -> float:
    """Smallest global batch that keeps ``chips`` chips above a per-chip threshold."""
    return min_batch_per_chip_tokens * chips


def total_chips(chip: Chip, where: Slice | int | None = None, slices: int = 1) -> int:
    """Chips of ``slices`` copies of ``where`` (a Slice or a count; default a full pod)."""
    return slice_axes(chip, chip.pod_chips if where is None else where)[0] * slices


def total_hbm_bytes(chip: Chip, where: Slice | int | None = None, slices: int = 1) -> float:
    """HBM of all those chips together (Exercise 5.3 compares a run's bytes with it)."""
    return total_chips(chip, where, slices) * chip.hbm_bytes


def sequences_per_batch(global_batch_tokens: int, seq_len: int) -> int:
    """Sequences in the batch: the most data-parallel ways without sequence sharding (6.3)."""
    if global_batch_tokens % seq_len:
        raise ValueError(f"batch of {global_batch_tokens} tokens is not a whole number of {seq_len}-token sequences")
    return global_batch_tokens // seq_len


@dataclass(frozen=True)
class SchemePlan:
    """One scheme on the requested chips: layout, memory, speed and cost."""

    layout: Layout
    memory: ChipMemory
    fits_in_hbm: bool
    batch_per_chip_tokens: float
    compute_bound: bool  # the book's criterion: comms <= compute at peak FLOPs/s, in every pass
    comms_hidden: bool  # comms <= compute at the plan's mfu, in every pass: step_time_s is compute only
    step_time_s: float
    training_time_s: float | None
    cost_usd: float | None
    notes: tuple[str, ...] = ()
    compute_s: float = 0.0  # the step's FLOPs at the plan's mfu, both passes
    exposed_comms_s: float = 0.0  # communication not hidden under a pass's compute
    bubble_s: float = 0.0  # a pipeline's idle share of the step

    @property
    def scheme(self) -> str:
        return self.layout.scheme

    @property
    def chips_used(self) -> int:
        return self.layout.chips

    @property
    def feasible(self) -> bool:
        """Its state and activations fit in HBM and its shape is possible (see ``notes``)."""
        return self.fits_in_hbm and not any(n.startswith("infeasible") for n in self.notes)


@dataclass(frozen=True)
class TrainingPlan:
    """Every scheme considered for one run, with the book's reference numbers."""

    model: str
    chip: Chip
    chips: int
    global_batch_tokens: float
    seq_len: int
    mfu: float
    train_flops: float | None
    min_chips_for_memory: int
    fsdp_critical_batch_per_chip_tokens: float
    mixed_critical_batch_per_chip_tokens: float
    schemes: tuple[SchemePlan, ...]

    @property
    def batch_per_chip_tokens(self) -> float:
        """Global batch over every chip of the request (the B / N of section 5's thresholds)."""
        return self.global_batch_tokens / self.chips

    def scheme(self, name: str) -> SchemePlan:
        for s in self.schemes:
            if s.scheme == name:
                return s
        raise KeyError(f"no {name!r} in this plan; it has {[s.scheme for s in self.schemes]}")

    @property
    def feasible(self) -> tuple[SchemePlan, ...]:
        return tuple(s for s in self.schemes if s.feasible)

    @property
    def best(self) -> SchemePlan:
        """Fastest feasible scheme, compute-bound ones first.

        Within each group schemes are ranked by the time of the whole run (the step time when no
        ``train_tokens`` was given: every scheme's step covers the same global batch, so the two
        orders agree). A one-slice scheme that is compute-bound on one pod therefore loses to a
        compute-bound multislice scheme that finishes sooner on all of them.
        """
        if not self.feasible:
            raise ValueError(f"no scheme fits {self.model} on {self.chips} x {self.chip.name}; add chips or "
                             "use more rematerialization")
        return min(self.feasible, key=lambda s: (not s.compute_bound, _run_time_s(s)))


def _run_time_s(s: SchemePlan) -> float:
    return s.step_time_s if s.training_time_s is None else s.training_time_s


def slice_axes(chip: Chip, where: Slice | int) -> tuple[int, tuple[int, ...]]:
    """(chips, ICI axes) of ``where``: a Slice's own shape, or a chip count split over the chip's torus axes."""
    if isinstance(where, Slice):
        axes = tuple(n for n in where.shape if n > 1) or (1,)
        return where.num_chips, axes
    where = positive_int("where (a chip count; or give a topology.Slice)", where)
    n_axes = len(chip.pod_shape) if chip.torus else 1
    return where, split_axes(where, n_axes)


def param_counts(cfg: tf.TransformerConfig, n_params: float | None = None) -> tuple[float, float]:
    """(parameters counted, those active per token): the config's exact count, or ``n_params`` with the config's
    active share (the book carries 70e9 for LLaMA 3-70B)."""
    counts = tf.param_counts(cfg)
    n = counts.total if n_params is None else n_params
    return n, n * counts.active / counts.total


def candidate_layouts(ctx: PlanContext) -> list[Layout]:
    """Every registered scheme's candidate layouts, in registry order. All but a multi-slice one live
    on one slice and run the whole batch there."""
    return [layout for scheme in registry.SCHEMES.values() for layout in scheme.candidate_layouts(ctx)]


def plan_training(cfg: tf.TransformerConfig, chip: Chip, where: Slice | int, global_batch_tokens: int,
                  seq_len: int, mfu: float = 0.4, train_tokens: float | None = None, slices: int = 1,
                  remat: str | float = "full", state: StateBytes = BOOK_ADAM, n_params: float | None = None,
                  sequence_sharding: bool = True, count_gate: bool = False, pipeline_stages: int | None = None,
                  microbatches: int | None = None) -> TrainingPlan:
    """Every scheme for ``cfg`` on ``where`` (a Slice, or a chip count taken as a full torus),
    ``slices`` of them over DCN; ``n_params`` overrides the exact count (the book uses 70e9)."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], got {mfu!r}")
    positive_int("slices", slices)
    chips, axes = slice_axes(chip, where)
    n, active = param_counts(cfg, n_params)
    layer = LayerModel.from_config(cfg, count_gate)
    step_flops = training_flops(active, global_batch_tokens)
    ctx = PlanContext(layer, chip, chips, axes, global_batch_tokens, slices, pipeline_stages, microbatches)
    plans = [price_layout(layout, ctx, cfg, seq_len, mfu, step_flops, train_tokens, remat, state, n,
                          sequence_sharding) for layout in candidate_layouts(ctx)]
    n_axes = len([a for a in axes if a > 1]) or 1
    return TrainingPlan(
        cfg.name, chip, chips * slices, global_batch_tokens, seq_len, mfu,
        training_flops(active, train_tokens) if train_tokens else None,
        min_chips_for_memory(training_memory(cfg, global_batch_tokens, seq_len, remat, state, n), chip),
        thresholds.dp_critical_batch_per_chip_tokens(chip, n_axes),
        thresholds.mixed_critical_batch_per_chip_tokens(layer.effective_d_ff, chip, max(1, n_axes - 1), 1),
        tuple(plans))


def price_layout(layout: Layout, ctx: PlanContext, cfg: tf.TransformerConfig, seq_len: int, mfu: float,
                 step_flops: float, train_tokens: float | None = None, remat: str | float = "full",
                 state: StateBytes = BOOK_ADAM, n_params: float | None = None,
                 sequence_sharding: bool = True) -> SchemePlan:
    """One layout of ``ctx``'s run priced: memory per chip, step time by part (compute at ``mfu``, comms left
    exposed, the bubble), the verdicts and notes (see the module docstring; ``plan_training`` prices each
    candidate with this, ``scalelib.training_plan`` the layout a student picks)."""
    chip, layer, global_batch_tokens = ctx.chip, ctx.layer, ctx.global_batch_tokens
    lc = pricing.layer_cost(layout, layer, chip, global_batch_tokens)
    peak_s = step_flops / (layout.chips * chip.bf16_flops_per_s)
    passes = [(share * peak_s / mfu, p.comms_s / p.compute_s * share * peak_s)
              for share, p in zip(_PASS_SHARE, (lc.forward, lc.backward))]
    busy_s = sum(max(c, m) for c, m in passes)
    step_s = busy_s / (1 - lc.bubble_fraction)
    mem = memory_per_chip(layout, cfg, global_batch_tokens, seq_len, remat, state, n_params)
    sequences = global_batch_tokens // seq_len
    notes = []
    if layout.batch_ways > sequences:
        msg = f"splits {sequences} sequences {layout.batch_ways} ways: needs sequence (context) sharding"
        notes.append(msg if sequence_sharding else "infeasible: " + msg)
    if layout.model_ways > cfg.d_model or layout.model_ways > layer.d_ff:
        notes.append(f"infeasible: {layout.model_ways}-way tensor parallelism exceeds D or F")
    notes += registry.get(layout.scheme).plan_notes(layout, ctx)
    if ctx.slices > 1 and layout.slices == 1:
        notes.append(f"one slice runs the whole batch: {ctx.slices - 1} of {ctx.slices} slices idle")
    if layout.chips < ctx.chips * ctx.slices:
        notes.append(f"uses {layout.chips} of {ctx.chips * ctx.slices} chips")
    run_s = step_s * train_tokens / global_batch_tokens if train_tokens else None
    usd = run_s / 3600 * layout.chips * chip.usd_per_hour if run_s and chip.usd_per_hour else None
    hidden = all(m <= c for c, m in passes)
    compute_s = sum(c for c, _ in passes)
    return SchemePlan(layout, mem, mem.fits(chip), lc.batch_per_chip_tokens, lc.compute_bound, hidden, step_s, run_s,
                      usd, tuple(notes), compute_s, busy_s - compute_s, step_s - busy_s)


def plot_scheme_times(layer: LayerModel | tf.TransformerConfig, chip: Chip, where: Slice | int,
                      batch_per_chip_tokens: Any = None,
                      schemes: tuple[str, ...] = ("data", "fsdp", "tensor", "fsdp_tp"),
                      ax: Any = None) -> tuple[Any, Any]:
    """Per-layer forward compute time and each scheme's comms against batch per chip (Figure 16's
    picture). A scheme's curve is its tighter pass's comms, scaled to the forward's FLOPs, so
    it crosses the compute line exactly at the book's threshold. Returns (fig, ax)."""
    import matplotlib.pyplot as plt  # only when drawing
    import numpy as np

    if isinstance(layer, tf.TransformerConfig):
        layer = LayerModel.from_config(layer)
    chips, axes = slice_axes(chip, where)
    per_chip = np.logspace(1, 5, 60) if batch_per_chip_tokens is None else np.asarray(batch_per_chip_tokens)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
    fig = ax.figure
    compute = []
    curves: dict[str, list[float]] = {s: [] for s in schemes}
    for b in per_chip:
        batch = float(b) * chips
        ctx = PlanContext(layer, chip, chips, axes, batch)
        for s in schemes:
            layout, batch_s = registry.get(s).sweep_layout(ctx, batch)
            lc = pricing.layer_cost(layout, layer, chip, batch_s)
            curves[s].append(lc.comms_to_compute * lc.forward.compute_s)
        compute.append(pricing.layer_cost(Layout("fsdp", data_axes=axes), layer, chip, batch).forward.compute_s)
    ax.loglog(per_chip, compute, "k--", label="compute (one forward)")
    for s in schemes:
        ax.loglog(per_chip, curves[s], label=f"{s} comms")
    ax.set_xlabel("batch per chip (tokens)")
    ax.set_ylabel("seconds per layer")
    ax.set_title(f"{chip.name}, {chips} chips, F = {layer.d_ff}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig, ax
