"""scalelib.training_plan: one layout priced by the planner's own code, the questions asked of it, its command, and the
planner's per-device state held against the compiled sharded steps (issue 52)."""

import subprocess
import sys

import pytest

from scalelib import hardware, model
from scalelib import training_plan as plan
from scalelib import transformer as tf
from scalelib.parallel import cases, chip_memory, planner
from scalelib.parallel.chip_memory import StateBytes
from scalelib.parallel.layout import Layout

CFG70 = tf.preset("llama3-70b")
BATCH = 4 * 1024 * 1024


def test_the_default_plan_is_the_planners_own_fsdp_tp_choice():
    whole = planner.plan_training(CFG70, hardware.TPU_V5P, 8960, BATCH, 4096)
    p, s = plan.training(), whole.scheme("fsdp_tp")
    assert (p.layout, p.memory, p.step_time_s, p.compute_bound) == (s.layout, s.memory, s.step_time_s,
                                                                    s.compute_bound)
    assert p.compute_s + p.exposed_comms_s + p.bubble_s == pytest.approx(p.step_time_s)
    assert p.critical_batch_per_chip_tokens == whole.mixed_critical_batch_per_chip_tokens


def test_fsdp_alone_on_the_full_pod_is_communication_bound_and_the_chosen_split_is_not():
    """Section 5.1.6: FSDP over 8960 v5p chips has 468 tokens per chip, below the 850 it needs."""
    whole = planner.plan_training(CFG70, hardware.TPU_V5P, 8960, BATCH, 4096)
    fsdp = plan.training(scheme="fsdp")
    assert fsdp.batch_per_chip_tokens == pytest.approx(BATCH / 8960)
    assert fsdp.critical_batch_per_chip_tokens == whole.fsdp_critical_batch_per_chip_tokens
    assert fsdp.batch_per_chip_tokens < fsdp.critical_batch_per_chip_tokens and not fsdp.compute_bound
    assert plan.training().compute_bound
    assert any("below" in v for v in fsdp.verdicts()) and any("above" in v for v in plan.training().verdicts())


def test_turning_the_tensor_ways_moves_memory_and_time():
    """Under FSDP x tensor every chip holds 1/N of the state and of the activations whatever the split (section 5),
    but past the best split the tensor axis's collectives no longer hide under the compute; under tensor
    parallelism alone (state replicated over the data axis) more tensor ways hold less per chip."""
    mixed = {t: plan.training(tensor=t) for t in (1, 2, 4, 8, 16, 32, 64)}
    assert [p.layout.model_ways for p in mixed.values()] == [1, 2, 4, 8, 16, 32, 64]
    assert all(p.layout.chips == 8960 for p in mixed.values())
    assert len({p.memory.total_bytes for p in mixed.values()}) == 1
    assert mixed[64].exposed_comms_s > mixed[32].exposed_comms_s > mixed[4].exposed_comms_s == 0
    assert mixed[64].step_time_s > mixed[4].step_time_s and mixed[64].bound == "communication"
    alone = [plan.training(scheme="tensor", tensor=t, chips=256).memory.params_bytes for t in (2, 4, 8)]
    assert alone[0] > alone[1] > alone[2]


@pytest.mark.parametrize("args, words", [
    ({"tensor": 3}, "does not divide llama3-70b's 64 attention heads"),
    ({"tensor": 64, "chips": 96}, "does not divide 96 chips"),
    ({"scheme": "expert"}, "llama3-70b has no experts"),
    ({"scheme": "lots"}, "unknown scheme 'lots'"),
    ({"scheme": "sequence"}, "no sequence layout for llama3-70b"),
    ({"chip": "TPU v9"}, "unknown chip 'TPU v9'"),
    ({"remat": "some"}, "unknown remat policy 'some'"),
])
def test_impossible_plans_say_what_to_change(args, words):
    with pytest.raises(ValueError, match=None) as err:
        plan.training(**args)
    assert words in str(err.value), err.value


def test_a_plan_that_does_not_fit_says_by_how_much():
    p = plan.training(chips=64, scheme="fsdp", tensor=1)
    assert not p.fits and p.headroom_bytes < 0
    assert f"{-p.headroom_bytes / 2**30:.1f} GiB over" in p.verdicts()[0]


