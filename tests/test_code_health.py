"""Code health: ruff (lint) and mypy (types) report nothing on the library and the set-up script.

Both tools are pinned in .ci/constraints*.txt and configured in pyproject.toml ([tool.ruff],
[tool.mypy]). ``CHECKED`` lists what they check: adding a package is one line. The checks run in the
current suite only (marker ``health``): the floor's older JAX has other type stubs, and a type fact
holds for one JAX at a time.
"""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKED = [
    "scalelib",
    "course.py",
    "autograder",
]

pytestmark = pytest.mark.health


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args, *CHECKED], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_reports_nothing():
    out = _run("ruff", "check", "--no-cache")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_reports_nothing():
    out = _run("mypy")
    assert out.returncode == 0, out.stdout + out.stderr
