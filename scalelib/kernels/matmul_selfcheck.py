"""The collective matmuls against the unsharded product, on a ring through every device of the job.

Book section 10 (Programming TPUs in JAX), the collective-matmul example: each kind of
``scalelib.kernels.collective_matmul`` hides one collective over the ring axis behind its own chunk
products, moving data only by ``ppermute``. Pattern checked: AllGather (``all_gather``), ReduceScatter
(``reduce_scatter``) and AllReduce (``all_reduce``, tiled over the output), each one way and both ways.

These are the kernels package's own checks; ``python -m scalelib.parallel.selfcheck`` finds this module on
disk and runs them after the parallel schemes, as ``collective_matmul.<kind>`` (``checks``), and times each
kind's compiled product for tests/benchmarks/multiprocess.py (``benchmarks``). Every job of 2 or more devices
holds them: the ring is the whole job, so no check is skipped. Inputs are placed per process
(``distributed.from_host``), results gathered (``distributed.to_host``) and compared at the tolerances of
tests/test_collective_matmul.py; the processes meet at a barrier after each compile, before the ring's first
send.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scalelib.parallel import compare

if TYPE_CHECKING:
    import jax
    import numpy as np

    from scalelib.kernels.collective_matmul import Kind

RTOL, ATOL = compare.MATMUL_RTOL, compare.MATMUL_ATOL
KINDS: tuple[Kind, ...] = ("all_gather", "reduce_scatter", "all_reduce")
PREFIX = "collective_matmul."  # of every check's name


def matmul_setup(kind: Kind, bidirectional: bool) -> tuple[Any, Any, jax.Array, jax.Array, np.ndarray, np.ndarray, int]:
    """(on_mesh function, compiled, placed x, placed w, host x, host w, tiles) on a ring of every device."""
    import jax
    import numpy as np

    from scalelib import compat, distributed
    from scalelib.kernels import collective_matmul as cm

    n = jax.device_count()
    tiles = 2 if kind == "all_reduce" else 1
    b, k, f = 4, 4 * n, 4 * n * tiles  # local blocks of 4 columns: even halves on every ring
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((b, k)).astype(np.float32), rng.standard_normal((k, f)).astype(np.float32)
    mesh = compat.make_mesh((n,), ("Y",))
    lhs, rhs, _ = cm.shardings(kind, "Y", None)
    fn: Any = cm.on_mesh(mesh, kind, "Y", None, bidirectional, num_tiles=tiles)  # carries .jitted
    xs = distributed.from_host(x, jax.sharding.NamedSharding(mesh, lhs.spec))
    ws = distributed.from_host(w, jax.sharding.NamedSharding(mesh, rhs.spec))
    compiled = fn.jitted.lower(xs, ws).compile()
    distributed.barrier(f"{kind} matmul compiled")
    return fn, compiled, xs, ws, x, w, tiles


def check_matmul(kind: Kind) -> list[str]:
    """The ``kind`` collective matmul, one way and both ways, on a ring through every device: product
    and gradients against the unsharded ones; its ppermutes traced and, compiled, no other collective."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from scalelib import distributed, hlo
    from scalelib import ring_collectives as rc
    from scalelib.kernels import collective_matmul as cm

    problems, n = [], jax.device_count()
    for bidi in (False, True):
        way = "both ways" if bidi else "one way"
        fn, compiled, xs, ws, x, w, tiles = matmul_setup(kind, bidi)
        probe = np.random.default_rng(1).standard_normal((x.shape[0], w.shape[1])).astype(np.float32)  # dL/dOut
        want = x.astype(np.float64) @ w.astype(np.float64)
        problems += compare.differences(distributed.to_host(compiled(xs, ws)), want, f"{way} product", RTOL, ATOL)
        grad_step = jax.jit(jax.grad(lambda a, c, f=fn, g=probe: jnp.sum(f.jitted(a, c) * g), argnums=(0, 1))
                            ).lower(xs, ws).compile()
        distributed.barrier(f"{kind} matmul gradient compiled")  # as in matmul_setup: compile, meet, then run
        grad = grad_step(xs, ws)
        # d/dX sum((X W) * G) = G W^T and d/dW = X^T G, in float64 as the product above (no program to compile)
        g64, x64, w64 = probe.astype(np.float64), x.astype(np.float64), w.astype(np.float64)
        problems += compare.differences(distributed.to_host(grad), (g64 @ w64.T, x64.T @ g64), f"{way} gradient",
                                        RTOL, ATOL)
        sends, want_sends = rc.trace_ppermutes(fn.jitted, xs, ws).sends, cm.expected_ppermutes(kind, n, bidi, tiles)
        if sends != want_sends:
            problems.append(f"{way}: {sends} ppermutes traced, {want_sends} predicted")
        kinds = {o.kind for o in hlo.collective_ops(compiled.as_text(), {"Y": n})}
        if kinds != {"collective_permute"}:
            problems.append(f"{way}: compiled collectives {sorted(kinds)}, predicted only collective_permute")
    return problems


def matmul_step(kind: Kind) -> tuple[Callable, tuple]:
    """(compiled one-way product, its placed inputs), for timing."""
    _, compiled, xs, ws, *_ = matmul_setup(kind, False)
    return compiled, (xs, ws)


def checks(devices: int, processes: int) -> dict[str, Callable[[], list[str]]]:
    """Check name -> a check returning what differed (empty: the kind matched). Any job (``devices`` over
    ``processes``) the selfcheck accepts holds every kind, so nothing is skipped."""
    return {f"{PREFIX}{kind}": functools.partial(check_matmul, kind) for kind in KINDS}


def benchmarks(devices: int, processes: int) -> dict[str, Callable[[], tuple[Callable, tuple]]]:
    """Check name -> a function building (compiled product, its placed inputs), for timing."""
    return {f"{PREFIX}{kind}": functools.partial(matmul_step, kind) for kind in KINDS}
