"""The schemes' executed FLOPs (``Scheme.step_flops``) against the book's per-layer cost model.

``pricing.layer_cost`` prices the MLP's matmuls forward and backward (section 5); the executed steps
add each scheme's own extras. These identities are exact (rel 1e-12). The step FLOPs against XLA's
``cost_analysis`` are checked for every scheme in tests/test_parallel_schemes.py.
"""

import pytest

from scalelib import hardware, model
from scalelib import transformer_flops as fl
from scalelib.parallel import thresholds, flops, pricing
from scalelib.parallel.cases import FLOPS_CFG
from scalelib.parallel.expert import ExpertParallel, capacity
from scalelib.parallel.layer import LayerModel
from scalelib.parallel.layout import Layout
from scalelib.parallel.multislice import Multislice
from scalelib.parallel.pipeline import Pipeline

SEQ = 128
MOE_CFG = FLOPS_CFG.replace(n_experts=8, experts_per_token=2, expert_d_ff=512, router_bias=True)


def cost_model_flops(layout, cfg, batch, seq_len):
    """FLOPs per chip and step that ``pricing.layer_cost`` prices: its compute time at peak, all layers."""
    chip = hardware.TPU_V5P
    layer = LayerModel.from_config(cfg, count_gate=True)
    return pricing.layer_cost(layout, layer, chip, batch * seq_len).compute_s * chip.flops_per_s("bf16") * cfg.n_layers


def test_cost_model_compute_is_the_executed_mlp_up_to_each_schemes_extra():
    # pricing.layer_cost counts the MLP's matmuls, forward and backward. Multislice executes exactly that;
    # the pipeline recomputes each stage's forward in its B ops (4/3); experts run E C capacity slots
    # where the cost model routes k experts per token (E C / (n k)).
    cfg = model.small_config(n_layers=4)
    ms = Multislice().step_flops(cfg, {"slice": 2, "data": 4}, 16, SEQ)
    priced = cost_model_flops(Layout("multislice", (4,), slices=2), cfg, 16, SEQ)
    assert ms.matmuls.mlp_flops == pytest.approx(priced, rel=1e-12)
    pp = Pipeline(8, "gpipe").step_flops(cfg, {"stage": 4}, 16, SEQ)
    priced = cost_model_flops(Layout("pipeline", stages=4, microbatches=8), cfg, 16, SEQ)
    assert pp.executed.matmuls.mlp_flops == pytest.approx(4 / 3 * priced, rel=1e-12)
    assert isinstance(pp, flops.PipelineFlops)
    assert pp.idle_ticks / pp.n_ticks == pytest.approx(thresholds.pipeline_bubble_fraction(4, 8), rel=1e-12)
    n = 16 // 4 * SEQ
    slots = MOE_CFG.n_experts * capacity(n, MOE_CFG.n_experts, MOE_CFG.experts_per_token, 1.5)
    ep = ExpertParallel(1.5).step_flops(MOE_CFG, {"expert": 4}, 16, SEQ)  # no shared experts: the cost model has none
    priced = cost_model_flops(Layout("expert", expert_axes=(4,)), MOE_CFG, 16, SEQ)
    assert ep.matmuls.mlp_flops == pytest.approx(slots / (n * MOE_CFG.experts_per_token) * priced, rel=1e-12)


def test_pipeline_pays_recompute_and_a_head_per_stage_over_one_device():
    # Summed over stages, a pipelined step is the single-device step plus one more forward of every
    # layer (the B ops' recomputation) plus the head's forward and backward on the S - 1 other stages.
    cfg, S, B, M = model.small_config(n_layers=4), 4, 16, 8
    pp = Pipeline(M).step_flops(cfg, {"stage": S}, B, SEQ)
    one = fl.train_flops(cfg, B, SEQ)
    layers_fwd = fl.forward_flops(cfg, B * SEQ, SEQ, include_unembed=False)
    head = 3 * fl.forward_flops(cfg, B * SEQ, SEQ).unembed_flops
    assert S * pp.executed.matmuls.matmul_flops == pytest.approx(
        one.matmul_flops + layers_fwd.matmul_flops + (S - 1) * head, rel=1e-12)


def test_adam_flops_per_entry():
    assert flops.adam_flops(1000) == 13_000 and flops.ADAM_FLOPS_PER_PARAM == 13
