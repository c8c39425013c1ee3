"""A training plan a student can turn: one call, one frozen dataclass, the same numbers everywhere.

Book: section 5 (the schemes' memory and communication, the compute-bound thresholds) and section 6
(LLaMA 3-70B on TPU v5p: memory per chip, step time, the FSDP x tensor split). ``training`` prices one
layout the caller picks (the scheme and, if given, its tensor, pipeline and expert ways) with the planner's
own code (``parallel.planner.price_layout``: what ``plan_training`` runs for every scheme), and returns a
``Plan``: memory per chip by part against HBM, step time by part, which bound rules and the verdicts.
``plan_widget`` draws a ``Plan``; ``python -m scalelib.training_plan`` prints one. No formula lives in either.

The questions planners are asked, answered by the same call: ``largest_batch`` (the largest global batch
that fits), ``fewest_chips`` (the fewest chips that hold the run), ``chips_that_fit`` (which chips of
``hardware.CHIPS`` hold it on a given count).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalelib import hardware
from scalelib import transformer as tf
from scalelib.hardware import Chip
from scalelib.parallel import planner, registry
from scalelib.parallel.chip_memory import ChipMemory
from scalelib.parallel.context import PlanContext, split_axes
from scalelib.parallel.layer import LayerModel
from scalelib.parallel.layout import Layout
from scalelib.validate import positive_int

# scalelib's policies (the exact per-array count of transformer_memory), then the book's D-sized checkpoints per
# layer and token (section 6.2's 4 and 12)
REMATS: tuple[str | int, ...] = ("full", "block_inputs", "dots_no_batch", "dots", "none", 4, 12)


@dataclass(frozen=True)
class Plan:
    """One layout of one run: memory per chip by part, step time by part, the verdicts."""

    model: str
    chip: Chip
    chips: int
    global_batch_tokens: int
    seq_len: int
    mfu: float
    remat: str | int
    priced: planner.SchemePlan  # the planner's pricing of the layout: memory by part, the step by part, notes
    critical_batch_per_chip_tokens: float | None  # section 5's threshold for FSDP (alone or with tensor ways)

    @property
    def layout(self) -> Layout:
        return self.priced.layout

    @property
    def memory(self) -> ChipMemory:
        """Bytes per chip: parameters, gradients, optimizer state, activations."""
        return self.priced.memory

    @property
    def compute_s(self) -> float:
        """The step's FLOPs at ``mfu``."""
        return self.priced.compute_s

    @property
    def exposed_comms_s(self) -> float:
        """Communication that no compute hides."""
        return self.priced.exposed_comms_s

    @property
    def bubble_s(self) -> float:
        """A pipeline's idle share of the step."""
        return self.priced.bubble_s

    @property
    def step_time_s(self) -> float:
        return self.priced.step_time_s

    @property
    def compute_bound(self) -> bool:
        """This layout's passes: comms fit under their FLOPs at peak rate (section 5's criterion)."""
        return self.priced.compute_bound

    @property
    def notes(self) -> tuple[str, ...]:
        return self.priced.notes

    @property
    def batch_per_chip_tokens(self) -> float:
        """The global batch over the chips the layout uses (the book's B / N)."""
        return self.global_batch_tokens / self.layout.chips

    @property
    def scheme(self) -> str:
        return self.layout.scheme

    @property
    def hbm_bytes(self) -> float:
        return self.chip.hbm_bytes

    @property
    def fits(self) -> bool:
        return self.priced.fits_in_hbm

    @property
    def headroom_bytes(self) -> float:
        """HBM left per chip (negative: short by that much)."""
        return self.chip.hbm_bytes - self.memory.total_bytes

    @property
    def feasible(self) -> bool:
        return self.priced.feasible

    @property
    def bound(self) -> str:
        """What the step waits on at the assumed MFU: 'communication' when some of it no compute hides, else
        'compute' (a pipeline's bubble, if any, adds idle time on top: ``bubble_s``)."""
        return "communication" if self.exposed_comms_s > 0 else "compute"

    @property
    def achieved_mfu(self) -> float:
        """Model FLOPs utilization of the whole step: ``mfu`` times the share of the step spent computing."""
        return self.mfu * self.compute_s / self.step_time_s if self.step_time_s else 0.0

    def verdicts(self) -> list[str]:
        """The chapter's verdicts in words: fits or by how much not, which bound rules and the threshold."""
        gib = 2**30
        out = [f"fits: {self.memory.total_bytes / gib:.1f} of {self.hbm_bytes / gib:.0f} GiB per chip" if self.fits
               else f"does not fit: {self.memory.total_bytes / gib:.1f} GiB per chip, "
                    f"{-self.headroom_bytes / gib:.1f} GiB over {self.hbm_bytes / gib:.0f} GiB"]
        if self.critical_batch_per_chip_tokens is not None:
            side = "above" if self.batch_per_chip_tokens >= self.critical_batch_per_chip_tokens else "below"
            kind = "FSDP x tensor" if self.layout.model_ways > 1 else "FSDP alone"
            out.append(f"batch per chip {self.batch_per_chip_tokens:,.0f} tokens, {side} the "
                       f"{self.critical_batch_per_chip_tokens:,.0f} that {kind} needs on {self.chip.name} (section 5)")
        out.append(f"this layout is {'compute' if self.compute_bound else 'communication'}-bound at peak rate "
                   f"(its comms {'fit under' if self.compute_bound else 'outlast'} its FLOPs at full speed)")
        idle = f", {self.bubble_s / self.step_time_s:.0%} of it the pipeline's bubble" if self.bubble_s > 0 else ""
        out.append(f"step {self.step_time_s:.3g} s at the assumed MFU, waiting on {self.bound}{idle}; "
                   f"MFU of the step {self.achieved_mfu:.0%}")
        return out + [f"note: {n}" for n in self.notes]

    def table(self) -> str:
        """The plan as text: the layout, memory by part, time by part, the verdicts."""
        gib, m = 2**30, self.memory
        lay = self.layout
        rows = [f"{self.model} on {self.chips} x {self.chip.name}: {self.scheme}",
                f"  data {lay.data_ways} x tensor {lay.model_ways} x pipeline {lay.stages} x expert {lay.expert_ways}"
                + (f" x {lay.slices} slices" if lay.slices > 1 else ""),
                f"  batch {self.global_batch_tokens:,} tokens of {self.seq_len}, remat {self.remat}, "
                f"assumed MFU {self.mfu:.0%}",
                f"memory per chip (GiB): parameters {m.params_bytes / gib:.2f}, gradients {m.grads_bytes / gib:.2f}, "
                f"optimizer {m.optimizer_bytes / gib:.2f}, activations {m.activations_bytes / gib:.2f}",
                f"  total {m.total_bytes / gib:.2f} of {self.hbm_bytes / gib:.0f} (HBM)",
                f"step time (s): compute {self.compute_s:.4g}, exposed comms {self.exposed_comms_s:.4g}, "
                f"bubble {self.bubble_s:.4g}",
                f"  step {self.step_time_s:.4g}"]
        return "\n".join(rows + self.verdicts())


