"""Every registered parallel scheme against its single-device reference and its own predictions.

One compiled step per case (``scheme.make_step(..., return_grads=True)``) is checked for:

* numerics: loss and updated weights after each of 3 steps, the last Adam moments and the first
  step's gradients, against the scheme's ``reference_step`` and ``train.loss_and_grads``;
* placement: every output array laid out as the scheme's rules say;
* collectives: the compiled HLO's collectives against ``predicted_collectives``;
* memory: argument bytes equal to ``predicted_memory``, temp bytes under a documented bound;
* FLOPs (on a larger, matmul-dominated config, compiled only): ``step_flops`` just below XLA.

Everything compiles with ``compat.fast_compiles`` (XLA's HLO passes run, its LLVM ones do not): the
compiled HLO, its collectives, cost analysis and argument bytes are what a default compile gives;
only the generated machine code is slower, which these tiny steps do not feel. The FLOPs programs
compile at XLA's default fusion (tests/conftest.py's ``XLA_DEFAULT_FUSION``): their cost analysis is held
against a prediction. The case's steps and the single-device references compile under the suite's flags.
What the case's checks read is then what XLA's defaults give (collectives, argument and output bytes;
tests/test_suite_groups.py holds them), except temp bytes, which the suite's fusion moves a little and which
are held under a bound, not against a prediction. Measured on the 15 cases: the suite's flags moved their temp
bytes by 512 bytes at most, the bound was 1.5 times them or more, and their compiles took 22 CPU-s against 77
at default fusion (20 against 50 on the floor JAX).

The cases, their models and tolerances are the table of ``scalelib.parallel.cases`` (its docstring
says why Adam's eps is raised); the comparisons are ``scalelib.parallel.compare``'s, which the
self-check and chapter 5 use too.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
import pytest

from scalelib import compat, hlo, model, train
from scalelib import transformer as tf
from scalelib.parallel import compare, registry
from scalelib.parallel.compare import ATOL, RTOL
from scalelib.parallel.cases import CASES as TESTED, CFG, FLOPS_BY_ID, FLOPS_CASES, FLOPS_CFG, MOE_CFG, PP_CFG, Case, \
    is_regather
from scalelib.parallel.data import DataParallel
from scalelib.parallel.expert import ExpertParallel
from scalelib.parallel.fsdp import FSDP
from scalelib.parallel.multislice import Multislice
from scalelib.parallel.pipeline import Pipeline
from scalelib.parallel.schedule import schedule
from scalelib.parallel.scheme import Collective, Scheme, sum_by_kind
from scalelib.parallel.sequence import SequenceParallel
from scalelib.parallel.tensor import TensorParallel
from scalelib.transformer_memory import activation_memory
from tests.test_model import FLOPS_RTOL
from tests.conftest import XLA_DEFAULT_FUSION

STEPS = 3
BY_ID = {c.id: c for c in TESTED}


@pytest.fixture(scope="module", autouse=True)
def quick_compiles():
    compat.fast_compiles()
    yield
    compat.fast_compiles(False)


def test_every_registered_scheme_has_a_case_and_the_planner_order():
    assert registry.names() == ("data", "fsdp", "tensor", "fsdp_tp", "pipeline", "expert", "multislice", "sequence")
    assert {c.scheme.name for c in TESTED} == set(registry.names())
    assert {c.scheme.name for c in FLOPS_CASES} == set(registry.names())


# ------------------------------------------------------------------ the single device

@functools.lru_cache(maxsize=None)
def reference(cfg: tf.TransformerConfig, hp: train.Adam, batch: int, seq: int, keys: tuple[int, int]) -> dict:
    """Tokens, the initial state, (loss, params) after each step, the last moments and the first grads."""
    state = train.init_state(jax.random.key(keys[0]), cfg)
    tokens = train.batch(jax.random.key(keys[1]), cfg, batch, seq)
    step, steps, s, grads = jax.jit(train.make_step(cfg, hp, return_grads=True)), [], state, None
    for _ in range(STEPS):
        s, loss, g = step(s, tokens)
        grads = g if grads is None else grads  # the first step's, at the initial state
        steps.append((float(loss), s.params))
    return {"tokens": tokens, "state": state, "steps": steps, "nu": s.opt.nu, "grads": grads, "loss": steps[0][0]}


def ref_of(case: Case) -> dict:
    return reference(*case.reference_inputs)


@functools.lru_cache(maxsize=None)
def compiled(case_id: str) -> dict:
    """The case's step compiled once, its placed inputs, and its HLO."""
    case = BY_ID[case_id]
    mesh, ref = case.mesh, ref_of(case)
    s, t = case.scheme.shard_inputs(ref["state"], ref["tokens"], mesh)
    step = case.scheme.make_step(case.cfg, mesh, case.hp, return_grads=True).lower(s, t).compile()
    text = step.as_text()
    return {"step": step, "state": s, "tokens": t, "mesh": mesh, "text": text,
            "ops": hlo.collective_ops(text, dict(mesh.shape))}


