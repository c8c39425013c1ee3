"""Every parallel scheme against the single-device step, on every device of the job.

    python -m scalelib.parallel.selfcheck                          # one process, its local devices
    python -m scalelib.launch --processes 2 --local-devices 4 -m scalelib.parallel.selfcheck

One line per scheme: ``<scheme> ok`` or what differed; the exit status is 1 if anything differed.
Each check builds its inputs per process (``scalelib.distributed.from_host`` / ``from_process_rows``:
no process needs to address another's devices), runs the sharded step on a mesh over all devices of
all processes, gathers the results to every process (``to_host``) and compares them with the same
step on one local device: losses and weights after several steps and the gradients, at the
tolerances of the single-process tests (float32, rtol 1e-5, atol 1e-6; the collective matmuls
1e-5 / 1e-5). The compiled program's collectives are held against the scheme's prediction, as in
the tests. With 2 processes the mesh's first axis crosses them, so a data axis (or the multislice
DCN axis) runs between processes while the axes inside one process stay on its own devices.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

RTOL, ATOL = 1e-5, 1e-6  # tests/test_parallel_*.py
MATMUL_RTOL = MATMUL_ATOL = 1e-5  # tests/test_collective_matmul.py
STEPS = 3


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


def differences(got, want, what: str, rtol: float = RTOL, atol: float = ATOL) -> list[str]:
    """Leaves of ``got`` not within ``rtol`` / ``atol`` of ``want`` (both pytrees of host arrays)."""
    import jax
    import numpy as np

    out = []
    pairs = jax.tree_util.tree_flatten_with_path(got)[0]
    wants = jax.tree.leaves(want)
    if len(pairs) != len(wants):
        return [f"{what}: {len(pairs)} arrays, expected {len(wants)}"]
    for (path, g), w in zip(pairs, wants, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            out.append(f"{what}{jax.tree_util.keystr(path)} has shape {g.shape}, expected {w.shape}")
        elif not np.allclose(g, w, rtol=rtol, atol=atol):
            excess = np.max(np.abs(g - w) - rtol * np.abs(w))
            out.append(f"{what}{jax.tree_util.keystr(path)} off by up to {excess:.2e} beyond rtol {rtol:g} "
                       f"(atol {atol:g})")
    return out


def collective_differences(ops, predicted, exact_counts: bool = False) -> list[str]:
    """Compiled collectives (``hlo.collective_ops``) against a prediction (``data.Collective``s).

    Bytes per (kind, axes) must match exactly; XLA may combine ops of one kind into one tuple op,
    so the compiled count may only be lower (equal when ``exact_counts``), as in the tests.
    """
    from scalelib.parallel import data

    got_bytes, want_bytes = data.sum_by_kind(ops), data.sum_by_kind(predicted)
    out = [f"{kind} over {axes}: compiled {got_bytes.get((kind, axes), 0)} bytes, predicted {b}"
           for (kind, axes), b in want_bytes.items() if got_bytes.get((kind, axes), 0) != b]
    out += [f"unpredicted {kind} over {axes} ({b} bytes)" for (kind, axes), b in got_bytes.items()
            if (kind, axes) not in want_bytes]
    got, want = {}, {}
    for c in ops:
        got[(c.kind, c.axes)] = got.get((c.kind, c.axes), 0) + 1
    for c in predicted:
        want[(c.kind, c.axes)] = want.get((c.kind, c.axes), 0) + c.count
    for key, n in want.items():
        if key in got and not (got[key] == n if exact_counts else 1 <= got[key] <= n):
            out.append(f"{key[0]} over {key[1]}: {got[key]} ops compiled, {n} predicted")
    return out


# ------------------------------------------------------------------ the checks


def _reference(cfg, hp, tokens, state, steps: int = STEPS):
    """(initial state, grads of step 1, [(loss, params)] after each step) on this process's first device.

    ``train.make_step``'s arithmetic (``loss_and_grads`` then ``adam_update``), compiled once with the
    gradients as an extra output.
    """
    import jax

    from scalelib import train

    def step(state, tokens):
        loss, grads = train.loss_and_grads(state.params, tokens, cfg)
        params, opt = train.adam_update(hp, grads, state.opt, state.params)
        return train.TrainState(params, opt), loss, grads

    compiled, out, s, first_grads = jax.jit(step), [], state, None
    for _ in range(steps):
        s, loss, grads = compiled(s, tokens)
        first_grads = grads if first_grads is None else first_grads
        out.append((float(loss), s.params))
    return state, first_grads, out


def _data_parallel_setup():
    """The data-parallel case: (cfg, hp, mesh, batch, seq, tokens, state, placed state, placed tokens, compiled)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from scalelib import compat, distributed, model, train
    from scalelib.parallel import data

    cfg, hp = model.small_config(), train.Adam(learning_rate=1e-2, eps=1e-3)  # eps: tests/test_parallel_data.py
    n = jax.device_count()
    batch, seq = 2 * n, 16
    mesh = compat.make_mesh((n,), ("data",))
    tokens = distributed.to_host(train.batch(jax.random.key(1), cfg, batch, seq))  # [B, T+1], same on every process
    state = train.init_state(jax.random.key(0), cfg)
    token_sharding = NamedSharding(mesh, P("data"))
    rows = distributed.process_rows(token_sharding, tokens.shape)  # the rows this process's loader reads
    t = distributed.from_process_rows(tokens[rows], token_sharding, tokens.shape)
    s = distributed.from_host(distributed.to_host(state), NamedSharding(mesh, P()))
    step = data.make_step(cfg, mesh, hp, microbatches=2, remat="full", return_grads=True)
    return cfg, hp, mesh, batch, seq, tokens, state, s, t, step.lower(s, t).compile()


