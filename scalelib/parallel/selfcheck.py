"""Every parallel scheme against the single-device step, on the devices of every process of the job.

    python -m scalelib.parallel.selfcheck [SCHEME ...]             # one process, 8 local devices
    python -m scalelib.launch --processes 2 --local-devices 4 -m scalelib.parallel.selfcheck

One line per scheme: ``<scheme> ok`` or what differed; the exit status is 1 if anything differed.
Every case (``cases()``: each registered scheme, ZeRO at its three stages, both pipeline orders and
both sequence methods, and the three collective matmuls) builds its inputs per process
(``distributed.from_host`` for the state every process can make from the same seed,
``distributed.from_process_rows`` for the rows of the batch its devices hold), runs the scheme's step on
a mesh spanning every process, gathers the results (``distributed.to_host``) and compares them with
the same step on one local device: the loss and weights after each of 3 steps, the first step's
gradients and the last Adam moments, at the tolerances of tests/test_parallel_schemes.py and
tests/test_collective_matmul.py. The compiled program's collectives are held against the scheme's
prediction as those tests do. The meshes are laid out for 8 devices (2 processes x 4: the first mesh
axis crosses the processes, so multislice's DCN axis runs between them and ICI axes inside each).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scalelib.parallel import compare

if TYPE_CHECKING:
    import jax
    import numpy as np

    from scalelib import train
    from scalelib.kernels.collective_matmul import Kind
    from scalelib.parallel.cases import Case
    from scalelib.transformer import TransformerConfig

RTOL, ATOL = compare.RTOL, compare.ATOL
MATMUL_RTOL, MATMUL_ATOL = compare.MATMUL_RTOL, compare.MATMUL_ATOL
STEPS = 3
DEVICES = 8  # the meshes below are laid out for this many devices in all


@dataclass(frozen=True)
class CheckResult:
    scheme: str
    problems: tuple[str, ...]  # empty when the scheme matched
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        return f"{self.scheme} ok" if self.ok else f"{self.scheme} DIFFERS: " + "; ".join(self.problems)


@functools.cache
def cases() -> dict[str, Case]:
    """The scheme cases by name: those of ``scalelib.parallel.cases`` the self-check runs; the tests check
    that every scheme of the registry has one."""
    from scalelib.parallel.cases import SELFCHECKED

    return dict(SELFCHECKED)


def spread_devices(n: int) -> list:
    """``n`` devices, the same number from every process (all of them when ``n`` is the job's size)."""
    import jax

    procs = sorted({d.process_index for d in jax.devices()})
    if n % len(procs):
        raise ValueError(f"a mesh of {n} devices cannot take as many from each of {len(procs)} processes")
    return [d for p in procs for d in sorted((d for d in jax.devices() if d.process_index == p),
                                             key=lambda d: d.id)[:n // len(procs)]]


@functools.cache
def _reference(cfg: TransformerConfig, hp: train.Adam, batch: int, seq: int) -> tuple[Any, np.ndarray, list, Any, Any]:
    """Host (state, tokens) and, on this process's first device, [(loss, params)] after each step,
    the first step's gradients and the last Adam moments. No scheme overrides ``reference_step``, so
    this is ``train.make_step``'s arithmetic, compiled once with the gradients as an extra output."""
    import jax

    from scalelib import distributed, train

    def step(state: train.TrainState, tokens: jax.Array) -> tuple[train.TrainState, jax.Array, Any]:
        loss, grads = train.loss_and_grads(state.params, tokens, cfg)
        params, opt = train.adam_update(hp, grads, state.opt, state.params)
        return train.TrainState(params, opt), loss, grads

    # one compiled program each (eagerly, every random array would be a compile of its own)
    state = jax.jit(lambda key: train.init_state(key, cfg))(jax.random.key(0))
    tokens = jax.jit(lambda key: train.batch(key, cfg, batch, seq))(jax.random.key(1))
    compiled, steps, s, first_grads = jax.jit(step), [], state, None
    for _ in range(STEPS):
        s, loss, grads = compiled(s, tokens)
        first_grads = grads if first_grads is None else first_grads
        steps.append((float(loss), distributed.to_host(s.params)))
    host = distributed.to_host
    return host(state), host(tokens), steps, host(first_grads), host(s.opt.nu)


def setup(case: Case) -> tuple[jax.sharding.Mesh, Any, jax.Array, Any]:
    """(mesh, placed state, placed tokens, compiled step returning grads too) for ``case``."""
    import jax
    from jax.sharding import NamedSharding

    from scalelib import compat, distributed

    n = math.prod(case.shape)
    mesh = compat.make_mesh(case.shape, case.scheme.mesh_axes,
                            devices=None if n == jax.device_count() else spread_devices(n))
    state, tokens, *_ = _reference(case.cfg, case.hp, case.batch, case.seq)
    shape = dict(mesh.shape)
    case.scheme.check(case.cfg, shape, case.batch, case.seq)
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), case.scheme.state_specs(state.params, shape),
                             is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    s = distributed.from_host(state, shardings)
    token_sharding = NamedSharding(mesh, case.scheme.token_spec(shape))
    rows = distributed.process_rows(token_sharding, tokens.shape)  # what this process's loader would read
    t = distributed.from_process_rows(tokens[rows], token_sharding, tokens.shape)
    step: Any = case.scheme.make_step(case.cfg, mesh, case.hp, return_grads=True)  # jitted
    compiled = step.lower(s, t).compile()
    distributed.barrier(f"{case.name} compiled")  # then its new groups of devices meet within gloo's 30 s
    return mesh, s, t, compiled


def check_scheme(case: Case) -> list[str]:
    from scalelib import distributed, hlo

    mesh, s, t, compiled = setup(case)
    _, _, steps, grads_ref, nu_ref = _reference(case.cfg, case.hp, case.batch, case.seq)
    problems, first = [], None
    for i, (loss_ref, params_ref) in enumerate(steps, 1):
        s, loss, grads = compiled(s, t)
        first = grads if first is None else first
        problems += compare.differences(distributed.to_host(loss), loss_ref, f"loss at step {i}", atol=case.loss_atol)
        problems += compare.differences(distributed.to_host(s.params), params_ref, f"step {i} params")
    problems += compare.differences(distributed.to_host(first), grads_ref, "step 1 grads")
    problems += compare.differences(distributed.to_host(s.opt.nu), nu_ref, "last Adam nu")
    problems += compare.placement(case.scheme, s, first, dict(mesh.shape))
    text = compiled.as_text()
    predicted = [c for c in case.scheme.predicted_collectives(case.cfg, dict(mesh.shape), case.batch, case.seq)
                 if not case.merged(c)]
    problems += compare.collectives(hlo.collective_ops(text, dict(mesh.shape)), predicted, case.collectives, text)
    if case.name == "multislice":
        problems += compare.axes_cross_processes(mesh, crossing=("slice",), inside=("data",))
    return problems


MATMUL_KINDS: tuple[Kind, ...] = ("all_gather", "reduce_scatter", "all_reduce")


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
        problems += compare.differences(distributed.to_host(compiled(xs, ws)), want, f"{way} product",
                                        MATMUL_RTOL, MATMUL_ATOL)
        grad = jax.jit(jax.grad(lambda a, c, f=fn, g=probe: jnp.sum(f.jitted(a, c) * g), argnums=(0, 1)))(xs, ws)
        plain = jax.grad(lambda a, c, g=probe: jnp.sum(jnp.dot(a, c, precision="highest") * g), argnums=(0, 1))(x, w)
        problems += compare.differences(distributed.to_host(grad), distributed.to_host(plain), f"{way} gradient",
                                        MATMUL_RTOL, MATMUL_ATOL)
        sends, want_sends = rc.trace_ppermutes(fn.jitted, xs, ws).sends, cm.expected_ppermutes(kind, n, bidi, tiles)
        if sends != want_sends:
            problems.append(f"{way}: {sends} ppermutes traced, {want_sends} predicted")
        kinds = {o.kind for o in hlo.collective_ops(compiled.as_text(), {"Y": n})}
        if kinds != {"collective_permute"}:
            problems.append(f"{way}: compiled collectives {sorted(kinds)}, predicted only collective_permute")
    return problems


def matmul_step(kind: Kind) -> tuple[Callable, tuple]:
    _, compiled, xs, ws, *_ = matmul_setup(kind, False)
    return compiled, (xs, ws)


def checks() -> dict[str, Callable[[], list[str]]]:
    """Scheme name -> a check returning what differed (empty: the scheme matched)."""
    out: dict[str, Callable[[], list[str]]] = {name: functools.partial(check_scheme, case)
                                               for name, case in cases().items()}
    for kind in MATMUL_KINDS:
        out[f"collective_matmul.{kind}"] = functools.partial(check_matmul, kind)
    return out


def benchmarks() -> dict[str, Callable[[], tuple[Callable, tuple]]]:
    """Scheme name -> a function building (compiled step, its placed inputs), for timing."""
    def scheme_step(case: Case) -> tuple[Callable, tuple]:
        _, s, t, compiled = setup(case)
        return compiled, (s, t)

    out: dict[str, Callable[[], tuple[Callable, tuple]]] = {name: functools.partial(scheme_step, case)
                                                            for name, case in cases().items()}
    for kind in MATMUL_KINDS:
        out[f"collective_matmul.{kind}"] = functools.partial(matmul_step, kind)
    return out


def run(names: Sequence[str] | None = None) -> Iterator[CheckResult]:
    """Run the named checks (all by default), yielding each result as it is known."""
    table = checks()
    unknown = [n for n in names or () if n not in table]
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; choose from {sorted(table)}")
    for name in names or table:
        start = time.perf_counter()
        problems = tuple(table[name]())
        yield CheckResult(name, problems, time.perf_counter() - start)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalelib.parallel.selfcheck", description=__doc__.split("\n")[0])
    parser.add_argument("schemes", nargs="*", help="schemes to check (default: all)")
    parser.add_argument("--local-devices", type=int, default=None,
                        help=f"CPU devices for a single-process run (default {DEVICES}; under the launcher, its count)")
    args = parser.parse_args(argv)
    from scalelib import compat, distributed

    if distributed.launch_env() is None and args.local_devices is None:
        args.local_devices = DEVICES
    info = distributed.initialize(args.local_devices)
    if info.device_count != DEVICES:
        print(f"the selfcheck's meshes are laid out for {DEVICES} devices in all; this job has {info.device_count}",
              file=sys.stderr)
        return 2
    if info.process_id == 0:
        print(f"selfcheck on {info}", flush=True)
    failed = 0
    compat.fast_compiles()  # the same HLO and collectives, compiled in about half the time
    try:
        for result in run(args.schemes or None):
            failed += not result.ok
            if info.process_id == 0 or not result.ok:  # every process compares; each reports a difference
                print(f"{result.line()}  ({result.seconds:.1f} s)", flush=True)
    finally:
        compat.fast_compiles(False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
