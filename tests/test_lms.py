"""Gradescope and PrairieLearn (issue 20, item 9): their folders laid out under a temporary root, each platform's real
entry point run (Gradescope on a perfect student, PrairieLearn on a blank one), and the results.json each platform
reads checked field by field for both students."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder import course
from autograder.grading import lms_submission
from autograder.instructor import chapter_model
from autograder.outputs import lms_results
from autograder.results import Status, StudentResult
from tests.notebook_answers import answered

pytestmark = pytest.mark.grading

CH = "01_rooflines"
BUNDLE = course.ROOT / "autograder" / "deploy" / "gradescope"


def _env(root: Path) -> dict:
    return dict(os.environ, SCALELIB_LMS_ROOT=str(root), SCALELIB_COURSE=str(course.ROOT),
                SCALELIB_PYTHON=sys.executable, SCALELIB_CHAPTER=CH)


def _lay_out(root: Path, folder: str, perfect: bool) -> None:
    student = root / folder
    student.mkdir(parents=True)
    if perfect:
        nbformat.write(answered(CH), student / f"{CH}.ipynb")
    else:
        shutil.copy(course.CHAPTERS / f"{CH}.ipynb", student / f"Copy of {CH}.ipynb")  # untouched, as released
    (student / "notes.txt").write_text("not a notebook")


def _as_result(tests: list[dict], points_key: str, text_key: str, ch: chapter_model.Chapter) -> StudentResult:
    """The StudentResult one platform's results.json was made from (per-exercise points and texts)."""
    scores = {t["name"].rsplit("[", 1)[1].rstrip("]"): t[points_key] for t in tests}
    messages = {eid: t[text_key] for eid, t in zip(scores, tests) if t[text_key] != "all checks passed"}
    return StudentResult("x", Status.GRADED, sum(scores.values()), ch.max_score, scores, messages=messages)


@pytest.fixture(scope="module")
def platforms(tmp_path_factory):
    """Each platform's real entry point, run once: Gradescope's run_autograder on a perfect student, PrairieLearn's
    on a blank one (two grading runs, not four); each platform's file for the other student is made from the same
    grading through lms's own builders, so both formats are checked for both students."""
    tmp = tmp_path_factory.mktemp("lms")
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    gs = tmp / "gradescope-perfect"
    _lay_out(gs, "autograder/submission", perfect=True)
    done = subprocess.run([str(BUNDLE / "run_autograder")], env=_env(gs), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    pl = tmp / "prairielearn-blank"
    _lay_out(pl, "grade/student", perfect=False)
    done = subprocess.run([sys.executable, "-m", "autograder", "prairielearn", "--chapter", CH], env=_env(pl),
                          capture_output=True, text=True, timeout=600, cwd=course.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    gs_perfect = json.loads((gs / "autograder/results/results.json").read_text())
    pl_blank = json.loads((pl / "grade/results/results.json").read_text())
    out = {"perfect": (gs_perfect, lms_results.prairielearn_results(_as_result(gs_perfect["tests"], "score", "output", ch), ch)),
           "blank": (lms_results.gradescope_results(_as_result(pl_blank["tests"], "points", "message", ch), ch), pl_blank)}
    keep = Path(tempfile.gettempdir()) / "lms-results"  # for people to read after the run
    keep.mkdir(exist_ok=True)
    for who, (g, p) in out.items():
        (keep / f"gradescope-{who}.json").write_text(json.dumps(g, indent=1))
        (keep / f"prairielearn-{who}.json").write_text(json.dumps(p, indent=1))
    return out


def _hidden_lines(ch: chapter_model.Chapter) -> set[str]:
    shown = "".join(c.source for c in nbformat.read(course.CHAPTERS / f"{CH}.ipynb", as_version=4).cells)
    return {line.strip() for ex in ch.exercises.values()
            for line in ex.test_source.split("### BEGIN HIDDEN TESTS", 1)[1].splitlines()
            if len(line.strip()) > 12 and line.strip() not in shown}


def test_gradescope_results_for_a_perfect_and_a_blank_student(platforms):
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    for who, (gs, _) in platforms.items():
        assert set(gs) >= {"score", "tests", "output"}
        # shown as plain text, never as HTML or Markdown (a message may quote the student's code)
        assert gs["output_format"] == gs["test_output_format"] == gs["test_name_format"] == "text"
        assert {t["output_format"] for t in gs["tests"]} == {"text"}
        assert [t["name"] for t in gs["tests"]] == [f"{e.title} [{eid}]" for eid, e in ch.exercises.items()]
        for t, ex in zip(gs["tests"], ch.exercises.values()):
            assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}
            assert t["max_score"] == ex.points and t["visibility"] == "visible"
            assert t["status"] == ("passed" if who == "perfect" else "failed")
            assert t["score"] == (ex.points if who == "perfect" else 0)
        assert gs["score"] == sum(t["score"] for t in gs["tests"]) == (ch.max_score if who == "perfect" else 0)
    assert all("not answered yet" in t["output"] or "write your answer" in t["output"]
               for t in platforms["blank"][0]["tests"]), platforms["blank"][0]["tests"]


def test_prairielearn_results_for_a_perfect_and_a_blank_student(platforms):
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    perfect, blank = platforms["perfect"][1], platforms["blank"][1]
    for data in (perfect, blank):
        assert data["gradable"] is True and 0 <= data["score"] <= 1
        assert [(t["max_points"]) for t in data["tests"]] == [e.points for e in ch.exercises.values()]
        assert all(set(t) >= {"name", "points", "max_points", "message"} for t in data["tests"])
    assert perfect["score"] == 1 and [t["points"] for t in perfect["tests"]] == [t["max_points"] for t in perfect["tests"]]
    assert blank["score"] == 0 and not any(t["points"] for t in blank["tests"])


def test_hidden_tests_never_reach_the_student(platforms):
    hidden = _hidden_lines(chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb"))
    assert hidden
    for gs, pl in platforms.values():
        text = "\n".join([gs["output"], pl["message"], *(t["output"] for t in gs["tests"]),
                          *(t["message"] + t.get("output", "") for t in pl["tests"])])
        assert not [line for line in hidden if line in text]


def test_no_notebook_is_said_plainly(tmp_path):
    (tmp_path / "autograder/submission").mkdir(parents=True)
    (tmp_path / "grade/student").mkdir(parents=True)
    gs = lms_submission.run("gradescope", CH, tmp_path)
    pl = lms_submission.run("prairielearn", CH, tmp_path)
    assert gs["score"] == 0 and "no notebook" in gs["output"]
    assert pl["gradable"] is False and "no notebook" in pl["message"]
    assert json.loads((tmp_path / "grade/results/results.json").read_text()) == pl


def test_grade_lms_gradescope_writes_one_results_file_per_submission(tmp_path):
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    eids = list(ch.exercises)
    results = [StudentResult("ann", Status.GRADED, 1.0, ch.max_score, {eids[0]: 1.0}, messages={eids[1]: "ExerciseError: x"}),
               StudentResult("Bo Z", Status.MISSING, 0.0, ch.max_score)]
    lms_results.write_gradescope(tmp_path, results, ch)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "gradescope").rglob("*.json"))
    assert files == ["gradescope/ann/results.json"]
    data = json.loads((tmp_path / "gradescope/ann/results.json").read_text())
    assert data["tests"][1]["output"] == "ExerciseError: x" and data["tests"][1]["status"] == "failed"