def check_data_parallel() -> list[str]:
    """Data parallelism with 2 accumulated microbatches (and full remat) over every device."""
    from scalelib import distributed, hlo
    from scalelib.parallel import data

    cfg, hp, mesh, batch, seq, tokens, state, s, t, compiled = _data_parallel_setup()
    _, grads_ref, steps_ref = _reference(cfg, hp, tokens, state)
    problems = []
    for i, (loss_ref, params_ref) in enumerate(steps_ref, 1):
        s, loss, grads = compiled(s, t)
        if i == 1:
            problems += differences(distributed.to_host(grads), distributed.to_host(grads_ref), "grads")
        problems += differences(distributed.to_host(loss), loss_ref, f"loss at step {i}")
        problems += differences(distributed.to_host(s.params), distributed.to_host(params_ref), f"step {i} params")
    ops = hlo.collective_ops(compiled.as_text(), dict(mesh.shape))
    return problems + collective_differences(ops, data.predicted_collectives(cfg, dict(mesh.shape), batch, seq,
                                                                            microbatches=2))


def _matmul_setup(kind: str, bidirectional: bool):
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
    fn = cm.on_mesh(mesh, kind, "Y", None, bidirectional, num_tiles=tiles)
    xs = distributed.from_host(x, jax.sharding.NamedSharding(mesh, lhs.spec))
    ws = distributed.from_host(w, jax.sharding.NamedSharding(mesh, rhs.spec))
    return fn, fn.jitted.lower(xs, ws).compile(), xs, ws, x, w, tiles


def check_collective_matmul(kind: str) -> list[str]:
    """The ``kind`` collective matmul, one way and both ways, on a ring of every device: values and
    gradients against the unsharded product; ppermutes traced and, compiled, no other collective."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from scalelib import distributed, hlo
    from scalelib import ring_collectives as rc
    from scalelib.kernels import collective_matmul as cm

    problems, n = [], jax.device_count()
    for bidi in (False, True):
        way = "both ways" if bidi else "one way"
        fn, compiled, xs, ws, x, w, tiles = _matmul_setup(kind, bidi)
        probe = np.random.default_rng(1).standard_normal((x.shape[0], w.shape[1])).astype(np.float32)  # dL/dOut
        want = x.astype(np.float64) @ w.astype(np.float64)
        problems += differences(distributed.to_host(compiled(xs, ws)), want, f"{way} product", MATMUL_RTOL,
                                MATMUL_ATOL)
        grad = jax.jit(jax.grad(lambda a, c, f=fn, g=probe: jnp.sum(f.jitted(a, c) * g), argnums=(0, 1)))(xs, ws)
        plain = jax.grad(lambda a, c, g=probe: jnp.sum(jnp.dot(a, c, precision="highest") * g), argnums=(0, 1))(x, w)
        problems += differences(distributed.to_host(grad), distributed.to_host(plain), f"{way} gradient",
                                MATMUL_RTOL, MATMUL_ATOL)
        sends, want_sends = rc.trace_ppermutes(fn.jitted, xs, ws).sends, cm.expected_ppermutes(kind, n, bidi, tiles)
        if sends != want_sends:
            problems.append(f"{way}: {sends} ppermutes traced, {want_sends} predicted")
        kinds = {o.kind for o in hlo.collective_ops(compiled.as_text(), {"Y": n})}
        if kinds != {"collective_permute"}:
            problems.append(f"{way}: compiled collectives {sorted(kinds)}, predicted only collective_permute")
    return problems


def checks() -> dict[str, Callable[[], list[str]]]:
    """Scheme name -> a check returning what differed (empty: the scheme matched)."""
    out: dict[str, Callable[[], list[str]]] = {"data": check_data_parallel}
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        out[f"collective_matmul.{kind}"] = lambda kind=kind: check_collective_matmul(kind)
    return out


def benchmarks() -> dict[str, Callable[[], tuple[Callable, tuple]]]:
    """Scheme name -> a function building (compiled step, its placed inputs), for timing."""
    def data_step():
        *_, s, t, compiled = _data_parallel_setup()
        return compiled, (s, t)

    def matmul_step(kind: str):
        _, compiled, xs, ws, *_ = _matmul_setup(kind, False)
        return compiled, (xs, ws)

    out: dict[str, Callable[[], tuple[Callable, tuple]]] = {"data": data_step}
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        out[f"collective_matmul.{kind}"] = lambda kind=kind: matmul_step(kind)
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
                        help="CPU devices for a single-process run (default 8; under the launcher, its count)")
    args = parser.parse_args(argv)
    from scalelib import compat, distributed

    if distributed.launch_env() is None and args.local_devices is None:
        args.local_devices = 8
    info = distributed.initialize(args.local_devices)
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