def test_the_questions_planners_are_asked():
    kw = {"chips": 256, "scheme": "fsdp", "tensor": 1}
    largest = plan.largest_batch(seq_len=4096, **kw)
    assert largest > 0 and largest % 4096 == 0
    assert plan.training(global_batch_tokens=largest, **kw).fits
    assert not plan.training(global_batch_tokens=largest + 4096, **kw).fits
    fewest = plan.fewest_chips(scheme="fsdp", tensor=1)
    assert plan.training(chips=fewest, scheme="fsdp", tensor=1).fits
    assert not plan.training(chips=fewest // 2, scheme="fsdp", tensor=1).fits
    fitting = plan.chips_that_fit(64, scheme="fsdp", tensor=1, global_batch_tokens=2**20)
    for name, chip in hardware.CHIPS.items():
        assert (name in fitting) == plan.training(chip=chip, chips=64, scheme="fsdp", tensor=1,
                                                  global_batch_tokens=2**20).fits


def test_the_command_prints_the_same_plan_and_refuses_an_impossible_one():
    run = subprocess.run([sys.executable, "-m", "scalelib.training_plan", "--tensor", "8"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == plan.training(tensor=8).table()
    bad = subprocess.run([sys.executable, "-m", "scalelib.training_plan", "--tensor", "3"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "does not divide llama3-70b's 64 attention heads" in bad.stderr


# The executed schemes' per-device state (``Scheme.predicted_memory``) equals what XLA compiles for each case: the
# argument bytes of the sharded step (tests/test_parallel_schemes.py, test_memory_matches_prediction). Here the
# planner's per-chip state, the code path the widget draws for a big run, is held against that on the same small
# configurations, in fp32 as the executed steps keep it. The planner divides every weight by the tensor ways and
# stages (the book's assumption); the executed steps keep the embedding and unembedding tables whole on every
# tensor-axis device, and at this size those tables are much of the model: their bytes times (1 - 1/ways) are the
# whole difference under tensor parallelism (with the norms' scales, which are kept whole too).
MATRICES = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # the layers' weights the tensor axis splits
F32 = StateBytes(param_bytes=4, grad_bytes=4, adam_moment_bytes=4)
PLANNED = {"data-8": Layout("data", data_axes=(8,)), "data-2x4": Layout("data", data_axes=(2, 4)),
           "zero3-8": Layout("fsdp", data_axes=(8,)),
           "tensor-2x4": Layout("tensor", data_axes=(2,), model_axes=(4,)),
           "tensor-4x2": Layout("tensor", data_axes=(4,), model_axes=(2,)),
           "fsdp_tp-2x4": Layout("fsdp_tp", data_axes=(2,), model_axes=(4,)),
           "fsdp_tp-4x2": Layout("fsdp_tp", data_axes=(4,), model_axes=(2,))}


@pytest.mark.parametrize("case_id", PLANNED)
def test_the_planners_state_per_device_is_the_compiled_steps(case_id):
    case, layout = cases.BY_ID[case_id], PLANNED[case_id]
    executed = case.scheme.predicted_memory(case.cfg, dict(zip(case.scheme.mesh_axes, case.shape)), case.batch,
                                            case.seq)
    planned = chip_memory.memory_per_chip(layout, case.cfg, case.batch * case.seq, case.seq, "full", F32)
    shapes = model.param_shapes(case.cfg)
    whole_on_tensor_axis = model.param_count(shapes) - sum(model.param_count(shapes["layers"][k]) for k in MATRICES)
    replicated = 4 * whole_on_tensor_axis * (1 - 1 / layout.model_ways) / (
        layout.data_ways if layout.scheme == "fsdp_tp" else 1)
    assert planned.params_bytes + replicated == pytest.approx(executed.params_bytes, rel=1e-6)
    assert planned.grads_bytes + replicated == pytest.approx(executed.grads_bytes, rel=1e-6)
    assert planned.optimizer_bytes + 2 * replicated + 4 == pytest.approx(executed.optimizer_bytes, rel=1e-6)
