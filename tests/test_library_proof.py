"""The scalelib a grading kernel imports is the code the grader judges with, or nothing is graded (issue 20, item 1).

The mismatch is built as it happened: the environment installs scalelib (editable) from this checkout, and the
grader runs from a second checkout (a copy in a temporary folder, started there, so its own scalelib comes first).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import course
from autograder.kernel import library_proof
from autograder.library import surface
from autograder.sandbox import probes

SANDBOXED = not probes.available()


def _checkout(dest: Path) -> Path:
    for part in ("autograder", "scalelib", "solutions"):
        shutil.copytree(course.ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(course.ROOT / "pyproject.toml", dest)
    return dest


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    return _checkout(tmp_path_factory.mktemp("second") / "checkout")


def test_the_normal_set_up_passes():
    ok, detail = library_proof.doctor()
    assert ok, detail
    assert str(surface.library_root()) in detail


def test_a_changed_file_is_found_by_its_hash(tmp_path, monkeypatch):
    """The grader judges with a copy that differs in one file from what the kernels import: refused, naming both."""
    grader_copy = tmp_path / "other" / "scalelib"
    shutil.copytree(surface.library_root(), grader_copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert library_proof.digest(str(grader_copy)) == library_proof.digest(str(surface.library_root()))
    with (grader_copy / "roofline.py").open("a") as f:
        f.write("\n# one changed line\n")
    monkeypatch.setattr(library_proof.surface, "library_root", lambda: grader_copy)
    problems = library_proof.check({"kernels with all of scalelib": None}, SANDBOXED, tmp_path / "scratch")
    assert len(problems) == 1
    assert f"kernels import {course.ROOT / 'scalelib'} (scalelib 0.1.0" in problems[0]
    assert f"the grader judges with {grader_copy} (scalelib 0.1.0" in problems[0]
    with pytest.raises(library_proof.LibraryMismatch, match="refusing to grade"):
        library_proof.verify({"kernels with all of scalelib": None}, SANDBOXED)


@pytest.mark.skipif(not SANDBOXED, reason="no sandbox here: kernels with a part of scalelib are not started")
def test_doctor_and_grade_refuse_a_second_checkout(second, tmp_path):
    """The environment's scalelib is this checkout; the grader runs from another one. A sandboxed kernel would find
    no scalelib at all (every answer 0, as in the issue): doctor fails and grade refuses, saying what to do."""
    env_python = sys.executable
    doctor = subprocess.run([env_python, "-m", "autograder", "doctor"], cwd=second, capture_output=True, text=True,
                            timeout=300, check=False)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    line = next(x for x in doctor.stdout.splitlines() if "kernels' scalelib" in x)
    assert line.startswith("FAIL") and "No module named 'scalelib'" in line
    assert f"imports scalelib from {course.ROOT / 'scalelib'}" in line
    assert f"the grader runs scalelib from {second / 'scalelib'}" in line and f"pip install -e {second}" in line
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(course.CHAPTERS / "01_rooflines.ipynb", subs / "alice.ipynb")
    out = tmp_path / "out"
    run = subprocess.run([env_python, "-m", "autograder", "grade", str(subs), "--chapter", "01", "--out", str(out),
                          "--workers", "1"], cwd=second, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "refusing to grade: the scalelib a grading kernel imports is not the code the grader" in run.stderr
    assert f"the part of {second / 'scalelib'} these kernels may use" in run.stderr
    assert not (out / "grades.csv").exists() and not list((out / "results").glob("*.json"))
