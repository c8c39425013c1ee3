"""scalelib.serving.predicted_steps: chapter 7's step model on a measured machine, and the engine's decode-step times."""

import pytest

from scalelib import model
from scalelib import transformer as tf
from scalelib.inference import replica_memory
from scalelib.inference import step_time as st
from scalelib.machine import MeasuredRoofline
from scalelib.serving import predicted_steps
from scalelib.serving.engine import StepRecord
from tests.serving_common import no_block_leaks  # noqa: F401


def test_a_measured_chip_carries_the_measured_ceilings_into_the_step_model():
    chip = predicted_steps.measured_chip(MeasuredRoofline(flops_per_s=2e11, bytes_per_s=2e10))
    assert (chip.name, chip.bf16_flops_per_s, chip.int8_ops_per_s, chip.hbm_bytes_per_s) == ("this machine", 2e11, 2e11, 2e10)
    cfg = model.small_config(d_model=512, n_layers=4)
    step = predicted_steps.predicted_decode_step(cfg, chip, 8, 40)
    assert step == st.model_decode_step_time(cfg, replica_memory.Replica(chip, 1), 8, 40, weights=4, kv=4)
    assert step.param_load_s == pytest.approx(4 * tf.param_counts(cfg).total / 2e10)  # f32 weights at 20 GB/s
    assert st.decode_critical_batch(chip, 4) == pytest.approx(2e11 / 2e10 * 4 / 2)


def test_decode_step_times_keep_only_steps_that_only_generated():
    recs = [StepRecord(0, 0.0, 0.5, ((0, 8, "prefill"),), (), 8, 1, 0, 4),
            StepRecord(1, 0.5, 0.6, ((0, 1, "decode"), (1, 4, "prefill")), (), 8, 2, 0, 4),
            StepRecord(2, 0.6, 0.7, ((0, 1, "decode"), (1, 1, "decode")), (), 8, 2, 0, 4),
            StepRecord(3, 0.7, 0.75, ((1, 1, "decode"),), (), 8, 1, 0, 4)]
    times = predicted_steps.decode_step_times(recs)
    assert list(times) == [2, 1] and times[2] == [pytest.approx(0.1)] and times[1] == [pytest.approx(0.05)]
