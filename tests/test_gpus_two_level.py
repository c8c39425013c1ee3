"""The two-level AllReduce (scalelib.gpus.two_level) on a (nodes, GPUs) mesh of the 8 simulated devices: equal to
psum in values and gradients, the collectives XLA compiles are the predicted ones, and its cost model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, hlo
from scalelib.gpus import comm_costs as cc
from scalelib.gpus import fabric as fb
from scalelib.gpus import two_level as tl

RTOL, ATOL = 1e-6, 1e-5
ROWS, COLS = 8, 16  # one device's block


@pytest.fixture(scope="module", params=[(2, 4), (4, 2)], ids=["2x4", "4x2"])
def mesh(request):
    return compat.make_mesh(request.param, (tl.NODE_AXIS, tl.GPU_AXIS))


def _partials(mesh, seed=0):
    n = mesh.devices.size
    return jax.random.normal(jax.random.key(seed), (n * ROWS, COLS), jnp.float32)


def test_equals_psum(mesh):
    x = _partials(mesh)
    got, want = tl.two_level_all_reduce(x, mesh), tl.flat_all_reduce(x, mesh)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)
    blocks = np.asarray(x).reshape(mesh.devices.size, ROWS, COLS)
    np.testing.assert_allclose(np.asarray(got)[:ROWS], blocks.sum(0), rtol=RTOL, atol=ATOL)


def test_gradients_equal_psum(mesh):
    sharding = NamedSharding(mesh, P((tl.NODE_AXIS, tl.GPU_AXIS)))
    x = jax.device_put(_partials(mesh), sharding)
    cotangent = jax.device_put(_partials(mesh, seed=1), sharding)  # d loss / d output, different per device

    def grad(local):
        _, pullback = jax.vjp(tl.jitted(local, mesh), x)
        return pullback(cotangent)[0]

    g_two = grad(tl.two_level_all_reduce_local)
    g_flat = grad(lambda v: jax.lax.psum(v, (tl.NODE_AXIS, tl.GPU_AXIS)))
    np.testing.assert_allclose(np.asarray(g_two), np.asarray(g_flat), rtol=RTOL, atol=ATOL)


def test_compiles_to_the_predicted_collectives(mesh):
    sharding = NamedSharding(mesh, P((tl.NODE_AXIS, tl.GPU_AXIS)))
    arg = jax.ShapeDtypeStruct((mesh.devices.size * ROWS, COLS), jnp.float32, sharding=sharding)
    text = hlo.compiled_hlo(tl.jitted(tl.two_level_all_reduce_local, mesh), arg)
    compiled = [(op.kind, op.axes, op.result_bytes) for op in hlo.collective_ops(text, dict(mesh.shape))]
    gpus = mesh.shape[tl.GPU_AXIS]
    predicted = [(p.kind, p.axes, p.result_bytes) for p in tl.predicted_collectives(ROWS, COLS, gpus)]
    assert compiled == predicted


def test_cost_model_prices_what_compiles():
    node = fb.H100_NODE
    block = 1e9  # each GPU's partial sum
    times = tl.two_level_all_reduce_s(block, node, nodes=32)
    # inside: ring RS and AG at NVLink speed; across: the 1/8 shard on one NIC, as a ring AllReduce
    assert times.reduce_scatter_s == times.all_gather_s == cc.ring_all_gather_s(block, 8, node.gpu_egress_bytes_per_s)
    assert times.cross_node_s == pytest.approx(cc.all_reduce_s(block, 32, node.egress_bytes_per_s))
    # reducing inside the node first beats a flat ring over every GPU's NIC
    flat = cc.all_reduce_s(block, 256, node.scale_out_bytes_per_s_per_gpu)
    assert times.total_s < flat
    sharp = tl.two_level_all_reduce_s(block, node, nodes=32, sharp=True)
    assert sharp.cross_node_s < times.cross_node_s


def test_bad_mesh_and_shapes_say_what_to_do():
    mesh = compat.make_mesh((8,), ("x",))
    with pytest.raises(ValueError, match="mesh needs axes"):
        tl.two_level_all_reduce(jnp.zeros((64, 4)), mesh)
    with pytest.raises(ValueError, match="must divide"):
        tl.predicted_collectives(6, 4, 4)
