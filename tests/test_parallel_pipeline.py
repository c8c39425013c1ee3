"""Pipeline parallelism (scalelib.parallel.pipeline): the timetables and the executed step.

Numerics: pipelined loss and gradients against ``train.loss_and_grads`` at RTOL / ATOL (float32;
only the order of sums differs: microbatches are accumulated one by one). Full steps use Adam with
eps = lr = 1e-2 (``HP``). An Adam update lr g / (|g| + eps) changes by at most lr / eps times a
change in g; with the default eps = 1e-8 that factor is 1e6, so gradient entries that are float
rounding (some here are ~1e-9) move by up to lr either way, and even eps = 1e-4 turns the grads'
1e-8 rounding into 1e-6 weight differences. With eps = lr the weights inherit the grads' tolerance.
"""

import math
import re

import jax
import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, hlo, model, train
from tests.test_parallel_data import temp_bound_bytes
from scalelib.parallel import pipeline as pp

RTOL, ATOL = 1e-5, 1e-6
HP = train.Adam(learning_rate=1e-2, eps=1e-2)
CFG = model.small_config(n_layers=4)


def assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL), a, b)


def mesh_of(n):
    return compat.make_mesh((n,), ("stage",), devices=jax.devices()[:n])


# ----------------------------------------------------------------------------- schedules

@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["gpipe", "1f1b"]), s=st.integers(1, 6), m=st.integers(1, 8))
def test_schedule_is_a_valid_timetable(kind, s, m):
    sched = pp.schedule(kind, s, m)
    when = {(o.op, o.stage, o.microbatch): o.time for o in sched.table}
    assert len(when) == len(sched.table) == 2 * s * m  # every op exactly once
    busy = [(o.time, o.stage) for o in sched.table]
    assert len(set(busy)) == len(busy)  # one op per stage per tick
    for i in range(m):
        for j in range(s):
            assert when[("F", j, i)] < when[("B", j, i)]
            if j:
                assert when[("F", j - 1, i)] < when[("F", j, i)]
                assert when[("B", j, i)] < when[("B", j - 1, i)]
    assert sched.n_ticks == 2 * (m + s - 1)
    assert math.isclose(sched.bubble_fraction, (s - 1) / (m + s - 1))
    peaks = sched.peak_in_flight()
    if kind == "gpipe":
        assert peaks == (m,) * s  # every microbatch's activations are held at once
    else:
        assert peaks == tuple(min(s - j, m) for j in range(s))  # stage 0 holds at most S


def test_schedule_rejects_unknown_kind_and_sizes():
    with pytest.raises(ValueError, match="gpipe"):
        pp.schedule("interleaved", 2, 2)
    with pytest.raises(ValueError, match="n_microbatches"):
        pp.schedule("1f1b", 2, 0)


def test_draw_schedule_draws_every_op():
    sched = pp.schedule("1f1b", 3, 4)
    fig, ax = pp.draw_schedule(sched)
    assert len(ax.collections) == len(sched.table) == 24 and len(ax.texts) == 24
    assert "bubble 33%" in ax.get_title()
    plt.close(fig)


# ----------------------------------------------------------------------------- execution

@pytest.fixture(scope="module")
def gpipe_compiled():
    """GPipe loss and grads with S = 4 stages and M = 2 < S microbatches, compiled once."""
    mesh = mesh_of(4)
    state = train.init_state(jax.random.key(0), CFG)
    params = pp.shard_state(state, mesh).params
    tokens = jax.device_put(train.batch(jax.random.key(1), CFG, 4, 8), NamedSharding(mesh, P()))
    compiled = jax.jit(pp.make_loss_and_grads(CFG, mesh, 2, "gpipe")).lower(params, tokens).compile()
    return compiled, params, state.params, tokens, mesh


def test_gpipe_grads_equal_single_device(gpipe_compiled):
    compiled, params, ref_params, tokens, _ = gpipe_compiled
    loss, grads = compiled(params, tokens)
    ref_loss, ref_grads = jax.jit(train.loss_and_grads, static_argnums=2)(ref_params, tokens, CFG)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    assert_trees_close(grads, ref_grads)
    assert grads["layers"]["wq"].sharding.spec[0] == "stage"  # each stage keeps its own layers' grads


def test_1f1b_training_steps_equal_reference_steps():
    cfg, mesh = model.small_config(), mesh_of(2)  # S = 2 stages of 1 layer, M = 3 microbatches
    state = train.init_state(jax.random.key(2), cfg)
    tokens = train.batch(jax.random.key(3), cfg, 6, 8)
    step, ref = jax.jit(pp.make_step(cfg, mesh, 3, "1f1b", HP)), jax.jit(train.make_step(cfg, HP))
    sharded = pp.shard_state(state, mesh)
    for _ in range(3):
        sharded, loss = step(sharded, tokens)
        state, ref_loss = ref(state, tokens)
        np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    assert_trees_close(sharded.params, state.params)
    assert_trees_close(sharded.opt.nu, state.opt.nu)


def test_layer_count_must_split_over_stages():
    with pytest.raises(ValueError, match="n_layers=4 must split evenly over 3 stages"):
        pp.make_loss_and_grads(CFG, mesh_of(3), 2)(model.init(jax.random.key(0), CFG),
                                                   train.batch(jax.random.key(0), CFG, 4, 8))


def test_compiled_collectives_match_prediction(gpipe_compiled):
    # XLA keeps the tick loop rolled: the two permutes appear once in the while body, whose known trip
    # count is the number of ticks; the shared-weight gradients and the loss go in one tuple all-reduce.
    compiled, _, _, _, mesh = gpipe_compiled
    text = compiled.as_text()
    ops = hlo.collective_ops(text, dict(mesh.shape))
    fwd, bwd, reduce = pp.predicted_collectives(CFG, 4, 4, 8, 2, "gpipe")
    permutes = [o for o in ops if o.kind == "collective_permute"]
    assert [o.result_bytes for o in permutes] == [fwd.bytes_per_device, bwd.bytes_per_device]
    assert re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', text) == [str(fwd.count)]
    assert fwd.count == bwd.count == pp.schedule("gpipe", 4, 2).n_ticks == 10
    reduces = [o for o in ops if o.kind == "all_reduce"]
    assert [(o.axes, o.result_bytes) for o in reduces] == [(("stage",), reduce.bytes_per_device)]
    assert len(ops) == 3


def test_memory_matches_prediction(gpipe_compiled):
    # The fixture compiles loss-and-grads (params + tokens are its arguments); one full step adds the
    # Adam moments and the int32 counter. Temp bytes get the loose bound of tests/test_parallel_data.py:
    # full weights + full grads + every activation of the whole (replicated) batch without remat + logits.
    compiled, params, ref_params, tokens, mesh = gpipe_compiled
    pred = pp.predicted_memory_bytes(CFG, 4, 4, 8)
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == pred.params_bytes + pred.batch_bytes
    assert m.temp_size_in_bytes <= temp_bound_bytes(CFG, 4, seq_len=8)
    state = pp.shard_state(train.init_state(jax.random.key(0), CFG), mesh)
    step = jax.jit(pp.make_step(CFG, mesh, 2, "gpipe", HP)).lower(state, tokens).compile()
    assert step.memory_analysis().argument_size_in_bytes == pred.argument_bytes
    assert step.memory_analysis().temp_size_in_bytes <= temp_bound_bytes(CFG, 4, seq_len=8)
    n_layer = model.param_count(ref_params["layers"])
    assert pred.params_bytes == 4 * (model.param_count(ref_params) - n_layer + n_layer // 4)