def _model(model: str | tf.TransformerConfig) -> tf.TransformerConfig:
    return tf.preset(model) if isinstance(model, str) else model


def _chip(chip: str | Chip) -> Chip:
    if isinstance(chip, Chip):
        return chip
    if chip not in hardware.CHIPS:
        raise ValueError(f"unknown chip {chip!r}; the chips are {', '.join(hardware.CHIPS)}")
    return hardware.CHIPS[chip]


def layout(scheme: str, chip: Chip, chips: int, tensor: int = 1, pipeline: int = 1, expert: int = 1,
           microbatches: int | None = None) -> Layout:
    """``chips`` split as asked: tensor, pipeline and expert ways, the batch over what is left (over as many ICI
    axes as the chip's torus has, one fewer with tensor parallelism, as ``PlanContext.mixed_axes`` splits)."""
    if scheme not in registry.names():
        raise ValueError(f"unknown scheme {scheme!r}; the schemes are {', '.join(registry.names())}")
    for name, ways in (("tensor", tensor), ("pipeline", pipeline), ("expert", expert)):
        positive_int(f"{name} ways", ways)
    rest = chips // (tensor * pipeline * expert)
    if rest * tensor * pipeline * expert != chips:
        raise ValueError(f"tensor {tensor} x pipeline {pipeline} x expert {expert} = {tensor * pipeline * expert} "
                         f"does not divide {chips} chips; pick ways whose product divides the chip count")
    n_axes = len(planner.slice_axes(chip, chips)[1])
    data_axes = split_axes(rest, max(1, n_axes - 1) if tensor > 1 else n_axes)
    return Layout(scheme, data_axes=data_axes, model_axes=(tensor,), expert_axes=(expert,), stages=pipeline,
                  microbatches=microbatches or (4 * pipeline if pipeline > 1 else 1))


