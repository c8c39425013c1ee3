"""Grading end to end for chapters 2 and 3: the solution earns full marks, the untouched notebook zero."""

import re
import shutil

import nbformat
import pytest

from autograder import course, grade

pytestmark = pytest.mark.grading

CHAPTERS = ["02_tpus", "03_sharding"]


def _solution_cells(nb):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def _answered(chapter):
    """The student notebook with every solution cell filled in from solutions/."""
    student = nbformat.read(course.CHAPTERS / f"{chapter}.ipynb", as_version=4)
    solved = _solution_cells(nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4))
    for gid, cell in _solution_cells(student).items():
        cell.source = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", solved[gid].source, flags=re.M)
    return student


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    chapter = request.param
    tmp = tmp_path_factory.mktemp(f"grading-{chapter}")
    subs = tmp / "subs"
    (subs / "bob").mkdir(parents=True)
    nbformat.write(_answered(chapter), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{chapter}.ipynb", subs / "bob" / f"{chapter}.ipynb")  # untouched
    return chapter, {r.student: r for r in grade.grade(subs, chapter, tmp / "out")}


def test_full_marks_for_the_solution(graded):
    chapter, results = graded
    alice = results["alice"]
    assert alice.status == "graded", (chapter, alice.detail)
    assert alice.score == alice.max_score > 0, (chapter, alice.exercises)


def test_untouched_notebook_scores_zero(graded):
    chapter, results = graded
    bob = results["bob"]
    assert bob.status == "graded" and bob.score == 0, (chapter, bob.exercises)
    assert bob.exercises and all(v == 0 for v in bob.exercises.values())
