"""Benchmarks (not tests: nothing here asserts a speed). Run: python -m tests.benchmarks [--suite]

Prints, side by side in one run:
* per chapter: the solution notebook's execution time and the grading time of one notebook;
* our ring collectives (ppermute in shard_map) against jax.lax's, as a time ratio, on 8 simulated devices;
* each training scheme's step time against the single-device step (small model);
* flash attention against naive attention and jax.nn.dot_product_attention, 1k-16k tokens: time and temp memory;
* with --suite: the whole test suite's wall time (the README's test command).
* with --trace (only that): profiler trace capture and parse times (scalelib.profiling.trace) of a few sharded
  programs on 8 simulated devices; run it in .venv and .venv-floor to compare JAX versions.
* with --multiprocess (only that): per scheme, the step with 2 processes x 4 devices against 1 process
  x 8 devices; the launcher's start-up; how fast a run ends after a fault (tests/benchmarks/multiprocess.py).
* with --attention (only that): the flash attention rows above, on JAX's default device (a GPU's, where one is).
* with --dispatch (only that): on JAX's default device, a large matmul (bf16; f32 at the default and at "highest"
  precision) and a large add timed one run a sample against 10 runs back to back (machine.best_time_s's calls).
* with --serving (only that): continuous vs static batching, prefix caching, the eviction policies and speculative decoding
  (tests/benchmarks/serving.py); add --highest to run them at "highest" matmul precision.
* with --grading (only that): grading throughput of ``autograder grade`` (parallel, sandboxed, warm kernel pool)
  against sequential ``nbgrader autograde`` on the same 16 (--copies) copies of chapter 1's solution;
* with --shards N (only that): 64 (--copies) copies of chapter 1 graded as N shards and merged.
* with --grading-profile CHAPTER (only that): where grading that chapter's test class spends its time (trusted
  context, kernel starts, binds, cells, judge) and the CPU used meanwhile (tests/benchmarks/grading_profile.py).
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from scalelib import devices

devices.setup(8)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from autograder import course  # noqa: E402
from autograder.grading import class_run
from scalelib import compat, hardware_check, machine  # noqa: E402
from scalelib import ring_collectives as rc  # noqa: E402

ROOT = course.ROOT


def notebook_seconds(name: str) -> float:
    nb = nbformat.read(course.SOLUTIONS / f"{name}.ipynb", as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(course.SOLUTIONS)}}).execute()
    return time.perf_counter() - start


def grading_seconds(name: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        shutil.copy(course.SOLUTIONS / f"{name}.ipynb", subs / "student.ipynb")
        start = time.perf_counter()
        class_run.grade(subs, name, Path(tmp) / "out")
        return time.perf_counter() - start


def nbgrader_sequential_seconds(name: str, subs: Path, work: Path) -> float:
    """nbgrader autograde, one student after another, as an instructor would run it."""
    from autograder.instructor import nbgrader_course

    api, _ = nbgrader_course.generate(work / "course", name, course.SOLUTIONS)
    start = time.perf_counter()
    for nb in sorted(subs.glob("*.ipynb")):
        target = work / "course" / "submitted" / nb.stem / name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(nb, target / f"{name}.ipynb")
        if not api.autograde(name, nb.stem, force=True, create=True)["success"]:
            raise RuntimeError(f"nbgrader could not grade {nb}")
    return time.perf_counter() - start


def grading_throughput(name: str = "01_rooflines", copies: int = 16, workers: int = 2) -> None:
    import warnings

    warnings.filterwarnings("ignore", module="nbgrader.api")
    own = notebook_seconds(name)
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        for i in range(copies):
            shutil.copy(course.SOLUTIONS / f"{name}.ipynb", subs / f"student{i:02d}.ipynb")
        start = time.perf_counter()
        results = class_run.grade(subs, name, Path(tmp) / "out", workers=workers, quiet=True)
        ours = time.perf_counter() - start
        assert all(r.score == r.max_score for r in results), [r.line() for r in results]
        theirs = nbgrader_sequential_seconds(name, subs, Path(tmp) / "nbgrader")
    per_nb = sum(r.seconds for r in results) / len(results)
    print(f"grading {copies} copies of {name}'s solution; the notebook alone executes in {own:.1f} s")
    print(f"{'grader':34s} {'wall (s)':>9s} {'notebooks/min':>14s}")
    print(f"{'nbgrader autograde, sequential':34s} {theirs:9.1f} {60 * copies / theirs:14.1f}")
    print(f"{f'autograder grade, {workers} workers':34s} {ours:9.1f} {60 * copies / ours:14.1f}")
    print(f"speed-up: {theirs / ours:.2f}x;  per notebook (one worker's view): {per_nb:.1f} s "
          f"({per_nb / own:.2f}x the notebook's own execution)")


def sharded_class(name: str = "01_rooflines", copies: int = 64, n_shards: int = 2, workers: int = 2) -> None:
    """A class graded as ``n_shards`` shards, one after another here (on a cluster they run side by side), then
    merged: each shard's wall time, the merge's, and what a cluster would take (slowest shard + merge)."""
    from autograder.grading import shard_merge

    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        for i in range(copies):
            shutil.copy(course.SOLUTIONS / f"{name}.ipynb", subs / f"student{i:02d}.ipynb")
        walls = []
        for k in range(n_shards):
            start = time.perf_counter()
            part = class_run.grade(subs, name, Path(tmp) / f"shard-{k}", workers=workers, quiet=True, shard=(k, n_shards))
            walls.append(time.perf_counter() - start)
            print(f"shard {k}/{n_shards}: {len(part)} notebooks in {walls[-1]:.1f} s", flush=True)
        start = time.perf_counter()
        merged = shard_merge.merge([Path(tmp) / f"shard-{k}" for k in range(n_shards)], Path(tmp) / "class")
        merge_s = time.perf_counter() - start
        assert len(merged) == copies and all(r.score == r.max_score for r in merged)
    print(f"{copies} copies of {name} as {n_shards} shards ({workers} workers each): shards {sum(walls):.1f} s one "
          f"after another, merge {merge_s:.1f} s; on {n_shards} machines: {max(walls) + merge_s:.1f} s")


def collective_ratios(local_elems: int = 1 << 16) -> list[tuple[str, bool, float, float]]:
    """(op, bidirectional, ring seconds, jax.lax seconds) for float32 shards of ``local_elems``."""
    mesh = compat.make_mesh((8,), ("x",))
    spec = jax.sharding.PartitionSpec("x")
    x = jnp.arange(8 * local_elems, dtype=jnp.float32).reshape(8 * 8, local_elems // 8)  # [64, L/8]
    x = jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))  # [8, L/8] per device
    lax_ops = {
        "all_gather": lambda v: jax.lax.all_gather(v, "x", tiled=True),
        "reduce_scatter": lambda v: jax.lax.psum_scatter(v, "x", tiled=True),
        "all_reduce": lambda v: jax.lax.psum(v, "x"),
        "all_to_all": lambda v: jax.lax.all_to_all(v, "x", 0, 0, tiled=True),
    }
    rows = []
    for op, ref in lax_ops.items():
        base = rc.on_mesh(ref, mesh, spec, spec)
        t_lax = machine.best_time_s(lambda: base(x), repeats=10)
        for bidi in (False, True):
            ours = rc.on_mesh(lambda v, op=op, bidi=bidi: rc.OPS[op](v, "x", bidi), mesh, spec, spec)
            rows.append((op, bidi, machine.best_time_s(lambda: ours(x), repeats=10), t_lax))
    return rows


def attention_rows(lengths=(1024, 2048, 4096, 8192, 16384), heads: int = 4, head_dim: int = 64):
    """(T, name, seconds, temp bytes) for causal self-attention, batch 1, float32, on one device, one at a time."""
    from scalelib.kernels.flash_attention import flash_attention, reference_attention

    impls = {
        "naive": lambda q, k, v: reference_attention(q, k, v, causal=True),
        "flash": lambda q, k, v: flash_attention(q, k, v, causal=True, block_q=512, block_k=512),
        "jax.nn": lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
    }
    for t in lengths:  # a generator: each row is printed as soon as it is measured
        keys = jax.random.split(jax.random.key(t), 3)
        q, k, v = (jax.random.normal(kk, (1, t, heads, head_dim), jnp.float32) for kk in keys)  # [1, T, N, H]
        for name, fn in impls.items():
            jitted = jax.jit(fn)
            temp = jitted.lower(q, k, v).compile().memory_analysis().temp_size_in_bytes
            seconds = machine.best_time_s(lambda: jitted(q, k, v), repeats=2 if t >= 8192 else 3)
            yield t, name, seconds, temp


def dispatch_rows(d: int = 8192, add_bytes: int = 2**30, repeats: int = 10) -> Iterator[tuple[str, int, float, float]]:
    """(what, runs a sample, seconds, rate) on the default device: one run a sample against 10 back to back."""
    for dtype, precision in ((jnp.bfloat16, "default"), (jnp.float32, "default"), (jnp.float32, "highest")):
        for calls in (1, 10):
            with jax.default_matmul_precision(precision):
                m = machine.measure_matmul(d, d, dtype, repeats=repeats, calls=calls)
            yield f"{d}^3 {jnp.dtype(dtype).name} matmul, {precision} precision", calls, m.seconds, m.flops_per_s
    for calls in (1, 10):  # the hardware check's bandwidth measurement
        rate = hardware_check.add_bytes_per_s(add_bytes, repeats, calls)
        yield f"x + y, 3 x {add_bytes / 1e9:.2f} GB float32", calls, 3 * add_bytes / rate, rate


def print_attention_rows() -> None:
    print(f"\ncausal attention, batch 1, 4 heads x 64, float32, one {jax.devices()[0].platform} device "
          f"({jax.devices()[0].device_kind}; best of 2-3)")
    print(f"{'T':>6s} {'impl':>7s} {'time (s)':>9s} {'vs naive':>9s} {'temp MiB':>9s}")
    naive = {}
    for t, name, sec, mem in attention_rows():  # "naive" comes first for each T
        naive.setdefault(t, sec)
        print(f"{t:6d} {name:>7s} {sec:9.3f} {sec / naive[t]:9.2f} {mem / 2**20:9.1f}", flush=True)


def scheme_step_rows(batch: int = 16, seq_len: int = 64) -> list[tuple[str, str, float, float]]:
    """(scheme, mesh, step seconds, single-device step seconds) for the small model on 8 simulated devices."""
    from scalelib import model, train
    from scalelib.parallel.data import DataParallel
    from scalelib.parallel.expert import ExpertParallel
    from scalelib.parallel.fsdp import FSDP
    from scalelib.parallel.fsdp_tp import FSDPTensor
    from scalelib.parallel.multislice import Multislice
    from scalelib.parallel.pipeline import Pipeline
    from scalelib.parallel.sequence import SequenceParallel
    from scalelib.parallel.tensor import TensorParallel

    hp = train.Adam()
    cfg = model.small_config()
    tp_cfg = model.small_config(n_heads=8, n_kv_heads=4, head_dim=8)
    moe_cfg = model.small_config(n_experts=8, experts_per_token=2, expert_d_ff=32)
    rows = []
    for name, scheme, shape, scheme_cfg in [
        ("data", DataParallel(), (8,), cfg),
        ("zero-1", FSDP(stage=1), (8,), cfg),
        ("fsdp (zero-3)", FSDP(stage=3), (8,), cfg),
        ("multislice", Multislice(), (2, 4), cfg),
        ("tensor", TensorParallel(), (2, 4), tp_cfg),
        ("fsdp x tensor", FSDPTensor(), (2, 4), tp_cfg),
        ("pipeline 1f1b", Pipeline(4, "1f1b"), (4,), model.small_config(n_layers=4)),
        ("expert", ExpertParallel(4.0), (8,), moe_cfg),
        ("sequence (ring)", SequenceParallel("ring"), (8,), cfg),
    ]:
        mesh = compat.make_mesh(shape, scheme.mesh_axes, devices=jax.devices()[:math.prod(shape)])
        s0, t0 = train.init_state(jax.random.key(0), scheme_cfg), train.batch(jax.random.key(1), scheme_cfg, batch, seq_len)
        ref = jax.jit(train.make_step(scheme_cfg, hp))
        s, t = scheme.shard_inputs(s0, t0, mesh)
        step = scheme.make_step(scheme_cfg, mesh, hp)
        t_ref = machine.best_time_s(lambda: ref(s0, t0)[1], repeats=5)
        t_ours = machine.best_time_s(lambda: step(s, t)[1], repeats=5)
        rows.append((name, "x".join(map(str, shape)), t_ours, t_ref))
    return rows


def trace_rows(repeats: int = 5) -> list[tuple[str, int, int, float, float, float]]:
    """(program, op runs, trace bytes, first-call s, capture s, read s) medians over ``repeats`` captures."""
    import statistics

    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from scalelib.kernels import collective_matmul
    from scalelib.profiling import trace

    mesh = compat.make_mesh((2, 4), ("X", "Y"), kind="auto")
    x = jax.device_put(jnp.ones((256, 512)), NamedSharding(mesh, P("X", "Y")))  # [B, D]
    w_in = jax.device_put(jnp.ones((512, 1024)), NamedSharding(mesh, P(None, "Y")))  # [D, F]
    w_out = jax.device_put(jnp.ones((1024, 512)), NamedSharding(mesh, P("Y", None)))  # [F, D]
    ffw = jax.jit(lambda x, a, b: jax.nn.gelu(x @ a) @ b, out_shardings=NamedSharding(mesh, P("X", None)))
    ring = compat.make_mesh((1, 8), ("X", "Y"), kind="auto")
    programs = {"ffw 2x4 (all-gather, all-reduce)": (ffw, (x, w_in, w_out)),
                "collective matmul, ring of 8": (collective_matmul.on_mesh(ring, "all_gather", "Y", "X"),
                                                 (jnp.ones((256, 512)), jnp.ones((512, 512))))}
    rows = []
    for name, (fn, args) in programs.items():
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        first = time.perf_counter() - start
        caps, reads, n_ops = [], [], 0
        for _ in range(repeats):
            cap = trace.capture(fn, *args, steps=3)
            start = time.perf_counter()
            n_ops = len(trace.read(cap).ops)
            reads.append(time.perf_counter() - start)
            caps.append(cap.capture_s)
        rows.append((name, n_ops, len(cap.xspace), first, statistics.median(caps), statistics.median(reads)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", action="store_true", help="also time the whole test suite")
    parser.add_argument("--grading", action="store_true", help="only: grading throughput vs nbgrader (2 workers)")
    parser.add_argument("--trace", action="store_true", help="only: trace capture and parse times")
    parser.add_argument("--serving", action="store_true", help="only: the serving engine's benchmarks")
    parser.add_argument("--highest", action="store_true", help="with --serving: matmuls at 'highest' precision")
    parser.add_argument("--attention", action="store_true", help="only: flash vs naive vs jax.nn attention")
    parser.add_argument("--dispatch", action="store_true", help="only: one run a sample vs 10 back to back")
    parser.add_argument("--copies", type=int, default=None, help="notebooks for --grading (16) or --shards (64)")
    parser.add_argument("--workers", type=int, default=2, help="workers for --grading and each shard")
    parser.add_argument("--shards", type=int, help="only: grade --copies notebooks of chapter 1 as this many shards")
    parser.add_argument("--multiprocess", action="store_true", help="only: 2 processes x 4 devices vs 1 x 8")
    parser.add_argument("--grading-profile", metavar="CHAPTER", choices=course.chapter_names(),
                        help="only: where grading this chapter's test class spends its time")
    args = parser.parse_args()
    if args.grading_profile:
        from tests.benchmarks import grading_profile

        grading_profile.report(args.grading_profile)
        return 0
    if args.shards:
        sharded_class(copies=args.copies or 64, n_shards=args.shards, workers=args.workers)
        return 0
    if args.multiprocess:
        from tests.benchmarks import multiprocess

        multiprocess.report()
        return 0
    if args.grading:
        grading_throughput(copies=args.copies or 16, workers=args.workers)
        return 0
    if args.trace:
        print(f"jax {jax.__version__}: trace of 3 steps on 8 simulated devices (medians of 5 captures)")
        print(f"{'program':34s} {'op runs':>8s} {'KiB':>6s} {'1st call (s)':>13s} {'capture (ms)':>13s} {'read (ms)':>10s}")
        for name, n, size, first, cap, rd in trace_rows():
            print(f"{name:34s} {n:8d} {size / 1024:6.0f} {first:13.2f} {cap * 1e3:13.1f} {rd * 1e3:10.1f}")
        return 0
    if args.attention:
        print_attention_rows()
        return 0
    if args.dispatch:
        device = jax.devices()[0]
        print(f"jax {jax.__version__}, one {device.platform} device ({device.device_kind}); best of 10 samples")
        print(f"{'what':48s} {'runs a sample':>14s} {'a run (ms)':>11s} {'rate':>12s}")
        for what, calls, seconds, rate in dispatch_rows():
            unit = "B/s" if what.startswith("x + y") else "FLOP/s"
            print(f"{what:48s} {calls:14d} {seconds * 1e3:11.3f} {rate / 1e12:7.2f} T{unit}", flush=True)
        return 0
    if args.highest and not args.serving:
        parser.error("--highest goes with --serving")
    if args.serving:
        from tests.benchmarks import serving

        if args.highest:
            jax.config.update("jax_default_matmul_precision", "highest")
        serving.main()
        return 0
    print(f"jax {jax.__version__}, {len(jax.devices())} {jax.devices()[0].platform} devices\n")
    print(f"{'chapter':16s} {'execute (s)':>12s} {'grade 1 nb (s)':>15s}")
    for name in course.chapter_names():
        print(f"{name:16s} {notebook_seconds(name):12.1f} {grading_seconds(name):15.1f}", flush=True)
    # Grading ran the instructor's notebooks in this process, and some call compat.fast_compiles():
    # measure everything below with XLA's usual optimizations.
    compat.fast_compiles(False)
    print("\nring collectives vs jax.lax, 8 simulated devices, 256 KiB float32 per device (best of 10)")
    print(f"{'op':15s} {'direction':>9s} {'ours (ms)':>10s} {'lax (ms)':>9s} {'ours/lax':>9s}")
    for op, bidi, ours, ref in collective_ratios():
        print(f"{op:15s} {'bidi' if bidi else 'uni':>9s} {ours * 1e3:10.3f} {ref * 1e3:9.3f} {ours / ref:9.2f}")
    print_attention_rows()
    print("\ntraining step of the small model, batch 16 x 64 tokens, 8 simulated devices (best of 5)")
    print(f"{'scheme':16s} {'mesh':>5s} {'step (ms)':>10s} {'1 device (ms)':>14s} {'ratio':>6s}")
    for name, mesh_desc, ours, ref in scheme_step_rows():
        print(f"{name:16s} {mesh_desc:>5s} {ours * 1e3:10.2f} {ref * 1e3:14.2f} {ours / ref:6.2f}", flush=True)
    if args.suite:
        start = time.perf_counter()
        rc_ = subprocess.run([sys.executable, str(ROOT / "course.py"), "test", "-q"], cwd=ROOT).returncode
        print(f"\nwhole suite (python3 course.py test): {time.perf_counter() - start:.0f} s, exit {rc_}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
