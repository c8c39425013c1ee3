#!/usr/bin/env python3
"""Set up and run the course with nothing but Python 3.10+ (standard library only).

    python3 course.py lab    # make .venv, install scalelib + JupyterLab, open chapters/
    python3 course.py test   # make .venv, install the pinned test set, run the whole suite

The virtual environment lives in .venv next to this file and is reused; it is refreshed when
pyproject.toml or .ci/constraints.txt change. Extra arguments after `test` go to pytest.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
CONSTRAINTS = ROOT / ".ci" / "constraints.txt"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")

# The suite: unit tests, book answers, release/grading end to end, and every solution notebook
# executed top to bottom by nbval. Two workers; each notebook stays on one worker.
PYTEST_ARGS = ["-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", "--nbval-lax", "tests", "solutions"]


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT, **kw)


def ensure_env(extra: str, pinned: bool) -> None:
    """Create .venv and install scalelib[extra]; skip when nothing it depends on changed."""
    if sys.version_info < (3, 10):
        raise SystemExit(f"Python 3.10 or newer is needed; this is {sys.version.split()[0]}")
    inputs = [ROOT / "pyproject.toml"] + ([CONSTRAINTS] if pinned else [])
    stamp_value = hashlib.sha256(b"".join(p.read_bytes() for p in inputs) + extra.encode()).hexdigest()
    stamp = VENV / f".installed-{extra}"
    if stamp.exists() and stamp.read_text() == stamp_value and PY.exists():
        return
    if not PY.exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    run([PY, "-m", "pip", "install", "-q", "--upgrade", "pip"])
    cmd = [PY, "-m", "pip", "install", "-q", "-e", f".[{extra}]"]
    if pinned:
        cmd[4:4] = ["-c", CONSTRAINTS]
    run(cmd)
    stamp.write_text(stamp_value)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lab", "test"):
        print(__doc__)
        return 2
    if argv[0] == "lab":
        ensure_env("course", pinned=False)
        root_flag = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers run as root
        os.execv(str(PY), [str(PY), "-m", "jupyter", "lab", str(ROOT / "chapters"), *root_flag, *argv[1:]])
    ensure_env("test", pinned=True)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    return subprocess.run([str(PY), "-m", "pytest", *PYTEST_ARGS, *argv[1:]], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
