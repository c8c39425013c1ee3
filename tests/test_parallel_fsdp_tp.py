"""Mixed FSDP x tensor parallelism (book 5.1.4) on 2x4 and 4x2 meshes.

Tolerances and Adam eps: see tests/test_parallel_data.py (rtol 1e-5, atol 1e-6, float32).
"""

import pytest

from scalelib import compat
from scalelib.parallel import data, fsdp_tp, tensor
from tests.test_parallel_data import (BATCH, SEQ, check_collectives, check_memory, check_numerics, compile_scheme,
                                      hlo_ops)
from tests.test_parallel_tensor import CFG


@pytest.fixture(scope="module", params=[(2, 4), (4, 2)])
def mixed(request):
    mesh = compat.make_mesh(request.param, ("data", "model"))
    return mesh, compile_scheme(fsdp_tp, CFG, mesh)


def test_fsdp_tp_matches_reference(mixed):
    check_numerics(*mixed[1], CFG)


def test_fsdp_tp_collectives(mixed):
    mesh, (compiled, _, _) = mixed
    pred = fsdp_tp.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ)
    # As for ZeRO-3: XLA:CPU merges the backward regathers with the forward ones (see test_parallel_fsdp).
    pred = [c for c in pred if not (c.kind == "all_gather" and c.phase == "backward")]
    check_collectives(hlo_ops(compiled, mesh), pred, exact_counts=True)


def test_fsdp_tp_memory_is_fully_sharded(mixed):
    mesh, (compiled, _, _) = mixed
    shape = dict(mesh.shape)
    pred = fsdp_tp.predicted_memory_bytes(CFG, shape, BATCH, SEQ)
    check_memory(compiled, pred, CFG, BATCH // shape["data"])
    assert pred.params_bytes < tensor.predicted_memory_bytes(CFG, shape, BATCH, SEQ).params_bytes
    # embed / unembed are replicated over the model axis, so only they (and the norms) divide by X alone
    assert pred.optimizer_bytes < data.predicted_memory_bytes(CFG, shape, BATCH, SEQ, axes="data").optimizer_bytes / 4
