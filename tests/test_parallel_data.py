"""Data parallelism (book 5.1.1) against the single-device step; shared helpers for the other
parallel-scheme tests.

Tolerances: float32, rtol 1e-5 and atol 1e-6 for loss, gradients and updated weights after each of
3 steps. The sharded steps add the same numbers in a different order, so gradients differ by
~1e-8. Adam turns a gradient g into about g / (|g| + eps); with the default eps = 1e-8 its
derivative at |g| ~ eps is lr / eps = 1e6, so a 1e-8 reordering error in a near-zero gradient
moves that weight by ~1e-4 (seen for w_down entries with |g| ~ 2e-8). That is Adam's conditioning,
not the scheme, so the step tests use eps = 1e-3 (derivative <= lr / eps = 10) and the same
tolerances; the raw gradients are compared separately below.
"""

import functools

import jax
import numpy as np
import pytest

from scalelib import compat, hlo, model, train
from scalelib.parallel import data
from scalelib.transformer_memory import activation_memory

RTOL, ATOL = 1e-5, 1e-6
HP = train.Adam(learning_rate=1e-2, eps=1e-3)
BATCH, SEQ, STEPS = 16, 16, 3


@functools.lru_cache(maxsize=None)
def reference(cfg):
    """(tokens, initial state, [(loss, params) after each step]) of the single-device step."""
    state = train.init_state(jax.random.key(0), cfg)
    tokens = train.batch(jax.random.key(1), cfg, BATCH, SEQ)
    step, out, s = jax.jit(train.make_step(cfg, HP)), [], state
    for _ in range(STEPS):
        s, loss = step(s, tokens)
        out.append((float(loss), s.params))
    return tokens, state, out


def compile_scheme(mod, cfg, mesh, **kw):
    """(compiled step, placed state, placed tokens): each scheme's step is compiled exactly once."""
    tokens, state, _ = reference(cfg)
    step = mod.make_step(cfg, mesh, HP, **kw)
    shard_kw = {k: v for k, v in kw.items() if k in ("stage", "axes", "axis")}
    s, t = mod.shard_inputs(state, tokens, mesh, **shard_kw)
    return step.lower(s, t).compile(), s, t


def assert_tree_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL), a, b)


def check_numerics(compiled, s, t, cfg):
    for loss_ref, params_ref in reference(cfg)[2]:
        s, loss = compiled(s, t)[:2]
        np.testing.assert_allclose(float(loss), loss_ref, rtol=RTOL, atol=ATOL)
        assert_tree_close(s.params, params_ref)


def hlo_ops(compiled, mesh):
    return hlo.collective_ops(compiled.as_text(), dict(mesh.shape))


def counts(collectives):
    out = {}
    for c in collectives:
        out[(c.kind, c.axes)] = out.get((c.kind, c.axes), 0) + (c.count if isinstance(c, data.Collective) else 1)
    return out


def check_collectives(ops, predicted, exact_counts=False):
    """Bytes per (kind, axes) must match exactly; XLA may combine ops of one kind into a tuple op,
    so the compiled count may only be lower than predicted (equal when ``exact_counts``)."""
    assert data.sum_by_kind(ops) == data.sum_by_kind(predicted)
    got, want = counts(ops), counts(predicted)
    for key in want:
        assert (got[key] == want[key]) if exact_counts else (1 <= got[key] <= want[key]), (key, got[key], want[key])


def temp_bound_bytes(cfg, tokens_per_device_batch, pred=None, seq_len=SEQ):
    """Generous documented bound on XLA's temp buffers: full weights (gathered) + full gradients +
    every saved activation without remat (float32) + logits and log-probabilities, for
    ``tokens_per_device_batch`` sequences of ``seq_len`` tokens. (``pred`` is unused.)"""
    full = data.predicted_memory_bytes(cfg, {"d": 1}, 1, seq_len, axes="d")
    acts = activation_memory(cfg, tokens_per_device_batch, seq_len, "none", dtype_bytes=4).saved_bytes
    return full.params_bytes + full.grads_bytes + acts + 2 * tokens_per_device_batch * seq_len * cfg.vocab_size * 4


def check_memory(compiled, pred, cfg, local_batch):
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == pred.argument_bytes
    assert m.temp_size_in_bytes <= temp_bound_bytes(cfg, local_batch, pred)


CFG = model.small_config()


@pytest.fixture(scope="module")
def dp8():
    mesh = compat.make_mesh((8,), ("data",))
    return mesh, compile_scheme(data, CFG, mesh, microbatches=2, remat="full")


def test_data_parallel_8_matches_reference(dp8):
    check_numerics(*dp8[1], CFG)


def test_data_parallel_hlo_is_one_combined_gradient_all_reduce(dp8):
    mesh, (compiled, _, _) = dp8
    pred = data.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ, microbatches=2)
    ops = hlo_ops(compiled, mesh)
    check_collectives(ops, pred)
    # XLA:CPU combines all 12 gradient AllReduces and the loss into ONE tuple all-reduce.
    assert len(ops) == 1 and len(pred) == len(jax.tree.leaves(reference(CFG)[1].params)) + 1


def test_data_parallel_memory(dp8):
    mesh, (compiled, _, _) = dp8
    pred = data.predicted_memory_bytes(CFG, dict(mesh.shape), BATCH, SEQ)
    check_memory(compiled, pred, CFG, BATCH // 8)
    assert pred.params_bytes == 4 * model.param_count(reference(CFG)[1].params)


def test_data_parallel_over_two_axes_gradients_match():
    mesh = compat.make_mesh((2, 4), ("x", "y"))
    compiled, s, t = compile_scheme(data, CFG, mesh, axes=("x", "y"), return_grads=True)
    tokens, state, _ = reference(CFG)
    _, loss, grads = compiled(s, t)
    loss_ref, grads_ref = jax.jit(lambda p, t: train.loss_and_grads(p, t, CFG))(state.params, tokens)
    np.testing.assert_allclose(float(loss), float(loss_ref), rtol=RTOL, atol=ATOL)
    assert_tree_close(grads, grads_ref)
    check_collectives(hlo_ops(compiled, mesh), data.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ, axes=("x", "y")))


def test_batch_not_divisible_says_what_to_do():
    with pytest.raises(ValueError, match="not divisible.*multiple of 16"):
        data.predicted_collectives(CFG, {"data": 8}, 12, SEQ, microbatches=2)
