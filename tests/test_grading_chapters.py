"""Grading end to end for every chapter: the solution earns full marks, the untouched notebook zero.

Chapter 1 has a fuller scenario (one wrong answer, an invalid file) in test_grading.py.
"""

import shutil

import nbformat
import pytest

from autograder import course, grade
from tests.notebook_answers import answered

pytestmark = pytest.mark.grading

CHAPTERS = [c for c in course.chapter_names() if not c.startswith("01_")]


def exercise_count(chapter):
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    return sum(bool(c.metadata.get("nbgrader", {}).get("grade")) for c in nb.cells)


@pytest.fixture(scope="module", params=CHAPTERS)
def graded(request, tmp_path_factory):
    chapter = request.param
    tmp = tmp_path_factory.mktemp(f"grading-{chapter}")
    subs = tmp / "subs"
    (subs / "bob").mkdir(parents=True)
    nbformat.write(answered(chapter), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{chapter}.ipynb", subs / "bob" / f"{chapter}.ipynb")  # untouched
    return chapter, {r.student: r for r in grade.grade(subs, chapter, tmp / "out")}


def test_full_marks_for_the_solution(graded):
    chapter, results = graded
    alice = results["alice"]
    assert alice.status == "graded", (chapter, alice.detail)
    assert alice.score == alice.max_score > 0, (chapter, alice.exercises)
    assert len(alice.exercises) == exercise_count(chapter)


def test_untouched_notebook_scores_zero(graded):
    chapter, results = graded
    bob = results["bob"]
    assert bob.status == "graded" and bob.score == 0, (chapter, bob.exercises)
    assert bob.exercises and all(v == 0 for v in bob.exercises.values())
