"""Benchmark: one program as 2 processes x 4 devices against 1 process x 8 devices (not a test).

    python -m tests.benchmarks --multiprocess

Prints, from one run: per scheme, the step time with 2 processes x 4 CPU devices (collectives between
the processes over gloo) against 1 process x 8 devices (the same mesh, all in one process), as a
ratio; the launcher's start-up (an empty job: import, join, exit) against one plain process; and how
long the launcher takes to end a run after a fault.

As a worker (``python -m tests.benchmarks.multiprocess --steps``, alone or under the launcher) it
prints one JSON line per scheme from process 0.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 7
MODULE = "tests.benchmarks.multiprocess"


# ------------------------------------------------------------------ worker (runs in every process)


def worker(args: argparse.Namespace) -> int:
    from scalelib import distributed

    info = distributed.initialize(args.local_devices)
    if args.startup:
        return 0
    import jax

    from scalelib.parallel import selfcheck

    table = selfcheck.benchmarks(info.device_count, info.num_processes)
    for name in args.schemes or list(table):
        step, inputs = table[name]()
        jax.block_until_ready(step(*inputs))  # compiled already; one warm-up run
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            jax.block_until_ready(step(*inputs))
            times.append(time.perf_counter() - start)
        if info.process_id == 0:
            print(json.dumps({"scheme": name, "median_s": statistics.median(times)}), flush=True)
    return 0


# ------------------------------------------------------------------ driver


def _rows(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        line = line.split("] ", 1)[1] if line.startswith("[") else line
        if line.startswith("{"):
            row = json.loads(line)
            out[row["scheme"]] = row["median_s"]
    return out


def _one_process(extra: list[str]) -> tuple[str, float]:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", MODULE, "--worker", "--local-devices", "8", *extra], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if run.returncode:
        raise RuntimeError(f"one-process worker failed:\n{run.stderr[-3000:]}")
    return run.stdout, time.perf_counter() - start


def _two_processes(extra: list[str]) -> tuple[str, float]:
    from scalelib import launch

    out, err = io.StringIO(), io.StringIO()
    result = launch.launch(["-m", MODULE, "--worker", *extra], 2, 4, timeout_s=1800, out=out, err=err)
    if result.returncode:
        raise RuntimeError(f"two-process worker failed:\n{err.getvalue()[-3000:]}")
    return out.getvalue(), result.elapsed_s


FAULT = """
import sys, time
from scalelib import distributed
info = distributed.initialize()
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from scalelib import compat
mesh = compat.make_mesh((jax.device_count(),), ("d",))
x = distributed.from_host(np.arange(8.0), NamedSharding(mesh, P("d")))
total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))
distributed.to_host(total(x))
if info.process_id == 1:
    if sys.argv[1] == "raise":
        raise RuntimeError("fails on purpose")
    time.sleep(600)
distributed.to_host(total(2 * x))
"""


def fault_rows(hang_timeout_s: float = 10.0) -> list[tuple[str, float, float]]:
    """(fault, whole run s, s from noticing the fault until every process had ended)."""
    from scalelib import launch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "fault.py"
        script.write_text(FAULT)
        for mode, timeout_s in (("raise", 600.0), ("hang", hang_timeout_s)):
            result = launch.launch([str(script), mode], 2, 4, timeout_s=timeout_s, out=io.StringIO(),
                                   err=io.StringIO())
            rows.append((f"rank 1 {'raises' if mode == 'raise' else f'hangs (--timeout {timeout_s:g})'}",
                         result.elapsed_s, result.stop_s))
    return rows


def report(schemes: list[str] | None = None) -> None:
    extra = ["--steps", *(schemes or [])]
    two_out, _ = _two_processes(extra)
    one_out, _ = _one_process(extra)
    two, one = _rows(two_out), _rows(one_out)
    print("training step, 2 processes x 4 devices against 1 process x 8 devices (median of "
          f"{REPEATS}; the selfcheck's models and meshes)")
    print(f"{'scheme':34s} {'2x4 (ms)':>9s} {'1x8 (ms)':>9s} {'ratio':>6s}")
    for name in one:
        print(f"{name:34s} {two[name] * 1e3:9.2f} {one[name] * 1e3:9.2f} {two[name] / one[name]:6.2f}", flush=True)
    _, t_two = _two_processes(["--startup"])
    _, t_one = _one_process(["--startup"])
    print("\nstart-up: an empty job (import JAX, join, exit)")
    print(f"  scalelib.launch, 2 processes x 4 devices: {t_two:.2f} s; one plain process x 8 devices: {t_one:.2f} s; "
          f"ratio {t_two / t_one:.2f}")
    print("\nending a run after a fault (2 x 4)")
    for fault, total, stop in fault_rows():
        print(f"  {fault:32s} run {total:6.2f} s, all processes ended {stop:.2f} s after the launcher noticed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    parser.add_argument("--worker", action="store_true", help="run as one process of the job (internal)")
    parser.add_argument("--steps", action="store_true", help="time each scheme's step")
    parser.add_argument("--startup", action="store_true", help="only join and exit")
    parser.add_argument("--local-devices", type=int, default=None)
    parser.add_argument("schemes", nargs="*")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    report(args.schemes or None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
