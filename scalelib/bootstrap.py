"""Install scalelib where it is missing (Colab), keeping the JAX the runtime already has.

Every chapter's set-up cell carries a copy of :func:`install_scalelib` (``python -m autograder release`` stamps
it in from this file, folded, so a student reads one title line). In Colab scalelib is not installed yet, so that
part cannot come from scalelib's wheel: it uses the standard library only and imports inside the function, so
that its source alone runs. It installs scalelib without its dependencies, then calls
:func:`install_requirements` from the freshly installed package. Locally (``course.py lab``) scalelib is
installed and the cell calls neither.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from typing import Any, Callable, Sequence


def install_scalelib(source: str, folder: str = ".", run: Callable[..., Any] | None = None,
                     say: Callable[[str], Any] = print) -> None:
    """Install scalelib from the newest ``scalelib-*.whl`` in ``folder`` (uploaded next to the notebook), else
    from ``source`` (the pip requirement the release stamped); neither, or pip failing: an error whose few lines
    say what to do (IPython prints them without a traceback). ``run`` is ``subprocess.run`` (a fake in tests)."""
    import glob
    import importlib
    import os
    import subprocess
    import sys

    class SetupError(Exception):
        def _render_traceback_(self) -> list:  # IPython prints these lines instead of a traceback
            return ["\x1b[1;31mscalelib is not installed, so this chapter cannot run yet.\x1b[0m", *self.args]

    wheels = sorted(glob.glob(os.path.join(folder, "scalelib-*.whl")))  # a wheel uploaded next to the notebook wins
    chosen = wheels[-1] if wheels else source
    if not chosen:
        raise SetupError("This copy of the chapter does not say where to install scalelib from. Either open the",
                         "chapter from your course's link, or upload scalelib's wheel (scalelib-*.whl, from your",
                         "instructor) to this notebook's folder; then run this cell again.")
    say(f"installing scalelib from {chosen} ...")
    pip = (run or subprocess.run)([sys.executable, "-m", "pip", "install", "-q", "--no-deps", chosen],
                                  capture_output=True, text=True)
    if pip.returncode != 0:
        raise SetupError(f"Installing it from {chosen} failed. pip's last words:",
                         *["    " + line for line in (pip.stderr or "").strip().splitlines()[-3:]],
                         "Ask your instructor for the course link, or upload scalelib's wheel (scalelib-*.whl)",
                         "to this notebook's folder; then run this cell again.")
    importlib.invalidate_caches()
    from scalelib.bootstrap import install_requirements

    install_requirements(run=run, say=say)


class RequirementsError(RuntimeError):
    """pip could not install a requirement scalelib needs; the lines say which and what to do."""

    def _render_traceback_(self) -> list:  # IPython prints these lines instead of a traceback
        return ["\x1b[1;31mscalelib is installed, but something it needs is not.\x1b[0m", *self.args]


def declared_requirements(requires: Sequence[str] | None = None) -> dict[str, str]:
    """scalelib's requirements outside its extras, as name -> version range, e.g. {"jax": ">=0.7.2,<0.11"}."""
    wanted = {}
    for line in requires if requires is not None else (importlib.metadata.requires("scalelib") or []):
        if "extra==" in line.replace(" ", "").replace("'", '"').replace('"', ""):
            continue
        req = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[[^]]*\])?\s*\(?([^;)]*)", line)
        if req is not None:
            parts = [p for p in req.group(2).replace(" ", "").split(",") if p]
            wanted[req.group(1).lower()] = ",".join(sorted(parts, key=lambda p: not p.startswith(">")))
    return wanted


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


_COMPARE: dict[str, Callable[[tuple, tuple], bool]] = {
    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


def within(version: str, spec: str) -> bool:
    """Whether release ``version`` ("0.7.2") meets ``spec`` (">=0.7.2,<0.11"), comparing release numbers only."""
    have = _release(version)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        op = re.match(r"[<>=!]+", part)
        if op is None or op.group(0) not in _COMPARE or not _COMPARE[op.group(0)](have, _release(part[op.end():])):
            return False
    return True


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def install_requirements(run: Callable[..., Any] | None = None, say: Callable[[str], Any] = print,
                         requires: Sequence[str] | None = None,
                         version_of: Callable[[str], str | None] = installed_version) -> list[str]:
    """Install those of scalelib's requirements the runtime lacks, and nothing else; returns what was installed.

    A requirement already installed is kept whatever its version, so pip never replaces (for example,
    downgrades) the JAX a runtime ships, a large download that can break an accelerator runtime. One line says
    which JAX is in use and which the course was tested with.
    """
    wanted = declared_requirements(requires)
    missing = [f"{name}{spec}" for name, spec in wanted.items() if version_of(name) is None]
    if missing:
        say(f"installing what scalelib needs and this runtime lacks: {', '.join(missing)} ...")
        pip = (run or subprocess.run)([sys.executable, "-m", "pip", "install", "-q", *missing],
                                      capture_output=True, text=True)
        if pip.returncode != 0:
            raise RequirementsError(f"Installing {', '.join(missing)} failed. pip's last words:",
                                    *["    " + line for line in (pip.stderr or "").strip().splitlines()[-3:]],
                                    "Install them yourself (pip install ...), then run this cell again.")
        importlib.invalidate_caches()
    jax, tested = version_of("jax"), wanted.get("jax", "")
    if jax is not None and not within(jax, tested):
        say(f"scalelib is installed; this runtime's jax {jax} is kept, but the course was tested with jax{tested}")
    else:
        say(f"scalelib is installed; jax {jax} (the course was tested with jax{tested})")
    return missing
