"""Per-device FLOPs of the executed pipeline, expert and multislice steps (scalelib.parallel.flops)
against XLA's ``cost_analysis()['flops']``, and ``cost.layer_cost``'s compute against them.

Tolerance: as in tests/test_model.py, FLOPS_RTOL = 2% on the same matmul-dominated config (D = 256,
F = 1024, T = 128). The prediction counts matmuls exactly and Adam's 13 FLOPs per parameter; XLA also
counts the elementwise work (norms, softmax, activations, residual adds, routing: 1 FLOP per add,
multiply, compare or select), about 1% here. So the prediction must lie below XLA and within 2%.
Only compiled, never run: ``compat.fast_compiles`` leaves the HLO and its cost analysis unchanged.
"""

import jax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, hardware, model, train
from scalelib import transformer_flops as fl
from scalelib.parallel import cost, expert, flops, multislice, pipeline
from tests.test_model import FLOPS_CFG, FLOPS_RTOL

HP = train.Adam(learning_rate=1e-2, eps=1e-3)
SEQ = 128
MOE_CFG = FLOPS_CFG.replace(n_experts=8, experts_per_token=2, expert_d_ff=512, n_shared_experts=1, router_bias=True)


@pytest.fixture(scope="module", autouse=True)
def quick_compiles():
    compat.fast_compiles()
    yield
    compat.fast_compiles(False)


def xla_flops(step, *args):
    return jax.jit(step).lower(*args).compile().cost_analysis()["flops"]


def assert_just_below(pred, xla):
    """The prediction leaves out elementwise FLOPs only: below XLA's count, and within FLOPS_RTOL."""
    assert pred < xla and pred == pytest.approx(xla, rel=FLOPS_RTOL), (pred, xla, xla / pred - 1)


def test_pipeline_xla_counts_one_backward_op_whatever_the_schedule():
    # Both run one sequence per microbatch on each of 2 stages: GPipe with M = 2 (6 ticks) and 1F1B with
    # M = 4 (10 ticks). XLA counts the tick loop's body once, at its costliest branch (a B op), plus Adam
    # outside the loop; so both report the same number although the second stage executes twice as much.
    mesh = compat.make_mesh((2,), ("stage",), devices=jax.devices()[:2])
    state = pipeline.shard_state(train.init_state(jax.random.key(0), FLOPS_CFG), mesh)
    seen, executed = [], []
    for kind, batch, m in (("gpipe", 2, 2), ("1f1b", 4, 4)):
        tokens = train.batch(jax.random.key(1), FLOPS_CFG, batch, SEQ)  # [B, T+1]
        xla = xla_flops(pipeline.make_step(FLOPS_CFG, mesh, m, kind, HP), state, tokens)
        pred = flops.pipeline_step_flops(FLOPS_CFG, 2, batch, SEQ, m, kind)
        assert_just_below(pred.compiled_flops, xla)
        seen.append(xla)
        executed.append(pred.executed.total_flops)
    assert seen[1] == pytest.approx(seen[0], rel=1e-3)
    assert executed[0] > 2 * seen[0] and executed[1] > 4 * seen[0]  # at run time: M F ops and M B ops


def test_expert_flops_match_xla():
    # Capacity factor 1.25: every expert runs C = 40 slots per sending device where tokens x k / E = 32
    # would do; XLA sees the slots, so the routed count (factor 1) falls outside the tolerance.
    n_dev, batch = 4, 4
    mesh = compat.make_mesh((n_dev,), ("expert",), devices=jax.devices()[:n_dev])
    state = expert.shard_state(train.init_state(jax.random.key(0), MOE_CFG), mesh)
    tokens = jax.device_put(train.batch(jax.random.key(1), MOE_CFG, batch, SEQ), NamedSharding(mesh, P("expert")))
    xla = xla_flops(expert.make_step(MOE_CFG, mesh, 1.25, HP), state, tokens)
    pred = flops.expert_step_flops(MOE_CFG, n_dev, batch, SEQ, 1.25)
    assert_just_below(pred.total_flops, xla)
    routed = flops.expert_step_flops(MOE_CFG, n_dev, batch, SEQ, 1.0)
    assert routed.total_flops < (1 - FLOPS_RTOL) * xla