@pytest.mark.parametrize("case_id", BY_ID)
def test_steps_and_gradients_match_single_device(case_id):
    case, c, ref = BY_ID[case_id], compiled(case_id), ref_of(BY_ID[case_id])
    s, first_grads, problems = c["state"], None, []
    for i, (loss_ref, params_ref) in enumerate(ref["steps"], 1):
        s, loss, grads = c["step"](s, c["tokens"])
        problems += compare.differences(float(loss), loss_ref, f"loss at step {i}", atol=case.loss_atol)
        problems += compare.differences(s.params, params_ref, f"step {i} params")
        first_grads = grads if first_grads is None else first_grads
    problems += compare.differences(first_grads, ref["grads"], "step 1 grads")
    problems += compare.differences(s.opt.nu, ref["nu"], "last Adam nu")
    # every output is laid out as the scheme's rules say (the gradients as the optimizer state)
    problems += compare.placement(case.scheme, s, first_grads, dict(c["mesh"].shape))
    assert problems == []


# ------------------------------------------------------------------ collectives

def predicted(case: Case) -> tuple[Collective, ...]:
    return case.scheme.predicted_collectives(case.cfg, dict(case.mesh.shape), case.batch, case.seq)


@pytest.mark.parametrize("case_id", BY_ID)
def test_compiled_collectives_match_prediction(case_id):
    # "each": layers are unrolled, so each predicted op is one HLO op, never combined or split by XLA
    # (all replicated gradients and the loss share one tuple all-reduce). "loop": XLA keeps the tick
    # loop rolled, so the two permutes appear once in the while body, whose known trip count is the
    # number of ticks; the shared-weight gradients and the loss go in one tuple all-reduce.
    case, c = BY_ID[case_id], compiled(case_id)
    pred = [p for p in predicted(case) if not case.merged(p)]
    assert compare.collectives(c["ops"], pred, case.collectives, c["text"]) == []


# (tests that read a compiled case take its id as a parameter, so the suite runs them with that case's other tests,
# in one process: one compile; see tests/conftest.py's SPLIT)
@pytest.mark.parametrize("case_id", ["data-8"])
def test_data_parallel_combines_every_gradient_and_the_loss_into_one_all_reduce(case_id):
    ops, pred = compiled(case_id)["ops"], predicted(BY_ID[case_id])
    assert len(ops) == 1 and len(pred) == len(jax.tree.leaves(ref_of(BY_ID[case_id])["state"].params)) + 1