def training(model: str | tf.TransformerConfig = "llama3-70b", chip: str | Chip = "TPU v5p", chips: int = 8960, *,
             scheme: str = "fsdp_tp", tensor: int | None = None, pipeline: int = 1, expert: int = 1,
             microbatches: int | None = None, global_batch_tokens: int = 4 * 1024 * 1024, seq_len: int = 4096,
             mfu: float = 0.4, remat: str | int = "full", n_params: float | None = None) -> Plan:
    """Price one layout of a training run (see the module docstring). ``tensor=None``: the planner's own split for
    ``scheme`` (section 5.1.4's FSDP x tensor choice for ``fsdp_tp``); otherwise the ways given. ``n_params``
    overrides the config's exact parameter count (the book carries 70e9 for LLaMA 3-70B)."""
    cfg, hw = _model(model), _chip(chip)
    if scheme not in registry.names():
        raise ValueError(f"unknown scheme {scheme!r}; the schemes are {', '.join(registry.names())}")
    positive_int("chips", chips)
    positive_int("global_batch_tokens", global_batch_tokens)
    positive_int("seq_len", seq_len)
    if remat not in REMATS:
        raise ValueError(f"unknown remat policy {remat!r}; choose one of {', '.join(map(str, REMATS))}")
    if tensor is not None and cfg.n_heads % tensor:
        raise ValueError(f"{tensor}-way tensor parallelism does not divide {cfg.name}'s {cfg.n_heads} attention "
                         "heads; choose ways that divide the heads")
    whole = planner.plan_training(cfg, hw, chips, global_batch_tokens, seq_len, mfu, remat=remat, n_params=n_params)
    offered = [s.scheme for s in whole.schemes]
    if scheme not in offered:
        why = {"expert": f"{cfg.name} has no experts (mixtral-8x7b and book-ch7-moe do)",
               "multislice": "it spans several slices over DCN, and this plan is one slice"}.get(scheme, "")
        raise ValueError(f"no {scheme} layout for {cfg.name} on {chips} x {hw.name}"
                         + (f": {why}" if why else "") + f"; the schemes here are {', '.join(offered)}")
    if tensor is None and pipeline == 1 and expert == 1:
        chosen = whole.scheme(scheme)
    else:
        ctx = PlanContext(LayerModel.from_config(cfg), hw, chips, planner.slice_axes(hw, chips)[1],
                          global_batch_tokens, 1, pipeline if pipeline > 1 else None, microbatches)
        lay = layout(scheme, hw, chips, tensor or 1, pipeline, expert, microbatches)
        n, active = planner.param_counts(cfg, n_params)
        step_flops = planner.training_flops(active, global_batch_tokens)
        chosen = planner.price_layout(lay, ctx, cfg, seq_len, mfu, step_flops, remat=remat, n_params=n)
    lay = chosen.layout
    critical = None
    if lay.scheme in ("data", "fsdp", "fsdp_tp") and lay.stages == lay.expert_ways == 1:
        critical = (whole.fsdp_critical_batch_per_chip_tokens if lay.model_ways == 1
                    else whole.mixed_critical_batch_per_chip_tokens)
    return Plan(cfg.name, hw, chips, global_batch_tokens, seq_len, mfu, remat, chosen, critical)