def test_multislice_flops_match_xla():
    # 2 slices x 4 chips, one sequence per chip; Adam on every replicated weight.
    mesh = compat.make_mesh((2, 4), multislice.AXES)
    tokens = train.batch(jax.random.key(1), FLOPS_CFG, 8, SEQ)
    state, placed = multislice.shard_inputs(train.init_state(jax.random.key(0), FLOPS_CFG), tokens, mesh)
    xla = multislice.make_step(FLOPS_CFG, mesh, HP).lower(state, placed).compile().cost_analysis()["flops"]
    assert_just_below(flops.multislice_step_flops(FLOPS_CFG, dict(mesh.shape), 8, SEQ).total_flops, xla)


# ------------------------------------------------------------------ the cost model against the executed step

def cost_model_flops(layout, cfg, batch, seq_len):
    """FLOPs per chip and step that ``cost.layer_cost`` prices: its compute time at peak, all layers."""
    chip = hardware.TPU_V5P
    layer = cost.LayerModel.from_config(cfg, count_gate=True)
    return cost.layer_cost(layout, layer, chip, batch * seq_len).compute_s * chip.flops_per_s("bf16") * cfg.n_layers


def test_cost_model_compute_is_the_executed_mlp_up_to_each_schemes_extra():
    # cost.layer_cost counts the MLP's matmuls, forward and backward. Multislice executes exactly that;
    # the pipeline recomputes each stage's forward in its B ops (4/3); experts run E C capacity slots
    # where the cost model routes k experts per token (E C / (n k)).
    cfg = model.small_config(n_layers=4)
    ms = flops.multislice_step_flops(cfg, {"slice": 2, "data": 4}, 16, SEQ)
    priced = cost_model_flops(cost.Layout("multislice", (4,), slices=2), cfg, 16, SEQ)
    assert ms.matmuls.mlp_flops == pytest.approx(priced, rel=1e-12)
    pp = flops.pipeline_step_flops(cfg, 4, 16, SEQ, 8, "gpipe")
    priced = cost_model_flops(cost.Layout("pipeline", stages=4, microbatches=8), cfg, 16, SEQ)
    assert pp.executed.matmuls.mlp_flops == pytest.approx(4 / 3 * priced, rel=1e-12)
    assert pp.idle_ticks / pp.n_ticks == pytest.approx(cost.pipeline_bubble_fraction(4, 8), rel=1e-12)
    moe = MOE_CFG.replace(n_shared_experts=0)  # the cost model has no shared experts
    n = 16 // 4 * SEQ
    slots = moe.n_experts * expert.capacity(n, moe.n_experts, moe.experts_per_token, 1.5)
    ep = flops.expert_step_flops(moe, 4, 16, SEQ, 1.5)
    priced = cost_model_flops(cost.Layout("expert", expert_axes=(4,)), moe, 16, SEQ)
    assert ep.matmuls.mlp_flops == pytest.approx(slots / (n * moe.experts_per_token) * priced, rel=1e-12)


def test_pipeline_pays_recompute_and_a_head_per_stage_over_one_device():
    # Summed over stages, a pipelined step is the single-device step plus one more forward of every
    # layer (the B ops' recomputation) plus the head's forward and backward on the S - 1 other stages.
    cfg, S, B, M = model.small_config(n_layers=4), 4, 16, 8
    pp = flops.pipeline_step_flops(cfg, S, B, SEQ, M)
    one = fl.train_flops(cfg, B, SEQ)
    layers_fwd = fl.forward_flops(cfg, B * SEQ, SEQ, include_unembed=False)
    head = 3 * fl.forward_flops(cfg, B * SEQ, SEQ).unembed_flops
    assert S * pp.executed.matmuls.matmul_flops == pytest.approx(
        one.matmul_flops + layers_fwd.matmul_flops + (S - 1) * head, rel=1e-12)


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="must split evenly over 3 stages"):
        flops.pipeline_step_flops(model.small_config(n_layers=4), 3, 12, SEQ, 2)
    with pytest.raises(ValueError, match="multiple of the 8 chips"):
        flops.multislice_step_flops(FLOPS_CFG, {"slice": 2, "data": 4}, 12, SEQ)
    with pytest.raises(ValueError, match="MoE config"):
        flops.expert_step_flops(FLOPS_CFG, 4, 8, SEQ, 1.0)