@pytest.mark.parametrize("case_id", ["zero1-8", "zero2-8", "zero3-8"])
def test_zero_stages_gather_and_scatter_as_the_stage_says(case_id):
    case, stage = BY_ID[case_id], BY_ID[case_id].scheme.stage
    ops, pred = compiled(case.id)["ops"], predicted(case)
    if stage == 3:  # the backward regathers are in the lowered program; XLA:CPU merges them (see Case)
        backward = [c for c in pred if is_regather(c)]
        assert sum(c.count for c in backward) == CFG.n_layers * 9 + 2  # 9 arrays per layer, final_norm, unembed
    else:
        assert compare.op_counts(ops)[("all_gather", ("data",))] == len(jax.tree.leaves(ref_of(case)["state"].params))
    assert ("reduce_scatter" in {c.kind for c in ops}) == (stage >= 2)


@pytest.mark.parametrize("case_id", ["tensor-2x4", "tensor-4x2"])
def test_tensor_parallel_all_reduces_one_activation_per_block_and_pass(case_id):
    case, ops = BY_ID[case_id], compiled(case_id)["ops"]
    # One AllReduce of [B/X, T, D] per block forward and one backward: 4 L, none combined.
    assert compare.op_counts(ops)[("all_reduce", ("model",))] == 4 * case.cfg.n_layers
    x = case.mesh.shape["data"]
    assert all(o.result_bytes == case.batch // x * case.seq * case.cfg.d_model * 4 for o in ops if o.axes == ("model",))


@pytest.mark.parametrize("case_id", ["multislice-2x4"])
def test_multislice_dcn_carries_a_data_axis_share_of_the_gradients(case_id):
    # XLA:CPU keeps each ReduceScatter / AllGather but combines the slice AllReduces into one.
    totals = sum_by_kind(compiled(case_id)["ops"])
    assert totals[("all_reduce", ("slice",))] * 4 == totals[("all_gather", ("data",))]  # DCN carries 1/X


def test_pipeline_ticks_are_the_schedules():
    fwd, bwd, _ = predicted(BY_ID["gpipe-4"])
    assert fwd.count == bwd.count == schedule("gpipe", 4, 2).n_ticks == 10  # 2 (M + S - 1) ticks, M = 2, S = 4


# ------------------------------------------------------------------ memory

def temp_bound_bytes(cfg: tf.TransformerConfig, rows: int, seq_len: int) -> int:
    """Generous documented bound on XLA's temp buffers: full weights (gathered) + full gradients +
    every saved activation without remat (float32) + logits and log-probabilities, for ``rows``
    sequences of ``seq_len`` tokens."""
    full = DataParallel("d").predicted_memory(cfg, {"d": 1}, 1, seq_len)
    acts = activation_memory(cfg, rows, seq_len, "none", dtype_bytes=4).saved_bytes
    return int(full.params_bytes + full.grads_bytes + acts + 2 * rows * seq_len * cfg.vocab_size * 4)


@pytest.mark.parametrize("case_id", BY_ID)
def test_memory_matches_prediction(case_id):
    case, c = BY_ID[case_id], compiled(case_id)
    pred = case.scheme.predicted_memory(case.cfg, dict(case.mesh.shape), case.batch, case.seq)
    m = c["step"].memory_analysis()
    assert m.argument_size_in_bytes == pred.argument_bytes
    rows = pred.batch_bytes // ((case.seq + 1) * 4)  # sequences each device holds
    assert m.temp_size_in_bytes <= temp_bound_bytes(case.cfg, rows, case.seq)


def _mem(case_id: str, scheme: Scheme | None = None, cfg: tf.TransformerConfig | None = None) -> Any:
    case = BY_ID[case_id]
    return (scheme or case.scheme).predicted_memory(cfg or case.cfg, dict(case.mesh.shape), case.batch, case.seq)


def test_memory_per_scheme_is_the_layout():
    """(Parameter counts from shapes alone: nothing here is compiled.)"""
    params = model.param_count(model.param_shapes(CFG))
    assert _mem("data-8").params_bytes == 4 * params
    dp = _mem("data-8")
    for stage in (1, 2, 3):  # every array of the small model has a dim divisible by 8
        z = _mem(f"zero{stage}-8")
        assert z.optimizer_bytes - 4 == (dp.optimizer_bytes - 4) // 8
        assert z.params_bytes == (dp.params_bytes // 8 if stage == 3 else dp.params_bytes)
        assert z.grads_bytes == (dp.grads_bytes if stage == 1 else dp.grads_bytes // 8)
    for shape in ("2x4", "4x2"):
        mixed = _mem(f"fsdp_tp-{shape}")
        assert mixed.params_bytes < _mem(f"tensor-{shape}").params_bytes
        # embed / unembed are replicated over the model axis, so only they (and the norms) divide by X alone
        assert mixed.optimizer_bytes < _mem(f"fsdp_tp-{shape}", DataParallel()).optimizer_bytes / 4
    pp_params = model.param_shapes(BY_ID["gpipe-4"].cfg)
    n_layer = model.param_count(pp_params["layers"])
    assert _mem("gpipe-4").params_bytes == 4 * (model.param_count(pp_params) - n_layer + n_layer // 4)
    ep_params = model.param_shapes(BY_ID["expert-4"].cfg)
    n_expert = sum(model.param_count(ep_params["layers"][k]) for k in ("w_gate", "w_up", "w_down"))
    ep = _mem("expert-4")
    assert ep.params_bytes == 4 * (model.param_count(ep_params) - n_expert + n_expert // 4)
    assert ep.batch_bytes == 1 * 9 * 4  # one [T+1] int32 row per device
    sp = _mem("seq-ring-4")
    assert sp.params_bytes == 4 * model.param_count(model.param_shapes(BY_ID["seq-ring-4"].cfg))
    assert sp.batch_bytes == 2 * 17 * 4  # the whole batch on every device


# ------------------------------------------------------------------ FLOPs against XLA

# FLOPS_RTOL = 2% on the matmul-dominated FLOPS_CFG (D = 256, F = 1024, T = 128), as in
# tests/test_model.py: the prediction counts matmuls exactly and Adam's 13 FLOPs per parameter; XLA
# also counts the elementwise work (norms, softmax, activations, residual adds, routing), about 1%
# here. So the prediction must lie below XLA and within 2%. Compiled only, never run:
# ``compat.fast_compiles`` leaves the HLO and its cost analysis unchanged.
@functools.lru_cache(maxsize=None)
def xla_flops(case_id: str) -> float:
    case = FLOPS_BY_ID[case_id]
    mesh, cfg = case.mesh, case.cfg
    state = train.init_state(jax.random.key(0), cfg)
    s, t = case.scheme.shard_inputs(state, train.batch(jax.random.key(1), cfg, case.batch, case.seq), mesh)
    return case.scheme.make_step(cfg, mesh, case.hp).lower(s, t).compile(XLA_DEFAULT_FUSION).cost_analysis()["flops"]


def step_flops(case: Case) -> Any:
    return case.scheme.step_flops(case.cfg, dict(case.mesh.shape), case.batch, case.seq)


def assert_just_below(pred: float, xla: float) -> None:
    """The prediction leaves out elementwise FLOPs only: below XLA's count, and within FLOPS_RTOL."""
    assert pred < xla and pred == pytest.approx(xla, rel=FLOPS_RTOL), (pred, xla, xla / pred - 1)


@pytest.mark.parametrize("case_id", FLOPS_BY_ID)
def test_step_flops_match_xla(case_id):
    assert_just_below(step_flops(FLOPS_BY_ID[case_id]).compiled_flops, xla_flops(case_id))


@pytest.mark.parametrize("case_id", ["1f1b-2"])  # with that case's tests (gpipe-2's compile is repeated)
def test_pipeline_xla_counts_one_backward_op_whatever_the_schedule(case_id):
    # XLA counts the tick loop's body once, at its costliest branch (a B op), plus Adam outside the
    # loop; so both schedules report the same number although the second executes twice as much.
    seen = [xla_flops("gpipe-2"), xla_flops(case_id)]
    executed = [step_flops(FLOPS_BY_ID[i]).executed.total_flops for i in ("gpipe-2", "1f1b-2")]
    assert seen[1] == pytest.approx(seen[0], rel=1e-3)
    assert executed[0] > 2 * seen[0] and executed[1] > 4 * seen[0]  # at run time: M F ops and M B ops


@pytest.mark.parametrize("case_id", ["expert-4"])
def test_expert_flops_count_capacity_slots_not_routed_tokens(case_id):
    # XLA sees the slots, so the routed count (capacity factor 1) falls outside the tolerance.
    case = FLOPS_BY_ID[case_id]
    routed = ExpertParallel(1.0).step_flops(case.cfg, dict(case.mesh.shape), case.batch, case.seq)
    assert routed.total_flops < (1 - FLOPS_RTOL) * xla_flops(case_id)


# ------------------------------------------------------------------ bad input

BAD_INPUT = [
    (lambda: DataParallel(microbatches=2).predicted_collectives(CFG, {"data": 8}, 12, 16),
     "not divisible.*multiple of 16"),
    (lambda: TensorParallel().predicted_collectives(CFG, {"data": 2, "model": 4}, 16, 16),
     "n_kv_heads=2 is not divisible by the model axis size 4"),
    (lambda: Multislice().predicted_collectives(CFG, {"data": 4, "slice": 2}, 16, 16), "axes \\('slice', 'data'\\)"),
    (lambda: Pipeline(2).make_step(PP_CFG, compat.make_mesh((3,), ("stage",), devices=jax.devices()[:3])),
     "n_layers=4 must split evenly over 3 stages"),
    (lambda: ExpertParallel(4.0).make_step(MOE_CFG, compat.make_mesh((3,), ("expert",), devices=jax.devices()[:3])),
     "n_experts=8 must be a multiple"),
    (lambda: SequenceParallel().predicted_collectives(CFG, {"seq": 4}, 2, 6), "multiple of the 'seq' axis size 4"),
    (lambda: SequenceParallel("zigzag"), "'all_gather' or 'ring'"),  # type: ignore[arg-type]
    (lambda: FSDP(stage=4), "ZeRO stage must be one of"),
    (lambda: Pipeline(2).step_flops(PP_CFG, {"stage": 3}, 12, 128), "must split evenly over 3 stages"),
    (lambda: Multislice().step_flops(FLOPS_CFG, {"slice": 2, "data": 4}, 12, 128), "multiple of the 8 chips"),
    (lambda: ExpertParallel(1.0).step_flops(FLOPS_CFG, {"expert": 4}, 8, 128), "MoE config"),
    (lambda: ExpertParallel(1.0).moe_layer(CFG, {}, np.zeros((2, 4, 64)),
                                          compat.make_mesh((2,), ("expert",), devices=jax.devices()[:2])),
     "MoE config"),
    (lambda: registry.get("zero"), "unknown scheme 'zero'"),
]


@pytest.mark.parametrize("call, match", BAD_INPUT)
def test_bad_input_says_what_to_do(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("case_id", ["zero3-8"])
def test_make_loss_and_grads_is_the_steps_gradients(case_id):
    # The same local function without the optimizer: one scheme suffices (the code path is shared).
    case = BY_ID[case_id]
    ref, mesh = ref_of(case), case.mesh
    lg = case.scheme.make_loss_and_grads(case.cfg, mesh)
    params = case.scheme.shard_params(ref["state"].params, mesh)
    loss, grads = lg(params, compiled(case.id)["tokens"])
    np.testing.assert_allclose(float(loss), ref["loss"], rtol=RTOL, atol=ATOL)
    assert compare.differences(grads, ref["grads"], "grads") == []