def test_what_a_student_printed_reaches_either_platform_escaped_never_raw():
    """Issue 48: Gradescope and PrairieLearn show each test's text on the student's results page (as text, never
    HTML); what the student's code printed or raised is in it, and the summary quotes the row's detail. Escape
    sequences and bidirectional overrides show as their escapes, lines kept."""
    from tests.test_safe_text import STUDENT_OUTPUT, assert_shown_escaped, raw_controls

    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    first, second = list(ch.exercises)[:2]
    r = StudentResult(lms_results.STUDENT, Status.CRASHED, 0.0, ch.max_score, dict.fromkeys(ch.exercises, 0.0),
                      detail=f"kernel said {STUDENT_OUTPUT}", messages={first: f"ExerciseError: {STUDENT_OUTPUT}"},
                      outputs={second: STUDENT_OUTPUT})
    gs, pl = lms_results.gradescope_results(r, ch), lms_results.prairielearn_results(r, ch)
    texts = [gs["output"], pl["message"], *(t["output"] for t in gs["tests"]), *(t["message"] for t in pl["tests"])]
    assert [t for t in texts if raw_controls(t)] == []
    for text in (gs["output"], pl["message"], gs["tests"][0]["output"], gs["tests"][1]["output"],
                 pl["tests"][0]["message"], pl["tests"][1]["message"]):
        assert_shown_escaped(text)
    assert "the test printed:\ncleared \\x1b[2J" in gs["tests"][1]["output"]


def test_a_score_set_in_formgrader_reaches_gradescope_and_says_it_was_set():
    """Issue 48: Gradescope's results come from the class's results with formgrader's scores in place
    (autograder.outputs.kept_scores); the test whose score the instructor set carries it, says so and keeps what the checks
    found; the total is the sum; the other tests are as before."""
    from autograder.outputs import kept_scores

    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")
    first, second = list(ch.exercises)[:2]
    full = {e: x.points for e, x in ch.exercises.items()}
    r = StudentResult("ann", Status.GRADED, sum(full.values()) - full[first], ch.max_score, {**full, first: 0.0},
                      messages={first: "ExerciseError: off by one"})
    kept = [kept_scores.KeptScore("ann", first, 0.0, 0.5, 0.5), kept_scores.KeptScore("ann", second, full[second], 0.0, 0.0)]
    shown = kept_scores.shown([r], kept)[0]
    data = lms_results.gradescope_results(shown, ch, {first: 0.0, second: full[second]})
    tests = {t["name"].rsplit("[", 1)[1].rstrip("]"): t for t in data["tests"]}
    assert data["score"] == sum(t["score"] for t in data["tests"]) == r.score - full[second] + 0.5
    assert (tests[first]["score"], tests[first]["status"]) == (0.5, "failed")
    assert tests[first]["output"] == (f"score set by your instructor: 0.5 / {full[first]:g}; the checks gave 0: "
                                      "ExerciseError: off by one")
    assert tests[second]["output"] == (f"score set by your instructor: 0 / {full[second]:g}; the checks gave "
                                       f"{full[second]:g}: all checks passed")
    assert [t for e, t in tests.items() if e not in (first, second)] == [
        t for e, t in {t["name"].rsplit("[", 1)[1].rstrip("]"): t
                       for t in lms_results.gradescope_results(r, ch)["tests"]}.items() if e not in (first, second)]
