"""Grading chapter 1 end to end: full marks, zero, exactly one lost exercise, an invalid file."""

import csv
import shutil
import time
import zipfile

import nbformat
import pytest

from autograder import course, grade, report
from tests.notebook_answers import answered, delegating

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


# names as Canvas ("Last, First") and as people ("First Last") write them; nbgrader's formgrader shows them
ROSTER = """student,name,email
alice,"Liddell, Alice",alice@example.org
bob,Bob Marley,bob@example.org
carol,"Ann Duffy, Carol",
dave,Dave,
delegator,Del Egator,
delegator_open,,
"""


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
    archive = tmp / "subs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in subs.rglob("*.ipynb"):
            zf.write(p, p.relative_to(subs))
    roster = tmp / "roster.csv"
    roster.write_text(ROSTER, encoding="utf-8")
    out = tmp / "out"
    results = {r.student: r for r in grade.grade(archive, CHAPTER, out, roster=roster,
                                                 unrestricted=frozenset({"delegator_open"}))}
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


def test_formgrader_shows_each_graded_notebook_in_a_real_browser(graded, tmp_path):
    """Issue 20, item 6: nbgrader's formgrader, served by `jupyter server` from the course folder `grade` wrote and
    driven in Chromium, lists every submission with the roster's names, opens a student's graded notebook with
    its scores, comments and code, and takes a manual score into the gradebook. Screenshots: /tmp/formgrader/."""
    import json
    from pathlib import Path

    from nbgrader.api import Gradebook

    from autograder import align
    from tests import formgrader_browser

    sync_api = formgrader_browser.browser_or_skip()
    results, _, out = graded
    course_dir = out / "nbgrader"
    ch = align.load_chapter(course.SOLUTIONS / f"{CHAPTER}.ipynb")
    submitted = sorted(s for s, r in results.items() if r.status != "missing")
    shown = "".join(c.source for c in nbformat.read(course.CHAPTERS / f"{CHAPTER}.ipynb", as_version=4).cells)
    shown += "".join(e.answer_source for e in ch.exercises.values())
    hidden = {line.strip() for ex in ch.exercises.values()  # lines only the hidden tests have
              for line in ex.test_source.split("### BEGIN HIDDEN TESTS", 1)[1].splitlines()
              if len(line.strip()) > 12 and line.strip() not in shown}
    assert hidden
    for s in submitted:  # nbgrader's layout, each with the submission's time
        for kind in ("submitted", "autograded"):
            folder = course_dir / kind / s / CHAPTER
            assert (folder / f"{CHAPTER}.ipynb").is_file() and (folder / "timestamp.txt").is_file(), (kind, s)
        graded_nb = json.loads((course_dir / "autograded" / s / CHAPTER / f"{CHAPTER}.ipynb").read_text())
        text = json.dumps(graded_nb) + "".join(align.source_of(c) + json.dumps(c.get("outputs")) for c in graded_nb["cells"])
        assert not [line for line in hidden if line in text], s
    released = json.loads((course_dir / "release" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    copy = json.loads((course_dir / "autograded" / "alice" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    ids = [(c["id"], c["metadata"].get("nbgrader")) for c in released["cells"]]
    assert [(c["id"], c["metadata"].get("nbgrader")) for c in copy["cells"][1:]] == ids  # as the gradebook knows them

    url = f"sqlite:///{course_dir / 'gradebook.db'}"
    with Gradebook(url) as gb:
        alice_nb = gb.find_submission_notebook(CHAPTER, CHAPTER, "alice").id
        carol_nb = gb.find_submission_notebook(CHAPTER, CHAPTER, "carol").id
    first = next(iter(ch.exercises))
    shots = Path("/tmp/formgrader")
    shots.mkdir(exist_ok=True)
    expect = sync_api.expect
    with formgrader_browser.jupyter_server(course_dir, tmp_path / "jupyter.log") as (base, token), \
            formgrader_browser.chromium_page(sync_api) as page:
        page.goto(f"{base}/formgrader?token={token}")  # "Manage Assignments"
        row = page.locator("tr", has_text=CHAPTER)
        expect(row.locator(".num-submissions")).to_have_text(str(len(submitted)))
        assert page.locator("#warning-exchange").count() == 0 and page.locator("#warning-course-id").count() == 0
        page.screenshot(path=str(shots / "1-assignments.png"), full_page=True)

        page.goto(f"{base}/formgrader/manage_submissions/{CHAPTER}")
        expect(page.locator("td.student-name", has_text="Liddell, Alice")).to_have_count(1)
        expect(page.locator("td.student-name")).to_have_count(len(submitted))
        names = page.locator("td.student-name").all_inner_texts()
        assert "Ann Duffy, Carol" in names and not [n for n in names if "None" in n], names
        page.screenshot(path=str(shots / "2-submissions.png"), full_page=True)

        page.goto(f"{base}/formgrader/submissions/{alice_nb}/")  # alice's graded notebook
        points = ch.exercises[first].points
        expect(page.locator(f'input.score[id="{first}"]')).to_have_attribute("placeholder", f"{points:g}")
        expect(page.locator(".output_area", has_text=f"{points:g} / {points:g} points: all checks passed")).not_to_have_count(0)
        page.screenshot(path=str(shots / "3-alice-graded.png"), full_page=True)

        page.goto(f"{base}/formgrader/submissions/{carol_nb}/")  # the exercise carol lost, its reason, her code
        score = page.locator(f'input.score[id="{WRONG}"]')
        expect(score).to_have_attribute("placeholder", "0")
        comment = page.locator(f'textarea[id="{WRONG}-answer-comment"]')
        assert "critical batch = " in (comment.get_attribute("placeholder") or "")
        expect(page.locator(".nbgrader_cell", has_text="/ 3")).not_to_have_count(0)
        score.fill("1")
        score.press("Tab")  # formgrader saves a score when it changes
        deadline = time.monotonic() + 20
        while True:
            with Gradebook(url) as gb:
                manual = gb.find_grade(WRONG, CHAPTER, CHAPTER, "carol").manual_score
            if manual == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert manual == 1
        page.screenshot(path=str(shots / "4-carol-manual-score.png"), full_page=True)
