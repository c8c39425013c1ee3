"""Traces shared by the scalelib.profiling.trace tests: a few tiny sharded programs, captured once per process.

Each case is a program on the 8 simulated CPU devices of the test session, with what the tests
need to hold its trace against: its compiled HLO, its mesh, and how many times its loop runs. Each is
compiled at XLA's default fusion (tests/conftest.py): the tests read its fused ops and their names.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat
from scalelib.kernels import collective_matmul
from scalelib.profiling import trace
from scalelib.profiling.trace import synthetic
from tests.conftest import XLA_DEFAULT_FUSION

STEPS = 3
TPU_MODULE = "jit_step"


@dataclass(frozen=True)
class Case:
    name: str
    capture: trace.Capture
    trace: trace.Trace
    groups: frozenset  # device sets its collectives run over
    loop_trips: int  # how many times the body of its loop runs per step (1: no loop)


def _ffw():
    """FFW block on a 2x4 mesh under named scopes: an AllGather before the up-projection, an AllReduce after."""
    mesh = compat.make_mesh((2, 4), ("X", "Y"), kind="auto")

    def ffw(x, w_in, w_out):
        with jax.named_scope("up_projection"):
            h = jax.nn.gelu(x @ w_in)  # [B/X, F/Y]
        with jax.named_scope("down_projection"):
            return h @ w_out  # [B/X, D] partial over Y, then summed

    x = jax.device_put(jnp.ones((32, 64)), NamedSharding(mesh, P("X", "Y")))  # [B, D]
    w_in = jax.device_put(jnp.ones((64, 128)) / 64, NamedSharding(mesh, P(None, "Y")))  # [D, F]
    w_out = jax.device_put(jnp.ones((128, 64)) / 128, NamedSharding(mesh, P("Y", None)))  # [F, D]
    fn = jax.jit(ffw, out_shardings=NamedSharding(mesh, P("X", None)), compiler_options=XLA_DEFAULT_FUSION)
    rows = [frozenset(int(d.id) for d in row) for row in mesh.devices]
    return fn, (x, w_in, w_out), frozenset(rows), 1


def _ring_loop():
    """A fori_loop of matmul + ppermute around a ring of 8 (a while loop in HLO, one permute per trip)."""
    mesh = compat.make_mesh((8,), ("ring",), kind="auto")

    def body(x, w):
        def trip(_, x):
            with jax.named_scope("hop"):
                return jax.lax.ppermute(jnp.tanh(x @ w), "ring", [(j, (j + 1) % 8) for j in range(8)])
        return jax.lax.fori_loop(0, 3, trip, x)

    fn = jax.jit(compat.shard_map(body, mesh=mesh, in_specs=(P("ring"), P()), out_specs=P("ring")),
                 compiler_options=XLA_DEFAULT_FUSION)
    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("ring")))  # [8 x 8 rows, D]
    w = jax.device_put(jnp.eye(32), NamedSharding(mesh, P()))  # [D, D]
    return fn, (x, w), frozenset({frozenset(range(8))}), 3


def _collective_matmul():
    """The AllGather collective matmul over a ring of 8, its inputs placed by jax.device_put at every call: JAX cuts
    an array held by one device with a compiled slicing program, a second program in the trace."""
    mesh = compat.make_mesh((1, 8), ("X", "Y"), kind="auto")
    matmul = collective_matmul.on_mesh(mesh, "all_gather", "Y", "X")
    lhs, rhs, _ = (NamedSharding(mesh, s.spec) for s in collective_matmul.shardings("all_gather", "Y", "X"))

    jitted = jax.jit(matmul.jitted, compiler_options=XLA_DEFAULT_FUSION)  # the library's one program

    def fn(x, w):
        return jitted(jax.device_put(x, lhs), jax.device_put(w, rhs))

    fn.jitted = jitted
    return fn, (jnp.ones((16, 64)), jnp.ones((64, 64))), frozenset({frozenset(range(8))}), 1


def _reduce_scatter():
    """psum_scatter over the 4-device axis of a 2x4 mesh inside shard_map."""
    mesh = compat.make_mesh((2, 4), ("X", "Y"), kind="auto")
    fn = jax.jit(compat.shard_map(lambda a: jax.lax.psum_scatter(a * 2.0, "Y", tiled=True), mesh=mesh,
                                  in_specs=P("X"), out_specs=P("X", "Y")), compiler_options=XLA_DEFAULT_FUSION)
    a = jax.device_put(jnp.ones((8, 32)), NamedSharding(mesh, P("X")))  # [B, D] -> each device [B/X, D]
    rows = [frozenset(int(d.id) for d in row) for row in mesh.devices]
    return fn, (a,), frozenset(rows), 1


BUILDERS = {"ffw": _ffw, "ring_loop": _ring_loop, "collective_matmul": _collective_matmul,
            "reduce_scatter": _reduce_scatter}


@functools.cache
def case(name: str) -> Case:
    fn, args, groups, trips = BUILDERS[name]()
    cap = trace.capture(fn, *args, steps=STEPS)
    return Case(name, cap, trace.read(cap), groups, trips)


def cases() -> list[Case]:
    return [case(name) for name in BUILDERS]


def tpu_shaped_xspace() -> bytes:
    """A hand-written trace laid out as a TPU's (two cores, two steps), serialized like an .xplane.pb.

    Per core and step: fusion.1 (2 us), all-gather-start (0.5 us), fusion.2 (3 us) while the gather is
    in flight, all-gather-done (1 us): the gather is in flight 4.5 us, 3 of them under fusion.2.
    """
    ops = []
    for core in range(2):
        for step in range(2):
            t = 10.0 * step + 0.5 * core  # us
            for name, dur in (("fusion.1", 2.0), ("all-gather-start", 0.5), ("fusion.2", 3.0), ("all-gather-done", 1.0)):
                ops.append((core, step, name, t * 1e-6, dur * 1e-6))
                t += dur
    return synthetic.device_trace(ops, TPU_MODULE)
