"""Proof, before grading, that the scalelib a grading kernel imports is the code the grader judges with.

The grader judges with the scalelib its own process imports (expected values, the surfaces it writes from those
files). A kernel imports whatever *its* interpreter resolves: with an environment whose scalelib is an editable
install of another checkout, that is the other checkout, which a sandboxed kernel does not even have in its file
system ("No module named 'scalelib'": correct answers score 0), and an unsandboxed one runs other code. So, for
every kind of kernel a run starts (each surface's library, all of scalelib, or no sandbox), :func:`check` starts
the kernel's interpreter exactly as a kernel is started (same launcher, sandbox configuration, environment and
working folder), has it locate scalelib *without importing it* and hash the files it would import, and compares
that with the files the grader means it to get (version and a sha256 of every ``.py`` file's path and content).
``python -m autograder doctor`` runs the same check.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autograder.kernel.environment import kernel_env, kernel_sandbox
from autograder.library import surface
from autograder.sandbox import probes

_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def digest(folder: str) -> str:
    """sha256 of a package folder: every ``.py`` file's relative path and bytes, in path order (caches ignored).
    Also run, as source, inside the kernel's interpreter: standard library only."""
    import hashlib
    import os

    h = hashlib.sha256()
    files = []
    for base, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(base, n) for n in names if n.endswith(".py")]
    for path in sorted(files):
        with open(path, "rb") as f:
            data = f.read()
        h.update(os.path.relpath(path, folder).encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


_PROBE = inspect.getsource(digest) + r'''
import importlib.util, json, os, re
out = {"where": "", "version": "", "digest": "", "error": ""}
try:
    spec = importlib.util.find_spec("scalelib")
    if spec is None or not spec.origin:
        out["error"] = "No module named 'scalelib'"
    else:
        folder = os.path.dirname(os.path.realpath(spec.origin))
        out["where"] = folder
        out["digest"] = digest(folder)
        with open(spec.origin, encoding="utf-8") as f:
            m = re.search(VERSION_PATTERN, f.read(), re.MULTILINE)
        out["version"] = m.group(1) if m else ""
except Exception as err:
    out["error"] = f"{type(err).__name__}: {err}"
print("LIBCHECK " + json.dumps(out))
'''


@dataclass(frozen=True)
class Seen:
    """A scalelib as one side sees it: its folder, version (``__version__``), files' sha256, or why none."""

    where: str
    version: str = ""
    digest: str = ""
    error: str = ""

    def describe(self) -> str:
        if self.error:
            return f"{self.where or 'nothing'} ({self.error})"
        return f"{self.where} (scalelib {self.version or '?'}, files sha256 {self.digest[:12]})"


def grader_side(folder: Path) -> Seen:
    """A folder as the grader means a kernel to get it."""
    init = folder / "__init__.py"
    text = init.read_text(encoding="utf-8") if init.is_file() else ""
    m = _VERSION.search(text)
    return Seen(str(folder), m.group(1) if m else "", digest(str(folder)))


def kernel_side(scratch: Path, library: Path | None, sandboxed: bool, timeout_s: float = 120) -> Seen:
    """What a kernel started with ``library`` (a surface's folder, None: the installed scalelib) finds, found by the
    kernel's interpreter in a launch like a kernel's (see ``kernel.KernelSession``)."""
    scratch.mkdir(parents=True, exist_ok=True)
    cfg = kernel_sandbox(scratch, isolate=sandboxed, library=library)
    program = _PROBE.replace("VERSION_PATTERN", repr(_VERSION.pattern))
    cmd = [sys.executable, "-m", "autograder.sandbox", cfg.to_json(), "--", sys.executable, "-c", program]
    try:
        run = subprocess.run(cmd, cwd=scratch, env=kernel_env(scratch, 1), capture_output=True, text=True,
                             timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Seen("", error=f"the kernel's interpreter did not answer in {timeout_s:.0f} s")
    line = next((x for x in run.stdout.splitlines() if x.startswith("LIBCHECK ")), "")
    if not line:
        tail = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        return Seen("", error=f"the kernel's interpreter could not be asked ({tail[:200]})")
    data = json.loads(line[len("LIBCHECK "):])
    return Seen(data["where"], data["version"], data["digest"], data["error"])


def installed(scratch: Path) -> Seen:
    """Where the kernels' interpreter finds scalelib, outside any sandbox (what its environment installs)."""
    return kernel_side(scratch, None, sandboxed=False)


def check(kinds: dict[str, Path | None], sandboxed: bool, scratch: Path) -> list[str]:
    """For each kind of kernel (a label -> its library folder, None for the installed scalelib), whether it would
    import the code the grader judges with; returns one problem per kind that would not ([] when all would)."""
    grader = grader_side(surface.library_root())
    problems = []
    for n, (label, library) in enumerate(kinds.items()):
        want = grader
        if library is not None and sandboxed:  # the kernel gets the part of the grader's files written for it
            part = grader_side(library)
            want = Seen(f"the part of {grader.where} these kernels may use", grader.version, part.digest)
        got = kernel_side(scratch / f"check{n}", library, sandboxed)
        if got.error or got.digest != want.digest:
            problems.append(f"{label}: kernels import {got.describe()}, but the grader judges with {want.describe()}")
    return problems


def advice(scratch: Path) -> str:
    """What to do when :func:`check` finds a difference: which two installations are involved and how to join them."""
    grader = surface.library_root()
    env = installed(scratch)
    where = env.where or "nowhere"
    return (f"The environment the kernels run in ({sys.prefix}) imports scalelib from {where}; the grader runs "
            f"scalelib from {grader}. Install this checkout into that environment (`{sys.executable} -m pip install "
            f"-e {grader.parent}`), or run the grader from the checkout the environment installs"
            f"{f' ({Path(env.where).parent})' if env.where else ''}.")


class LibraryMismatch(SystemExit):
    """A kernel would import other code than the grader judges with: refuse to grade."""

    def __init__(self, problems: list[str], advice: str) -> None:
        super().__init__("refusing to grade: the scalelib a grading kernel imports is not the code the grader "
                         "judges with, so correct answers could score 0.\n" + "\n".join(f"  - {p}" for p in problems)
                         + f"\n{advice}\nRun `python -m autograder doctor` to check again.")
        self.problems = problems


def verify(kinds: dict[str, Path | None], sandboxed: bool) -> None:
    """Raise :class:`LibraryMismatch` unless every kind of kernel imports the grader's code."""
    with tempfile.TemporaryDirectory(prefix="libcheck-") as tmp:
        problems = check(kinds, sandboxed, Path(tmp))
        if problems:
            raise LibraryMismatch(problems, advice(Path(tmp)))


def doctor_kinds(work: Path, sandboxed: bool) -> dict[str, Path | None]:
    """The kinds of kernel ``doctor`` checks: all of scalelib, and (sandboxed) one surface's library."""
    kinds: dict[str, Path | None] = {"kernels with all of scalelib" if sandboxed else "kernels (no sandbox)": None}
    if sandboxed:
        s = surface.closure([surface.Item("scalelib.roofline")])
        kinds["kernels with a part of scalelib (scalelib.roofline)"] = s.write(work / "lib")
    return kinds


def doctor() -> tuple[bool, str]:
    """(ok, detail) for ``python -m autograder doctor``."""
    sandboxed = not probes.available()
    with tempfile.TemporaryDirectory(prefix="libcheck-") as tmp:
        work = Path(tmp)
        try:
            problems = check(doctor_kinds(work, sandboxed), sandboxed, work / "scratch")
            detail = ("; ".join(problems) + ". " + advice(work / "scratch")) if problems else (
                f"kernels import the grader's own scalelib ({surface.library_root()}, files sha256 "
                f"{digest(str(surface.library_root()))[:12]})")
        finally:
            for p in sorted(work.rglob("*"), reverse=True):  # the surface's folder is written read-only
                if p.is_dir():
                    os.chmod(p, 0o755)
    return not problems, detail
