#!/usr/bin/env python3
"""Set up and run the course with nothing but Python 3.10+ (standard library only).

    python3 course.py lab    # make .venv, install scalelib + JupyterLab, open your copies of the chapters
    python3 course.py lab --port 8890 --no-browser   # anything after `lab` goes to JupyterLab
    python3 course.py test   # make .venv and .venv-floor, install the pinned test sets, run the whole suite
    python3 course.py instructor   # make .venv with what release, grade and nbgrader's formgrader need (pinned)

`test` runs two suites one after the other and fails if either fails:
  current: unit tests, book answers, grading end to end and every solution notebook in .venv, on
           today's JAX (.ci/constraints.txt);
  floor:   the library tests and every solution notebook again in .venv-floor, on the lowest JAX the
           package declares, as Colab ships it (.ci/constraints-floor.txt), plus every released chapter
           run top to bottom as a student's Run All would. Grading runs on one version.
Extra arguments after `test` go to pytest in both suites; `--suite current` or `--suite floor` (first) runs one.
Each environment is refreshed when pyproject.toml or its constraints file changes.

`lab` opens JupyterLab on work/ (not tracked by git): your own copy of each chapter, made from chapters/
the first time and never overwritten, so `git pull` cannot clash with your answers. Each copy carries
the language metadata this machine's kernel reports, so opening it does not mark it modified.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
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


WORK = ROOT / "work"
CURRENT = Env("current", ROOT / ".venv", ROOT / ".ci" / "constraints.txt")
FLOOR = Env("floor", ROOT / ".venv-floor", ROOT / ".ci" / "constraints-floor.txt")

# Each file (and each notebook) stays on one worker, a few long files split by a parameter, the longest groups first
# (tests/conftest.py). The 15 slowest tests close each suite's summary.
PYTEST_BASE = ["--dist", "loadfile", "--no-loadscope-reorder", "-p", "no:cacheprovider", "--nbval-lax",
               "--durations=15"]
# Workers, for the two cores the suite is sized for. The floor suite's share of tests that mostly wait (a hung rank,
# gloo's fixed 30 s) is large: with two workers a core sat idle for 10 % to 15 % of it, and a third worker fills
# that (two runs, each beside the other: 215 -> 194 s, 208 -> 198 s). The current suite idles less (6 %), and a
# third worker there cost as much CPU as it filled (two pairs: 463 -> 451 s, 496 -> 506 s), so it keeps two.
WORKERS = {CURRENT.name: 2, FLOOR.name: 3}
SUITES = {
    CURRENT.name: (CURRENT, ["-n", str(WORKERS[CURRENT.name]), *PYTEST_BASE, "-m", "not student",
                             "tests", "solutions"]),
    # Grading tests (marked `grading`) exercise the instructor's tooling, which does not depend on JAX;
    # lint and type checks (marked `health`) hold for one JAX's type stubs, today's; the released
    # chapters' Run All (marked `student`) runs on the JAX Colab ships; across processes one scheme
    # shows the floor works there (the `sweep` of every scheme runs in the current suite).
    FLOOR.name: (FLOOR, ["-n", str(WORKERS[FLOOR.name]), *PYTEST_BASE, "-m", "not grading and not health and not sweep",
                         "tests", "solutions"]),
}


def run(cmd: list, **kw: Any) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def ensure_env(env: Env, extra: str, pinned: bool, verbose: bool = False) -> None:
    """Create ``env`` and install scalelib[extra]; skip when nothing it depends on changed.

    Each step says what it does; ``verbose`` also shows pip's own lines (each package as it is collected and
    installed) instead of pip's quiet mode, for a first ``lab`` that would otherwise be silent for a minute.
    """
    if sys.version_info < (3, 10):  # noqa: UP036  (this file runs under whatever python3 the user has)
        raise SystemExit(f"Python 3.10 or newer is needed; this is {sys.version.split()[0]}")
    inputs = [ROOT / "pyproject.toml", ROOT / "setup.py"] + ([env.constraints] if pinned else [])
    stamp_value = hashlib.sha256(b"".join(p.read_bytes() for p in inputs) + extra.encode()).hexdigest()
    stamp = env.path / f".installed-{extra}"
    if stamp.exists() and stamp.read_text() == stamp_value and env.python.exists():
        return
    name = env.path.relative_to(ROOT)
    quiet = [] if verbose else ["-q"]
    create_env(env)
    if pinned:
        install_pinned(env, extra, name)
    else:
        print(f"[2/3] updating pip in {name}", flush=True)
        run([env.python, "-m", "pip", "install", "-q", "--upgrade", "pip"])
        print(f"[3/3] installing scalelib[{extra}] and what it needs into {name} (the first time takes a minute or "
              "two; again only when pyproject.toml changes)", flush=True)
        run([env.python, "-m", "pip", "install", *quiet, "-e", f".[{extra}]"])
    stamp.write_text(stamp_value)


def create_env(env: Env) -> None:
    """Make ``env``'s virtual environment if it is missing. Call it from one thread at a time, with no other thread
    starting processes: it writes the new interpreter and then runs it, and a process forked meanwhile by another
    thread holds that file open for writing until it execs, so running it fails with "Text file busy" (ETXTBSY;
    it once failed a fresh clone's ``test`` that made both environments side by side)."""
    if not env.python.exists():
        print(f"[1/3] creating {env.path.relative_to(ROOT)} (once; later runs reuse it)", flush=True)
        venv.EnvBuilder(with_pip=True).create(env.path)


# A kernel started as the grader starts one, running what every chapter's set-up cell imports: what it loads is
# compiled to bytecode and cached here, since the grader's sandboxed kernels see the environment read-only and
# cannot cache it themselves (each would compile ipykernel, debugpy and JAX again, in memory: a kernel under a
# 400 MB limit died of it).
WARM_KERNEL = """
import tempfile
from jupyter_client.manager import KernelManager
with tempfile.TemporaryDirectory() as folder:
    km = KernelManager(kernel_name="python3", transport="ipc", ip=folder + "/k")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=300)
        # and what compiling a first program imports (jaxlib's MLIR dialects)
        reply = kc.execute_interactive("import jax.numpy, scalelib, matplotlib.pyplot\\n_ = jax.numpy.ones(3) + 1",
                                       timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
"""


def install_pinned(env: Env, extra: str, name: Path) -> None:
    """The pinned set (``env.constraints``) with uv, itself pinned there and installed by pip.

    pip took about 45 s and 40 CPU-s per environment on a 2-core machine, most of it compiling the bytecode of every
    installed module (some 7,800 files); uv installs the same versions in a few seconds without compiling. Python
    compiles a module the first time it is imported and caches it (about 1,700 modules for the whole suite, 6 CPU-s);
    what a kernel imports is compiled here, by starting one (``WARM_KERNEL``).

    uv does not read pip's configuration: where only pip can reach the packages (a mirror set in pip.conf, no
    access to PyPI), uv fails, says why, and pip installs the same set instead, as it did before uv.
    """
    pinned = ["-c", env.constraints, "-e", f".[{extra}]", "pip"]
    print(f"[2/3] installing uv (pinned) into {name}", flush=True)
    try:
        run([env.python, "-m", "pip", "install", "-q", "-c", env.constraints, "uv"])
        print(f"[3/3] installing scalelib[{extra}] and what it needs into {name} at the versions of "
              f"{env.constraints.relative_to(ROOT)}", flush=True)
        # uv hard-links each package's files from its cache (~/.cache/uv) where it can: nothing writes into them
        run([env.bin / "uv", "pip", "install", "-q", "--python", env.python, *pinned])
    except subprocess.CalledProcessError as err:
        print(f"uv could not install them ({err}; its message is above); installing with pip instead (a minute or "
              "two)", flush=True)
        run([env.python, "-m", "pip", "install", "-q", *pinned])
    print(f"compiling what a kernel imports in {name} (one kernel, a few seconds)", flush=True)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(env.python), "-c", WARM_KERNEL], check=True, cwd=ROOT, env=dict(environ, MPLBACKEND="Agg"))


