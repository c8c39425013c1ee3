#!/usr/bin/env python3
"""Set up and run the course with nothing but Python 3.10+ (standard library only).

    python3 course.py lab    # make .venv, install scalelib + JupyterLab, open chapters/
    python3 course.py test   # make .venv and .venv-floor, install the pinned test sets, run the whole suite

`test` runs two suites one after the other and fails if either fails:
  current: everything (unit tests, book answers, grading end to end, every solution notebook) in .venv,
           on today's JAX (.ci/constraints.txt);
  floor:   the library tests and every solution notebook again in .venv-floor, on the lowest JAX the
           package declares, as Colab ships it (.ci/constraints-floor.txt). Grading runs on one version.
Extra arguments after `test` go to pytest in both suites; `--suite current` or `--suite floor` (first) runs one.
Each environment is refreshed when pyproject.toml or its constraints file changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
BIN_DIR = "Scripts" if os.name == "nt" else "bin"


@dataclass(frozen=True)
class Env:
    name: str
    path: Path
    constraints: Path

    @property
    def bin(self) -> Path:
        return self.path / BIN_DIR

    @property
    def python(self) -> Path:
        return self.bin / ("python.exe" if os.name == "nt" else "python")


CURRENT = Env("current", ROOT / ".venv", ROOT / ".ci" / "constraints.txt")
FLOOR = Env("floor", ROOT / ".venv-floor", ROOT / ".ci" / "constraints-floor.txt")

# Two workers; each file (and each notebook) stays on one worker.
PYTEST_BASE = ["-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--nbval-lax"]
SUITES = {
    CURRENT.name: (CURRENT, [*PYTEST_BASE, "tests", "solutions"]),
    # Grading tests (marked `grading`) exercise the instructor's tooling, which does not depend on JAX;
    # lint and type checks (marked `health`) hold for one JAX's type stubs, today's.
    FLOOR.name: (FLOOR, [*PYTEST_BASE, "-m", "not grading and not health", "tests", "solutions"]),
}


def run(cmd: list, **kw: Any) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def ensure_env(env: Env, extra: str, pinned: bool) -> None:
    """Create ``env`` and install scalelib[extra]; skip when nothing it depends on changed."""
    if sys.version_info < (3, 10):  # noqa: UP036  (this file runs under whatever python3 the user has)
        raise SystemExit(f"Python 3.10 or newer is needed; this is {sys.version.split()[0]}")
    inputs = [ROOT / "pyproject.toml"] + ([env.constraints] if pinned else [])
    stamp_value = hashlib.sha256(b"".join(p.read_bytes() for p in inputs) + extra.encode()).hexdigest()
    stamp = env.path / f".installed-{extra}"
    if stamp.exists() and stamp.read_text() == stamp_value and env.python.exists():
        return
    if not env.python.exists():
        print(f"creating {env.path.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(env.path)
    run([env.python, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    cmd = [env.python, "-m", "pip", "install", "-q", "-e", f".[{extra}]"]
    if pinned:
        cmd[4:4] = ["-c", env.constraints]
    run(cmd)
    stamp.write_text(stamp_value)


def run_suite(name: str, pytest_args: list[str]) -> tuple[int, float]:
    env, args = SUITES[name]
    ensure_env(env, "test", pinned=True)
    print(f"\n=== {name} suite ({env.path.name}, {env.constraints.name}) ===", flush=True)
    environ = dict(os.environ, PATH=f"{env.bin}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    start = time.perf_counter()
    code = subprocess.run([str(env.python), "-m", "pytest", *args, *pytest_args], cwd=ROOT, env=environ).returncode
    return code, time.perf_counter() - start


def test(argv: list[str]) -> int:
    names = list(SUITES)
    if argv[:1] == ["--suite"] and len(argv) > 1:
        if argv[1] not in SUITES:
            print(f"--suite takes one of {', '.join(SUITES)}, got {argv[1]!r}")
            return 2
        names, argv = [argv[1]], argv[2:]
    results = {name: run_suite(name, argv) for name in names}
    if argv:  # a filter (-k, a path) may select nothing in one suite: pytest's 5, "no tests collected"
        results = {n: (0 if c == 5 else c, s) for n, (c, s) in results.items()}
    print("\n" + "; ".join(f"{n} suite: {'passed' if c == 0 else f'FAILED (exit {c})'} in {s:.0f} s"
                           for n, (c, s) in results.items()), flush=True)
    return next((c for c, _ in results.values() if c != 0), 0)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test"):
        print(__doc__)
        return 2
    if argv[0] == "lab":
        ensure_env(CURRENT, "course", pinned=False)
        root_flag = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers run as root
        py = CURRENT.python
        os.execv(str(py), [str(py), "-m", "jupyter", "lab", str(ROOT / "chapters"), *root_flag, *argv[1:]])
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
