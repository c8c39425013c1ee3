"""Hierarchical data parallelism across slices (ICI inside, DCN between) on a 2x4 mesh.

Tolerances and Adam eps: see tests/test_parallel_data.py (rtol 1e-5, atol 1e-6, float32).
"""

import pytest

from scalelib import compat, hardware, model
from scalelib.parallel import data, multislice
from tests.test_parallel_data import (BATCH, CFG, SEQ, check_collectives, check_memory, check_numerics,
                                      compile_scheme, hlo_ops)


@pytest.fixture(scope="module")
def ms():
    mesh = compat.make_mesh((2, 4), multislice.AXES)
    return mesh, compile_scheme(multislice, CFG, mesh)


def test_multislice_matches_reference(ms):
    check_numerics(*ms[1], CFG)


def test_multislice_collectives_are_hierarchical(ms):
    mesh, (compiled, _, _) = ms
    ops = hlo_ops(compiled, mesh)
    pred = multislice.predicted_collectives(CFG, dict(mesh.shape), BATCH, SEQ)
    # XLA:CPU keeps each ReduceScatter / AllGather but combines the 12 slice AllReduces into one.
    check_collectives(ops, pred)
    totals = data.sum_by_kind(ops)
    assert totals[("all_reduce", ("slice",))] * 4 == totals[("all_gather", ("data",))]  # DCN carries 1/X


def test_multislice_memory(ms):
    mesh, (compiled, _, _) = ms
    check_memory(compiled, multislice.predicted_memory_bytes(CFG, dict(mesh.shape), BATCH, SEQ), CFG, BATCH // 8)


def test_hierarchical_reduction_beats_flat_dcn():
    cfg = model.small_config(d_model=4096, d_ff=16384, n_layers=32, n_heads=32, n_kv_heads=8, head_dim=128)
    t = multislice.model_reduction_time(cfg, n_slices=4, slice_chips=256, chip=hardware.TPU_V5P)
    assert t.flat_dcn_all_reduce_s == pytest.approx(256 * t.dcn_all_reduce_s)  # DCN moves 1/X of the bytes
    assert t.hierarchical_s < t.flat_dcn_all_reduce_s and t.speedup > 10


def test_mesh_axes_are_checked():
    with pytest.raises(ValueError, match="axes \\('slice', 'data'\\)"):
        multislice.predicted_collectives(CFG, {"data": 4, "slice": 2}, BATCH, SEQ)