@contextmanager
def compilation_cache(environ: dict[str, str]) -> Iterator[dict[str, str]]:
    """``environ`` with JAX's persistent compilation cache in a new folder that lives for one suite run.

    The suite's processes (workers, notebook kernels, ranks) compile many of the same programs; the first to
    compile one stores it and the others load it. Every program is stored (minimum compile time 0), because most
    of the suite's compiles are small. Measured on this project's 2-core machines, without then with, back to back:
    the current suite 732 -> 627 s (999 -> 841 user-s) on one, 822 -> 783 s (1102 -> 1053 user-s) on a noisier
    other; the floor suite 297 -> 277 s (555 -> 521 user-s); the same tests passing. With every program already
    stored the current suite took 483 s, all passing, so the cost analyses, memory analyses and HLO the tests read
    hold on loaded programs too. The folder is new each run and removed after, so no program outlives the sources
    it was compiled from, and a cache folder the host set is ignored for the same reason.
    The grader's sandboxed kernels get a whitelisted environment (autograder/kernel/environment.py) and never see
    it, nor can they open it (mode 700, owned by whoever runs the suite): a student's code must neither read the
    compiled solutions nor plant programs for others.
    """
    with tempfile.TemporaryDirectory(prefix="scalelib-xla-cache-", ignore_cleanup_errors=True) as folder:
        yield dict(environ, JAX_COMPILATION_CACHE_DIR=folder, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")


def run_suite(name: str, pytest_args: list[str]) -> tuple[int, float]:
    env, args = SUITES[name]
    ensure_env(env, "test", pinned=True)
    print(f"\n=== {name} suite ({env.path.name}, {env.constraints.name}) ===", flush=True)
    # SCALELIB_STRICT_CHECKS: an exercise that still raises its stub fails its visible checks (see
    # scalelib.exercise.visible_checks), so a solution notebook that reaches a stub fails CI.
    environ = dict(os.environ, PATH=f"{env.bin}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg",
                   SCALELIB_STRICT_CHECKS="1")
    # Some hosts set PYTHONDONTWRITEBYTECODE; the suite starts a few hundred Python processes (workers, kernels,
    # ranks, graders) over the same sources, so the first to import a module caches its bytecode (__pycache__,
    # ignored by git) for the rest, and pytest keeps its rewritten test modules for the next worker.
    environ.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    with compilation_cache(environ) as environ:
        code = subprocess.run([str(env.python), "-m", "pytest", *args, *pytest_args], cwd=ROOT, env=environ).returncode
    return code, time.perf_counter() - start


def test(argv: list[str]) -> int:
    names = list(SUITES)
    if argv[:1] == ["--suite"] and len(argv) > 1:
        if argv[1] not in SUITES:
            print(f"--suite takes one of {', '.join(SUITES)}, got {argv[1]!r}")
            return 2
        names, argv = [argv[1]], argv[2:]
    # pip installs on one core: the two environments are made side by side (about 45 s each on a 2-core machine)
    envs = [SUITES[name][0] for name in names]
    for env in envs:  # one after the other (see create_env); the installs below run side by side
        create_env(env)
    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        for made in [pool.submit(ensure_env, env, "test", True) for env in envs]:
            made.result()  # pip's error, if any, after both have finished
    results = {name: run_suite(name, argv) for name in names}
    if argv:  # a filter (-k, a path) may select nothing in one suite: pytest's 5, "no tests collected"
        results = {n: (0 if c == 5 else c, s) for n, (c, s) in results.items()}
    print("\n" + "; ".join(f"{n} suite: {'passed' if c == 0 else f'FAILED (exit {c})'} in {s:.0f} s"
                           for n, (c, s) in results.items()), flush=True)
    return next((c for c, _ in results.values() if c != 0), 0)


def kernel_language_info(env: Env) -> dict:
    """The ``language_info`` JupyterLab writes into a notebook once this environment's kernel starts."""
    code = "import json; from ipykernel.ipkernel import IPythonKernel as K; print(json.dumps(K.language_info))"
    out = subprocess.run([str(env.python), "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def make_work_copies(language_info: dict, chapters: Path = ROOT / "chapters", work: Path = WORK) -> list[str]:
    """Copy each chapter missing from ``work`` there; returns the chapters whose release is newer than a copy."""
    work.mkdir(exist_ok=True)
    newer = []
    for src in sorted(chapters.glob("[0-9][0-9]_*.ipynb")):
        released = hashlib.sha256(src.read_bytes()).hexdigest()
        dst = work / src.name
        if dst.exists():
            try:
                made_from = json.loads(dst.read_text())["metadata"].get("scalelib", {}).get("released_sha256")
            except (ValueError, KeyError, TypeError):
                made_from = None
            if made_from != released:
                newer.append(src.stem)
            continue
        nb = json.loads(src.read_text())
        nb["metadata"]["language_info"] = language_info
        nb["metadata"].setdefault("scalelib", {})["released_sha256"] = released
        dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return newer


def lab_command(python: Path, work: Path, argv: list[str], as_root: bool) -> list[str]:
    """``jupyter lab`` on ``work``, opening its first chapter instead of the Launcher; ``argv`` goes to JupyterLab
    (e.g. ``--port 8890 --no-browser``), after our flags, so a flag given there wins."""
    chapters = sorted(work.glob("[0-9][0-9]_*.ipynb"))
    first = [f"--LabApp.default_url=/lab/tree/{chapters[0].name}"] if chapters else []
    root_flag = ["--allow-root"] if as_root else []  # containers run as root
    return [str(python), "-m", "jupyter", "lab", f"--ServerApp.root_dir={work}", *first, *root_flag, *argv]


def lab(argv: list[str]) -> None:
    ensure_env(CURRENT, "course", pinned=False, verbose=True)
    newer = make_work_copies(kernel_language_info(CURRENT))
    if newer:
        print(f"chapters/ has a newer release of {', '.join(newer)} than your copy in work/; your copy is kept. "
              "To start over from the new one, rename or delete work/<chapter>.ipynb and run this again.")
    print("starting JupyterLab on work/ (your copies of the chapters); stop it with Ctrl-C", flush=True)
    cmd = lab_command(CURRENT.python, WORK, argv, as_root=hasattr(os, "geteuid") and os.geteuid() == 0)
    os.execv(cmd[0], cmd)


INSTRUCTOR_NEXT = """The instructor's environment is ready in .venv (JupyterLab, nbgrader, the grader). Next:
  .venv/bin/python -m autograder release          # chapters/ from solutions/
  .venv/bin/python -m autograder grade SUBMISSIONS --chapter 01_rooflines --out grading-output
  cd grading-output/nbgrader && ../../.venv/bin/jupyter lab    # nbgrader's formgrader: the Nbgrader menu
See README.md, "For instructors"."""


def instructor() -> int:
    """The environment for release, check, grade, merge and nbgrader's formgrader: the course and instructor extras
    at the versions CI tests (.ci/constraints.txt)."""
    ensure_env(CURRENT, "course,instructor", pinned=True)
    print(INSTRUCTOR_NEXT)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test", "instructor"):
        print(__doc__)
        return 2
    if argv[0] == "instructor":
        return instructor()
    if argv[0] == "lab":
        lab(argv[1:])
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
