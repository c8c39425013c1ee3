"""Compute and communication time of one Transformer layer under each training scheme's layout.

Book: "How to Scale Your Model", section 5 (How to Parallelize a Transformer for Training) and the
summary table of section 5.2. Expert parallelism (which the section leaves out) is priced the same
way, with AllToAlls (section 3).

The layer is the section's simplification (``layer.LayerModel``): an MLP of ``n_matrices``
weight matrices of D x F. Each scheme prices its own collectives (``Scheme.layer_comms_s``, found
through the registry by the layout's scheme name) with ``scalelib.collectives``' closed form, so
the bandwidth convention is the book's: on an axis with a wraparound W_ici is the BIDIRECTIONAL
per-axis rate (1.8e11 bytes/s on v5p) and k axes carry k times that; ``wraparound=False``
falls back to one-way links and N - 1 hops. Point-to-point pipeline sends use the one-way rate
of one link. DCN is the per-host rate shared by the host's chips.

Each pass (forward, backward) overlaps its own communication with its own FLOPs; the step
costs the sum over passes of max(compute, comms), and a layout is compute-bound when every
pass is. That is the book's criterion (it compares the pass with the most comms per FLOP).
``scalelib.parallel.flops`` counts what the executed steps compute, for comparison with XLA;
``scalelib.parallel.thresholds`` holds the closed-form thresholds these times cross.

This module sits above the schemes: it asks them through the registry, and no scheme imports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib import roofline
from scalelib.hardware import Chip, Dtype
from scalelib.parallel import registry
from scalelib.parallel.layer import LayerModel, LayerTerms
from scalelib.parallel.layout import Layout


@dataclass(frozen=True)
class PassTime(roofline.RooflineTime):
    """One pass (forward or backward) of one layer on one chip: a roofline time under the names
    the training cost model reads (``time_s`` is the overlapped time)."""

    @property
    def time_s(self) -> float:
        return self.lower_bound_s

    @property
    def compute_bound(self) -> bool:
        return self.bound == "compute"


@dataclass(frozen=True)
class LayerCost:
    """Per-layer, per-chip cost of a training step under one layout."""

    layout: Layout
    batch_per_chip_tokens: float
    forward: PassTime
    backward: PassTime
    bubble_fraction: float = 0.0  # pipeline: share of the step a stage sits idle

    @property
    def compute_s(self) -> float:
        return self.forward.compute_s + self.backward.compute_s

    @property
    def comms_s(self) -> float:
        return self.forward.comms_s + self.backward.comms_s

    @property
    def step_s(self) -> float:
        """Each pass overlapped with its own comms, stretched by the pipeline bubble."""
        return (self.forward.time_s + self.backward.time_s) / (1.0 - self.bubble_fraction)

    @property
    def compute_bound(self) -> bool:
        return self.forward.compute_bound and self.backward.compute_bound

    @property
    def comms_to_compute(self) -> float:
        """Comms over compute in the tighter pass: compute-bound exactly when <= 1."""
        return max(p.comms_s / p.compute_s for p in (self.forward, self.backward))


def layer_cost(layout: Layout, layer: LayerModel, chip: Chip, global_batch_tokens: float,
               dtype: Dtype = "bf16", dtype_bytes: float = 2, wraparound: bool = True) -> LayerCost:
    """Compute and comms of one layer, per chip, for ``global_batch_tokens`` under ``layout``.

    Forward FLOPs are 2 x tokens x weights, the backward twice that (section 4), cut by the model
    axes and the stages (TP splits a layer's FLOPs Y ways, a pipeline stage holds L / Z layers).
    Communication is the layout's scheme's (``Scheme.layer_comms_s``); with V_w the weight bytes and
    V_a the activation bytes of the chip's tokens: data: AllReduce V_w in the backward. fsdp:
    AllGather V_w forward; ReduceScatter + AllGather backward. tensor: AllGather + ReduceScatter of
    V_a in each pass. fsdp_tp: both, the weights cut by Y and the activations by X. pipeline: one
    hop of V_a per stage boundary (amortized over the stage's layers), plus a data-parallel
    AllReduce. expert: two AllToAlls of the routed tokens per pass, plus a data-parallel AllReduce
    of the shared weights. multislice: FSDP (x TP) inside each slice, and each chip's gradient shard
    all-reduced over DCN during the backward, alongside the ICI traffic (a different network).
    """
    if not (global_batch_tokens > 0 and math.isfinite(global_batch_tokens)):
        raise ValueError(f"global_batch_tokens must be a positive finite number, got {global_batch_tokens!r}")
    scheme = registry.get(layout.scheme)
    scheme.check_layer(layout, layer)
    b = global_batch_tokens / layout.batch_ways  # tokens each chip's activations hold
    compute_f = roofline.compute_time_s(layer.forward_flops(b) / (layout.model_ways * layout.stages),
                                        chip.flops_per_s(dtype))
    comms_f, comms_b = scheme.layer_comms_s(LayerTerms(layout, layer, chip, b, dtype_bytes, wraparound))
    return LayerCost(layout, b, PassTime(compute_f, comms_f), PassTime(2 * compute_f, comms_b),
                     scheme.bubble_fraction(layout))
