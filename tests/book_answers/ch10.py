"""Chapter 10 (programming TPUs in JAX): the section's programs run on the simulated devices.

* ch10-jit-local-activation-shape: the jit example (In[B_X, D_Y] . W[D_Y, F] -> Out[B_X, F] on a
  2 x 2 mesh) is compiled and run; the answer is the element count of one device's block of In.
* ch10-shardmap-local-size, ch10-shardmap-output-value: the shard_map example (slice the first 4
  elements of each device's 1/8 of arange(512), then pmean them over the whole 2 x 4 mesh) is run;
  the local size is what the body sees, the value is the first element of the result.
* ch10-collective-matmul-chunks: ``scalelib.kernels.collective_matmul.allgather_matmul`` (one way)
  on the 2 x 4 mesh; the chunks are the dot_general equations of its jaxpr, one per Y position.
Book slips, not entries:
* The jit example's prose calls W's sharding W[D_X, F]; the code shards it P('Y', None), W[D_Y, F],
  which is what the following AllReduce algebra uses.
* The collective-matmul example builds A and W from int32 ``arange`` values, so A . W overflows
  int32 (entries reach about 2^21 x 2^24, summed 2048 times). Its equality check still passes because
  wrapped integer sums do not depend on the order of the additions.
Skipped (timings measured on a TPU; a CPU cannot reproduce them):
* ch10-collective-matmul-jit-time (311 us): the jit version's profile, AllGather then matmul.
* ch10-collective-matmul-shmap-time (244 us): the collective matmul's profile.
* ch10-matmul-unsharded-contracting-time (224 us): the matmul with no sharding on D.
* ch10-collective-matmul-speedup: the ratio 311 / 244 of two of those measurements; no scalelib
  function computes it (``collective_matmul_cost`` models the overlap, not XLA's real schedule).
"""

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, profiling
from scalelib.kernels import collective_matmul as cm

JIT_EXAMPLE_F = 8192  # W is [2048, 8192] in the section's jit example


def _mesh(shape, names, kind="explicit"):
    return compat.make_mesh(tuple(shape), names, kind=kind, devices=jax.devices()[:int(np.prod(shape))])


def _jit_local_elements(i: dict) -> int:
    # Auto axes: with Explicit ones JAX asks for the einsum's output sharding instead of choosing
    mesh = _mesh(i["mesh"], ("X", "Y"), kind="auto")

    def put(shape, spec):
        return jax.device_put(jnp.zeros(shape, jnp.bfloat16), NamedSharding(mesh, P(*spec)))

    x = put(i["global_shape"], i["spec"])  # In[B_X, D_Y]
    w = put((i["global_shape"][1], JIT_EXAMPLE_F), ("Y", None))  # W[D_Y, F]
    f = jax.jit(lambda a, b: jnp.einsum("bd,df->bf", jnp.square(a), b),
                out_shardings=NamedSharding(mesh, P("X", None)))
    out = f(x, w)  # [B_X, F]
    if out.shape != (i["global_shape"][0], JIT_EXAMPLE_F):
        raise AssertionError(f"the jit example gave shape {out.shape}")
    return x.addressable_shards[0].data.size


@lru_cache(maxsize=None)
def _slice_and_average(n: int, devices: int, k: int) -> tuple[int, tuple]:
    mesh = _mesh((2, devices // 2), ("x", "y"))
    seen = []

    def body(x):  # x: this device's [n / devices] piece
        seen.append(x.shape[0])
        return jax.lax.pmean(x[:k], ("x", "y"))  # [k], averaged over every device

    f = jax.jit(compat.shard_map(body, mesh=mesh, in_specs=P(("x", "y")), out_specs=P()))
    out = f(jax.device_put(jnp.arange(n, dtype=jnp.int32), NamedSharding(mesh, P(("x", "y")))))
    return seen[0], tuple(np.asarray(out).tolist())


def _collective_matmul_chunks(i: dict) -> int:
    mesh = _mesh(i["mesh"], ("X", "Y"))
    b, f = 2 * i["mesh"][0], 2 * i["mesh"][1]  # small B and F: only D's chunks matter here
    a = jnp.asarray(np.random.default_rng(0).integers(-4, 5, (b, i["D"])), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).integers(-4, 5, (i["D"], f)), jnp.float32)
    run = cm.on_mesh(mesh, "all_gather", "Y", "X")
    if not np.array_equal(np.asarray(run(a, w)), np.asarray(a, np.int64) @ np.asarray(w, np.int64)):
        raise AssertionError("the collective matmul does not reproduce A @ W")
    return profiling.jaxpr_primitive_counts(run.jitted, a, w)["dot_general"]


REPRODUCERS = {
    "ch10-jit-local-activation-shape": _jit_local_elements,
    "ch10-shardmap-local-size": lambda i: _slice_and_average(i["n"], i["devices"], 4)[0],
    "ch10-shardmap-output-value": lambda i: _slice_and_average(i["n"], i["devices"], i["slice"])[1][0],
    "ch10-collective-matmul-chunks": _collective_matmul_chunks,
}
