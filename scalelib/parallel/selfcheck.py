"""Every parallel scheme against the single-device step, on the devices of every process of the job.

    python -m scalelib.parallel.selfcheck [SCHEME ...]             # one process, 8 local devices
    python -m scalelib.launch --processes 2 --local-devices 4 -m scalelib.parallel.selfcheck
    srun --ntasks=2 python -m scalelib.parallel.selfcheck           # or mpirun -np 2 ...: 4 CPU devices each

One line per scheme: ``<scheme> ok``, what differed, or why it was skipped; the exit status is 1 if
anything differed, 2 for a job it cannot check (fewer than 2 devices, an unknown scheme).
Every case (``plan()``: each registered scheme, ZeRO at its three stages, both pipeline orders and
both sequence methods) builds its inputs per process
(``distributed.from_host`` for the state every process can make from the same seed,
``distributed.from_process_rows`` for the rows of the batch its devices hold), runs the scheme's step on
a mesh spanning every process, gathers the results (``distributed.to_host``) and compares them with
the same step on one device (each process computes it alone, so no collective waits for work only one
process does; the processes meet at a barrier before each scheme's first collective): the loss and
weights after each of 3 steps, the first step's gradients and the last Adam moments, at the tolerances of
tests/test_parallel_schemes.py. The compiled program's collectives are held against the scheme's prediction
as those tests do.

After the schemes come the checks other packages own, each in a ``<subject>_selfcheck`` module found on
disk (``suites``): the three collective matmuls of ``scalelib/kernels/matmul_selfcheck.py``,
``collective_matmul.<kind>``.
This module imports none of them: the checks of a package stay with it, and parallel leans on none.

Any job of 2 or more devices, split over any number of processes with the same count each, is checked:
the meshes are laid out for the job (``plan``). Each mesh takes the same number of devices from every
process, its first axis the one between processes, so multislice's slice axis (DCN) joins the processes and
its data axis (ICI) stays inside each one; batch, sequence, stage and expert counts grow with the mesh where a
split needs it. A scheme the job cannot hold is not run: its line says ``skipped`` and why.

Under a cluster's launcher (SLURM's ``srun``, Open MPI's ``mpirun``) on CPU, each process takes
8 / processes CPU devices (at least 1) unless ``--local-devices`` says otherwise, so the job has the 8 devices of a
single-process run (``distributed.cluster_processes``).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from scalelib.parallel import compare

if TYPE_CHECKING:
    import jax
    import numpy as np

    from scalelib import train
    from scalelib.transformer import TransformerConfig

RTOL, ATOL = compare.RTOL, compare.ATOL
STEPS = 3
DEVICES = 8  # a single process's CPU devices, and the job's CPU devices under a cluster launcher
KV_HEADS = 4  # of the tensor-parallel model: its model axis divides them


@dataclass(frozen=True)
class Case:
    """One scheme on one mesh and model, and how its compiled collectives are compared.

    ``collectives``: "sums" (bytes per (kind, axes) equal, counts at most the predicted ones),
    "counts" (counts equal too), "each" (every op) or "loop" (the pipeline's rolled tick loop).
    ``merged``: predicted ops XLA:CPU folds into others (FSDP's backward regathers, see
    tests/test_parallel_schemes.py). A mesh smaller than the job takes the same number of devices
    from every process, so it still spans them. ``note``: what the check leaves out on this job.
    """

    name: str
    scheme: Any  # a scalelib.parallel.Scheme
    shape: tuple[int, ...]
    cfg: Any  # TransformerConfig
    hp: Any  # train.Adam
    batch: int = 16
    seq: int = 16
    loss_atol: float = ATOL
    collectives: str = "sums"
    merged: Callable[[Any], bool] = field(default=lambda c: False)
    note: str = ""


@dataclass(frozen=True)
class Skip:
    """A check this job cannot hold, and why."""

    reason: str


@dataclass(frozen=True)
class CheckResult:
    scheme: str
    problems: tuple[str, ...]  # empty when the scheme matched
    seconds: float
    skipped: str = ""  # why the check did not run ("" when it ran)
    note: str = ""  # what a check that ran left out

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        if self.skipped:
            return f"{self.scheme} skipped: {self.skipped}"
        if not self.ok:
            return f"{self.scheme} DIFFERS: " + "; ".join(self.problems)
        return f"{self.scheme} ok" + (f" ({self.note})" if self.note else "")


def _up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m``."""
    return m * -(-x // m)


@functools.cache
def plan(devices: int = DEVICES, processes: int = 1) -> dict[str, Case | Skip]:
    """Every scheme case by name, laid out for a job of ``devices`` split evenly over ``processes``, or
    why the job cannot hold it. The models and settings are those of tests/test_parallel_schemes.py;
    batch, sequence, stage and expert counts grow only where the job's mesh needs them to split evenly.
    The tests check that every scheme of the registry has a case."""
    from scalelib import model, train
    from scalelib.parallel.cases import is_regather
    from scalelib.parallel.data import DataParallel
    from scalelib.parallel.expert import ExpertParallel
    from scalelib.parallel.fsdp import FSDP
    from scalelib.parallel.fsdp_tp import FSDPTensor
    from scalelib.parallel.multislice import Multislice
    from scalelib.parallel.pipeline import Pipeline
    from scalelib.parallel.sequence import SequenceParallel
    from scalelib.parallel.tensor import TensorParallel

    check_job(devices, processes)
    n, p = devices, processes
    hp, hp_lr = train.Adam(learning_rate=1e-2, eps=1e-3), train.Adam(learning_rate=1e-2, eps=1e-2)
    cfg = model.small_config()
    # tensor parallelism: a model axis of 4 (or 2) divides N and K; the rest of the job is the data axis
    tp, y = model.small_config(n_heads=8, n_kv_heads=KV_HEADS, head_dim=8), math.gcd(n, KV_HEADS)
    # pipeline: 4 stages, or the fewest above that which take the same number of devices from every process
    stages = _up(min(4, n), p)
    pp = model.small_config(n_layers=_up(4, stages))
    experts = math.lcm(8, n)  # a multiple of the expert axis
    moe = model.small_config(n_experts=experts, experts_per_token=2, expert_d_ff=32, n_shared_experts=1,
                             router_bias=True)
    seq = model.small_config(n_layers=1, n_experts=4, experts_per_token=2, expert_d_ff=32, qkv_bias=True)
    no_drop = moe.n_experts / moe.experts_per_token  # every expert has a slot for every token
    out: dict[str, Case | Skip] = {}
    cases = [
        Case("data", DataParallel(microbatches=2, remat="full"), (n,), cfg, hp, _up(16, 2 * n)),
        *(Case(f"zero{s}", FSDP(stage=s), (n,), cfg, hp, _up(16, n), collectives="counts" if s == 3 else "sums",
               merged=is_regather if s == 3 else lambda c: False) for s in (1, 2, 3)),
        Case("tensor", TensorParallel(), (n // y, y), tp, hp, _up(16, n // y)),
        Case("fsdp_tp", FSDPTensor(), (n // y, y), tp, hp, _up(16, n // y), collectives="counts", merged=is_regather),
        Case("multislice", Multislice(), (p, n // p) if p > 1 else (2, n // 2), cfg, hp, _up(16, n),
             note="" if p > 1 else "one process: the slice axis cannot cross processes, so where each axis "
                                   "runs is not checked"),
        Case("pipeline.gpipe", Pipeline(2, "gpipe"), (stages,), pp, hp_lr, 4, 8, 0.0, "loop"),
        Case("pipeline.1f1b", Pipeline(4, "1f1b"), (stages,), pp, hp_lr, 4, 8, 0.0, "loop"),
        Case("expert", ExpertParallel(no_drop), (n,), moe, hp_lr, _up(8, n), 8, 0.0, "each"),
        *(Case(f"sequence.{m}", SequenceParallel(m), (n,), seq, hp_lr, 2, _up(16, n), 0.0, "each")
          for m in ("all_gather", "ring")),
    ]
    for case in cases:
        out[case.name] = _holds(case, n, p)
    if y == 1:
        why = (f"its model axis must divide the model's {KV_HEADS} KV heads and the job's {n} devices, "
               "and only 1 does (nothing to split)")
        out["tensor"] = out["fsdp_tp"] = Skip(why)
    if p == 1 and n % 2:
        out["multislice"] = Skip(f"alone, it needs an even number of devices for 2 slices; this job has {n}")
    return out


def _holds(case: Case, devices: int, processes: int) -> Case | Skip:
    """``case``, or why this job cannot hold it (the scheme's own check, or a mesh that cannot take
    as many devices from every process)."""
    size = math.prod(case.shape)
    if size > devices or size % processes:
        return Skip(f"a mesh of {size} devices cannot take the same number from each of {processes} processes "
                    f"of a {devices}-device job")
    try:
        case.scheme.check(case.cfg, dict(zip(case.scheme.mesh_axes, case.shape, strict=True)), case.batch, case.seq)
    except ValueError as err:
        return Skip(str(err))
    return case


def cases(devices: int = DEVICES, processes: int = 1) -> dict[str, Case]:
    """The scheme cases this job holds, by name (``plan`` without the skipped ones)."""
    return {name: c for name, c in plan(devices, processes).items() if isinstance(c, Case)}


def check_job(devices: int, processes: int) -> None:
    """Refuse a job the selfcheck cannot compare: fewer than 2 devices, or uneven processes."""
    if devices < 2:
        raise ValueError(f"the selfcheck compares parallel schemes with one device, so it needs 2 or more devices; "
                         f"this job has {devices} (with one accelerator, run it on the CPU: JAX_PLATFORMS=cpu "
                         f"gives {DEVICES} simulated devices)")
    if processes < 1 or devices % processes:
        raise ValueError(f"{devices} devices cannot be split evenly over {processes} processes")


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
    """Host (state, tokens), [(loss, params)] after each step, the first step's gradients and the last Adam
    moments, every leaf a numpy array.

    Every process computes them alone, on its own first device (the same seeds and program, so the same
    values), and compares its own results with them. None waits for another here: a reference sent by one
    process would make the others wait for it inside a collective, which gloo gives up after a fixed 30 s
    (on a busy machine, or with a slow process 0, the first check failed so). The scheme's own step starts
    only once every process has reached the barrier in ``setup``."""
    import jax
    import numpy as np

    from scalelib import train

    step = train.make_step(cfg, hp, return_grads=True)  # no scheme overrides reference_step
    # one compiled program each (eagerly, every random array would be a compile of its own)
    state = jax.jit(lambda key: train.init_state(key, cfg))(jax.random.key(0))
    tokens = jax.jit(lambda key: train.batch(key, cfg, batch, seq))(jax.random.key(1))
    compiled, s, losses, params, first_grads = jax.jit(step), state, [], [], None
    for _ in range(STEPS):
        s, loss, grads = compiled(s, tokens)
        first_grads = grads if first_grads is None else first_grads
        losses.append(loss)
        params.append(s.params)
    state, tokens, losses, params, grads, nu = jax.device_get((state, tokens, losses, params, first_grads,
                                                                s.opt.nu))
    return state, tokens, [(float(v), p) for v, p in zip(np.stack(losses), params, strict=True)], grads, nu


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
    compiled = case.scheme.make_step(case.cfg, mesh, case.hp, return_grads=True).lower(s, t).compile()
    distributed.barrier(f"{case.name} compiled")  # then its new groups of devices meet within gloo's 30 s
    return mesh, s, t, compiled


def without_trivial_axes(ops: Sequence[Any], mesh_shape: dict[str, int]) -> list[Any]:
    """Collectives (compiled ``CollectiveOp`` or predicted ``Collective``) named by their axes of 2 or
    more devices only, and without those over no such axis (XLA drops them). An axis of 1 device
    joins nothing, so a group over ('slice', 'data') with 1 device on 'data' is the group over
    'slice': the compiled name and the predicted one may differ only there."""
    import dataclasses

    out = []
    for op in ops:
        if op.axes is None:  # a permute's pairs: no axes to name
            out.append(op)
            continue
        axes = tuple(a for a in op.axes if mesh_shape.get(a, 2) > 1)
        if axes:
            out.append(dataclasses.replace(op, axes=axes))
    return out


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
    text, shape = compiled.as_text(), dict(mesh.shape)
    predicted = [c for c in case.scheme.predicted_collectives(case.cfg, shape, case.batch, case.seq)
                 if not case.merged(c)]
    problems += compare.collectives(without_trivial_axes(hlo.collective_ops(text, shape), shape),
                                    without_trivial_axes(predicted, shape), case.collectives, text)
    if case.name == "multislice":  # (with one process there is nothing to cross: no problem reported)
        problems += compare.axes_cross_processes(mesh, crossing=("slice",), inside=("data",))
    return problems


SUITES = "*_selfcheck.py"  # the modules through which the other scalelib packages offer their own checks here


def suites() -> list[ModuleType]:
    """The checks the other scalelib packages own: every ``<subject>_selfcheck`` module below scalelib (the
    collective matmuls' is ``scalelib/kernels/matmul_selfcheck.py``), by dotted name. Each offers
    ``checks(devices, processes)`` and ``benchmarks(devices, processes)`` like this module's, named
    ``<subject>.<case>``. They are found on disk and imported only when asked for, so parallel imports none
    of them (tests/test_import_graph.py) and a package adds its checks without a line here."""
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = sorted(".".join(("scalelib", *path.relative_to(root).with_suffix("").parts))
                   for path in root.rglob(SUITES))
    return [importlib.import_module(name) for name in names]


def checks(devices: int = DEVICES, processes: int = 1) -> dict[str, Callable[[], list[str]] | Skip]:
    """Check name -> a check returning what differed (empty: it matched), or why this job (``devices``
    over ``processes``) skips it: every scheme case, then each other package's checks (``suites``).
    Every name is there whatever the job."""
    out: dict[str, Callable[[], list[str]] | Skip] = {
        name: functools.partial(check_scheme, case) if isinstance(case, Case) else case
        for name, case in plan(devices, processes).items()}
    for suite in suites():
        out.update(suite.checks(devices, processes))
    return out


def benchmarks(devices: int = DEVICES, processes: int = 1) -> dict[str, Callable[[], tuple[Callable, tuple]]]:
    """Check name -> a function building (compiled step, its placed inputs), for timing: the schemes
    this job holds, then each other package's (``suites``)."""
    def scheme_step(case: Case) -> tuple[Callable, tuple]:
        _, s, t, compiled = setup(case)
        return compiled, (s, t)

    out: dict[str, Callable[[], tuple[Callable, tuple]]] = {
        name: functools.partial(scheme_step, case) for name, case in cases(devices, processes).items()}
    for suite in suites():
        out.update(suite.benchmarks(devices, processes))
    return out


def run(names: Sequence[str] | None = None, devices: int = DEVICES, processes: int = 1) -> Iterator[CheckResult]:
    """Run the named checks (all by default) for this job, yielding each result as it is known; a
    check the job cannot hold yields a skipped result."""
    table = checks(devices, processes)
    unknown = [n for n in names or () if n not in table]
    if unknown:
        raise ValueError(f"unknown schemes {unknown}; choose from {sorted(table)}")
    notes = {name: c.note for name, c in cases(devices, processes).items()}
    for name in names or table:
        check = table[name]
        if isinstance(check, Skip):
            yield CheckResult(name, (), 0.0, skipped=check.reason)
            continue
        start = time.perf_counter()
        problems = tuple(check())
        yield CheckResult(name, problems, time.perf_counter() - start, note=notes.get(name, ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalelib.parallel.selfcheck", description=__doc__.split("\n")[0])
    parser.add_argument("schemes", nargs="*", help="schemes to check (default: all)")
    parser.add_argument("--local-devices", type=int, default=None,
                        help=f"CPU devices per process (default: {DEVICES} alone, {DEVICES} / processes under srun or "
                             "mpirun, the launcher's count under scalelib.launch)")
    args = parser.parse_args(argv)
    from scalelib import compat, distributed

    if distributed.launch_env() is None and args.local_devices is None:
        args.local_devices = max(1, DEVICES // (distributed.cluster_processes() or 1))
    info = distributed.initialize(args.local_devices)
    try:
        check_job(info.device_count, info.num_processes)
        table = checks(info.device_count, info.num_processes)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    unknown = [n for n in args.schemes if n not in table]
    if unknown:
        print(f"unknown schemes {unknown}; choose from {sorted(table)}", file=sys.stderr)
        return 2
    if info.process_id == 0:
        print(f"selfcheck on {info}", flush=True)
    failed = 0
    compat.fast_compiles()  # the same HLO and collectives, compiled in about half the time
    try:
        for result in run(args.schemes or None, info.device_count, info.num_processes):
            failed += not result.ok
            if info.process_id == 0 or not result.ok:  # every process compares; each reports a difference
                timing = "" if result.skipped else f"  ({result.seconds:.1f} s)"
                print(f"{result.line()}{timing}", flush=True)
    finally:
        compat.fast_compiles(False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