def largest_batch(seq_len: int = 4096, limit_tokens: int = 2**26, **plan_args: object) -> int:
    """The largest global batch (whole sequences of ``seq_len``) whose plan fits in HBM; 0 if not even one does."""
    def fits(sequences: int) -> bool:
        return training(global_batch_tokens=sequences * seq_len, seq_len=seq_len, **plan_args).fits  # type: ignore[arg-type]

    lo, hi = 0, max(1, limit_tokens // seq_len)
    if fits(hi):
        return hi * seq_len
    while hi - lo > 1:  # memory grows with the batch: the first size that does not fit, by bisection
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * seq_len


POWERS_OF_TWO = tuple(2**k for k in range(14))  # 1 .. 8192 chips


def fewest_chips(counts: Sequence[int] = POWERS_OF_TWO, **plan_args: object) -> int | None:
    """The fewest of ``counts`` (powers of two by default) whose plan fits; None if none does."""
    for n in sorted(counts):
        try:
            if training(chips=n, **plan_args).fits:  # type: ignore[arg-type]
                return n
        except ValueError:  # ways that do not divide this count
            continue
    return None


def chips_that_fit(chips: int, **plan_args: object) -> list[str]:
    """The chips of ``hardware.CHIPS`` that hold the run on ``chips`` of them."""
    return [name for name, c in hardware.CHIPS.items() if training(chip=c, chips=chips, **plan_args).fits]  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m scalelib.training_plan``: one plan as a table (the same numbers as ``plan_widget``)."""
    parser = argparse.ArgumentParser(prog="python -m scalelib.training_plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama3-70b", choices=list(tf.PRESETS))
    parser.add_argument("--chip", default="TPU v5p", choices=list(hardware.CHIPS))
    parser.add_argument("--chips", type=int, default=8960)
    parser.add_argument("--scheme", default="fsdp_tp", choices=registry.names())
    parser.add_argument("--tensor", type=int, help="tensor-parallel ways (default: the planner's split)")
    parser.add_argument("--pipeline", type=int, default=1)
    parser.add_argument("--expert", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4 * 1024 * 1024, help="global batch in tokens")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--remat", default="full", choices=[str(r) for r in REMATS],
                        help="a policy, or 4 / 12 D-sized checkpoints per layer (the book's)")
    parser.add_argument("--n-params", type=float, help="parameters to count (default: the config's exact count)")
    parser.add_argument("--largest-batch", action="store_true", help="also: the largest batch that fits")
    parser.add_argument("--fewest-chips", action="store_true", help="also: the fewest chips (powers of two) that fit")
    args = parser.parse_args(argv)
    remat = int(args.remat) if args.remat.isdigit() else args.remat
    kw: dict[str, Any] = {"model": args.model, "chip": args.chip, "scheme": args.scheme, "tensor": args.tensor,
                          "pipeline": args.pipeline, "expert": args.expert, "seq_len": args.seq_len, "mfu": args.mfu,
                          "remat": remat, "n_params": args.n_params}
    try:
        print(training(chips=args.chips, global_batch_tokens=args.batch, **kw).table())
        if args.largest_batch:
            print(f"largest batch that fits: {largest_batch(chips=args.chips, **kw):,} tokens")
        if args.fewest_chips:
            n = fewest_chips(global_batch_tokens=args.batch, **kw)
            print(f"fewest chips that fit: {n if n is not None else 'none up to 8192'}")
    except ValueError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["REMATS", "Plan", "chips_that_fit", "fewest_chips", "largest_batch", "layout", "main", "training"]
