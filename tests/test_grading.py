"""Grading chapter 1 end to end: full marks, zero, exactly one lost exercise, an invalid file."""

import csv
import shutil
import zipfile

import nbformat
import pytest

from autograder import course, grade, report
from tests.notebook_answers import answered, delegating, second_answers
from tests.test_grading_chapters import check_second_answers_score_full

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
    nbformat.write(delegating(CHAPTER), subs / "delegator.ipynb")
    nbformat.write(delegating(CHAPTER), subs / "delegator_open.ipynb")  # graded with all of scalelib reachable
    nbformat.write(second_answers(CHAPTER), subs / "second.ipynb")  # written differently (tests/second_answers/)
    archive = tmp / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in subs.rglob("*.ipynb"):
            zf.write(p, p.relative_to(subs))
    out = tmp / "out"
    results = {r.student: r for r in grade.grade(archive, CHAPTER, out, unrestricted=frozenset({"delegator_open"}))}
    rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open())}
    return results, rows, out


def test_full_marks_for_a_complete_answer(graded):
    results, rows, _ = graded
    assert results["alice"].status == "graded"
    assert results["alice"].score == results["alice"].max_score > 0


def test_the_instructors_notebook_runs_cleanly_in_the_grader(graded):
    _, _, out = graded
    assert not (out / "logs" / report.INSTRUCTOR_LOG).exists(), (out / "logs" / report.INSTRUCTOR_LOG).read_text()


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


def test_results_reach_the_nbgrader_gradebook_and_export(graded):
    """formgrader and `nbgrader export` read gradebook.db: it must hold the same scores as grades.csv."""
    import subprocess
    import sys
    from pathlib import Path

    from nbgrader.api import Gradebook

    results, rows, out = graded
    course_dir = out / "nbgrader"
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        for student, r in results.items():
            sub = gb.find_submission(CHAPTER, student)
            assert sub.score == pytest.approx(r.score)
            assert sub.max_score == pytest.approx(r.max_score)
            assert not sub.needs_manual_grade
        carol = gb.find_comment(f"{WRONG}-answer", CHAPTER, CHAPTER, "carol")
        assert "ExerciseError" in carol.auto_comment
    nbgrader = Path(sys.executable).parent / "nbgrader"
    subprocess.run([str(nbgrader), "export", "--to", str(out / "export.csv")], cwd=course_dir, check=True,
                   capture_output=True)
    exported = {row["student_id"]: row for row in csv.DictReader((out / "export.csv").open())}
    assert set(exported) == set(results)
    for student, r in results.items():
        assert float(exported[student]["score"]) == pytest.approx(r.score)
        assert float(rows[student]["score"]) == pytest.approx(r.score)


def test_regrading_keeps_a_manual_score_and_flags_it(graded):
    from nbgrader.api import Gradebook

    from autograder import gradebook

    results, _, out = graded
    course_dir = out / "nbgrader"
    url = f"sqlite:///{course_dir / 'gradebook.db'}"
    with Gradebook(url) as gb:
        g = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol")
        g.manual_score = 0.5
        gb.db.commit()
    gradebook.write(course_dir, CHAPTER, list(results.values()), course.SOLUTIONS)
    with Gradebook(url) as gb:
        g = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol")
        assert g.manual_score == 0.5 and g.auto_score == 0 and g.needs_manual_grade
        assert gb.find_grade(WRONG, CHAPTER, CHAPTER, "alice").auto_score == results["alice"].exercises[WRONG]


def test_answers_that_delegate_to_the_library_earn_nothing(graded):
    """Chapter 1's part of the delegation proof (the other chapters' is in test_grading_chapters.py)."""
    results, rows, _ = graded
    assert not {e: v for e, v in results["delegator"].exercises.items() if v}
    assert "not available while this exercise is graded" in results["delegator"].messages["ch01-roofline-bounds"]
    assert results["delegator_open"].score == results["delegator_open"].max_score



def test_a_second_honest_answer_scores_full_marks(graded):
    """Chapter 1's part of the parity proof (the other chapters' is in test_grading_chapters.py): among others,
    critical_intensity_of calls a method of the Chip it is handed."""
    results, _, _ = graded
    check_second_answers_score_full(CHAPTER, results)


def test_feedback_a_student_understands(graded):
    """Issue #10: each exercise by title and id; "all checks passed"; a failure's own message; never a line of a
    hidden test; pages a web server can read."""
    import html

    from autograder import align

    results, rows, out = graded
    ch = align.load_chapter(course.SOLUTIONS / f"{CHAPTER}.ipynb")
    alice, carol = ((out / "feedback" / f"{s}.html").read_text() for s in ("alice", "carol"))
    for eid, ex in ch.exercises.items():
        assert ex.title.startswith("Exercise 1.") and f"{html.escape(ex.title)}<br>" in alice and eid in alice
    assert alice.count("all checks passed") == len(ch.exercises)
    assert carol.count("all checks passed") == len(ch.exercises) - 1 and "critical batch = " in carol
    hidden = {line.strip() for ex in ch.exercises.values()
              for line in ex.test_source.split("### BEGIN HIDDEN TESTS", 1)[1].splitlines() if len(line.strip()) > 12}
    for page in (out / "feedback").glob("*.html"):
        text = page.read_text()
        assert not [line for line in hidden if line in text], page.name
        assert page.stat().st_mode & 0o777 == 0o644, page.name
