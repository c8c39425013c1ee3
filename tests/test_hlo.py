import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, hlo


def _compiled(fn, mesh, in_spec, out_spec, x):
    f = jax.jit(compat.shard_map(fn, mesh=mesh, in_specs=in_spec, out_specs=out_spec, check_vma=False))
    return hlo.compiled_hlo(f, jax.device_put(x, NamedSharding(mesh, in_spec)))


def test_collective_ops_kind_axes_and_bytes():
    mesh = compat.make_mesh((2, 4), ("a", "b"))
    x = jnp.ones((8, 16), jnp.float32)  # [4, 4] per device
    text = _compiled(lambda v: jax.lax.psum(v, "b"), mesh, P("a", "b"), P("a", None), x)
    ops = hlo.collective_ops(text, dict(mesh.shape))
    assert [(o.kind, o.axes) for o in ops] == [("all_reduce", ("b",))]
    assert ops[0].result_bytes == 4 * 4 * 4  # f32[4, 4] per device

    text = _compiled(lambda v: jax.lax.all_gather(v, "a", tiled=True), mesh, P("a", "b"), P(None, "b"), x)
    ops = hlo.collective_ops(text, dict(mesh.shape))
    assert [(o.kind, o.axes) for o in ops] == [("all_gather", ("a",))]
    assert ops[0].result_bytes == 8 * 4 * 4  # gathered f32[8, 4]


def test_no_collectives_in_local_program():
    mesh = compat.make_mesh((8,), ("x",))
    text = _compiled(lambda v: v * 2, mesh, P("x"), P("x"), jnp.ones((8, 4)))
    assert hlo.collective_ops(text, dict(mesh.shape)) == ()


def test_tuple_results_with_index_comments():
    # XLA annotates long tuple types with /*index=N*/ comments; their '=' must not end the type.
    line = ("%ar = (f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, f32[2]{0}, /*index=5*/f32[4]{0}) "
            "all-reduce(%a, %b, %c, %d, %e, %f), replica_groups={{0,1}}, to_apply=%add")
    (op,) = hlo.collective_ops(line, {"x": 2})
    assert op.kind == "all_reduce" and op.axes == ("x",) and op.result_bytes == 5 * 8 + 16
