"""Grading end to end for chapter 5: the solution earns full marks, the untouched notebook zero."""

import re
import shutil

import nbformat
import pytest

from autograder import course, grade

pytestmark = pytest.mark.grading

CHAPTER = "05_training"


def _solution_cells(nb):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def _answered():
    """The student notebook with every solution cell filled in from solutions/."""
    student = nbformat.read(course.CHAPTERS / f"{CHAPTER}.ipynb", as_version=4)
    solved = _solution_cells(nbformat.read(course.SOLUTIONS / f"{CHAPTER}.ipynb", as_version=4))
    for gid, cell in _solution_cells(student).items():
        cell.source = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", solved[gid].source, flags=re.M)
    return student


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading-ch05")
    subs = tmp / "subs"
    (subs / "bob").mkdir(parents=True)
    nbformat.write(_answered(), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{CHAPTER}.ipynb", subs / "bob" / f"{CHAPTER}.ipynb")  # untouched
    return {r.student: r for r in grade.grade(subs, CHAPTER, tmp / "out")}


def test_full_marks_for_the_solution(graded):
    alice = graded["alice"]
    assert alice.status == "graded", alice.detail
    assert alice.score == alice.max_score > 0, alice.exercises
    assert len(alice.exercises) == 14


def test_untouched_notebook_scores_zero(graded):
    bob = graded["bob"]
    assert bob.status == "graded" and bob.score == 0, bob.exercises
    assert bob.exercises and all(v == 0 for v in bob.exercises.values())
