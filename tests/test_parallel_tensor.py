"""Megatron tensor parallelism (book 5.1.3) with data parallelism on the other axis.

Tolerances and Adam eps: see tests/test_parallel_data.py (rtol 1e-5, atol 1e-6, float32).
The config has 8 query and 4 KV heads so that a model axis of 4 divides both.
"""

import pytest

from scalelib import compat, model
from scalelib.parallel import tensor
from tests.test_parallel_data import (BATCH, SEQ, check_collectives, check_memory, check_numerics, compile_scheme,
                                      counts, hlo_ops)

CFG = model.small_config(n_heads=8, n_kv_heads=4, head_dim=8)


@pytest.fixture(scope="module", params=[(2, 4), (4, 2)])
def tp(request):
    mesh = compat.make_mesh(request.param, ("data", "model"))
    return mesh, compile_scheme(tensor, CFG, mesh)


def test_tensor_parallel_matches_reference(tp):
    check_numerics(*tp[1], CFG)


def test_tensor_parallel_collectives(tp):
    mesh, (compiled, _, _) = tp
    ops = hlo_ops(compiled, mesh)
    pred = tensor.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ)
    check_collectives(ops, pred)
    # One AllReduce of [B/X, T, D] per block forward and one backward: 4 L, none combined.
    assert counts(ops)[("all_reduce", ("model",))] == 4 * CFG.n_layers
    assert all(c.result_bytes == BATCH // mesh.shape["data"] * SEQ * CFG.d_model * 4
               for c in ops if c.axes == ("model",))


def test_tensor_parallel_memory(tp):
    mesh, (compiled, _, _) = tp
    pred = tensor.predicted_memory_bytes(CFG, dict(mesh.shape), BATCH, SEQ)
    check_memory(compiled, pred, CFG, BATCH // mesh.shape["data"])


def test_kv_heads_must_divide_model_axis():
    with pytest.raises(ValueError, match="n_kv_heads=2 is not divisible by the model axis size 4"):
        tensor.predicted_collectives(model.small_config(), {"data": 2, "model": 4}, BATCH, SEQ)
