"""Grading chapter 1 end to end: full marks, zero, exactly one lost exercise, an invalid file."""

import csv
import shutil
import zipfile

import nbformat
import pytest

from autograder import course, grade
from tests.notebook_answers import answered

pytestmark = pytest.mark.grading

CHAPTER = "01_rooflines"
WRONG = "ch01-ex1-2-mixed"


def _wrong(gid, src):
    if gid != f"{WRONG}-answer":
        return src
    slipped = src.replace("/ 2", "/ 3")  # an off-by-precision slip
    assert slipped != src
    return slipped


def _answered(wrong=False):
    return answered(CHAPTER, _wrong if wrong else None)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading")
    subs = tmp / "subs"
    (subs / "bob").mkdir(parents=True)
    nbformat.write(_answered(), subs / "alice.ipynb")
    shutil.copy(course.CHAPTERS / f"{CHAPTER}.ipynb", subs / "bob" / f"{CHAPTER}.ipynb")  # untouched
    nbformat.write(_answered(wrong=True), subs / "carol.ipynb")
    (subs / "dave.ipynb").write_text("{ this is not json")
    archive = tmp / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in subs.rglob("*.ipynb"):
            zf.write(p, p.relative_to(subs))
    out = tmp / "out"
    results = {r.student: r for r in grade.grade(archive, CHAPTER, out)}
    rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open())}
    return results, rows, out


def test_full_marks_for_a_complete_answer(graded):
    results, rows, _ = graded
    assert results["alice"].status == "graded"
    assert results["alice"].score == results["alice"].max_score > 0


def test_untouched_notebook_scores_zero(graded):
    results, rows, _ = graded
    assert results["bob"].status == "graded" and results["bob"].score == 0
    assert all(v == 0 for v in results["bob"].exercises.values())


def test_one_wrong_answer_loses_exactly_its_points(graded):
    results, rows, out = graded
    carol, alice = results["carol"], results["alice"]
    lost = {k for k in alice.exercises if carol.exercises[k] != alice.exercises[k]}
    assert lost == {WRONG}
    assert carol.score == alice.score - alice.exercises[WRONG]
    assert float(rows["carol"][WRONG]) == 0
    feedback = (out / "feedback" / "carol.html").read_text()
    assert WRONG in feedback and "ExerciseError" in feedback


def test_invalid_notebook_is_reported_not_fatal(graded):
    results, rows, _ = graded
    assert results["dave"].status == "invalid notebook"
    assert rows["dave"]["score"] == "0"
