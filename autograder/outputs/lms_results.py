"""Results for Gradescope and PrairieLearn, and their per-submission entry points.

Gradescope runs ``/autograder/run_autograder`` in a container with the student's files in
``/autograder/submission/`` and reads ``/autograder/results/results.json``: ``score``, ``output``, and ``tests``,
each with ``name``, ``score``, ``max_score``, ``status`` ("passed"/"failed"), ``output`` and ``visibility``.
PrairieLearn's external grader puts the student's files in ``/grade/student/`` and reads
``/grade/results/results.json``: ``gradable``, ``score`` as a fraction in [0, 1], ``message``, and ``tests``, each with
``name``, ``points``, ``max_points``, ``message`` and ``output``.

Both entry points (``python -m autograder.outputs.lms_results gradescope|prairielearn --chapter 01_rooflines``) grade
the one submission with :func:`autograder.grading.class_run.grade` and write that file; ``SCALELIB_LMS_ROOT`` moves
``/`` (tests lay the platform's folders out under a temporary one). A test's text reaches the student only as the
feedback page shows it: the failing check's message and what the test printed, never the source of a hidden test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import atomic_files
from autograder.intake import file_names
from autograder.safe_text import printable_lines

if TYPE_CHECKING:
    from autograder.instructor.chapter_model import Chapter
    from autograder.results import StudentResult


STUDENT = "student"  # the one submission's id inside an entry point's run


def _test_text(r: StudentResult, eid: str, points: float) -> str:
    """One exercise's text on the student's results page; what their code printed or raised is quoted with its
    control and format characters escaped (safe_text.printable_lines), as on the feedback page."""
    got = r.exercises.get(eid, 0.0)
    if got == points and points > 0:
        return "all checks passed"
    text = r.messages.get(eid, "") or (f"{r.status}: {r.detail}" if r.detail else "no points")
    printed = r.outputs.get(eid, "").strip()
    return printable_lines(text + (f"\nthe test printed:\n{printed}" if printed else ""))


def _summary(r: StudentResult) -> str:
    return printable_lines(f"{r.score:g} / {r.max_score:g} points ({r.status}{': ' + r.detail if r.detail else ''})")


def _set_by_instructor(r: StudentResult, eid: str, points: float, auto: float) -> str:
    """The text of an exercise whose score the instructor set in formgrader: that score, then what the checks
    found (the grader's points, and why they were not full), escaped (safe_text.printable_lines)."""
    if auto == points and points > 0:
        found = "all checks passed"
    else:
        found = r.messages.get(eid, "") or (f"{r.status}: {r.detail}" if r.detail else "no points")
        printed = r.outputs.get(eid, "").strip()
        found += f"\nthe test printed:\n{printed}" if printed else ""
    return printable_lines(f"score set by your instructor: {r.exercises.get(eid, 0.0):g} / {points:g}; the checks "
                           f"gave {auto:g}: {found}")


def gradescope_results(r: StudentResult, ch: Chapter, manual: Mapping[str, float] | None = None) -> dict:
    """Gradescope's results.json for one submission: one test per exercise, all visible to the student. ``manual``:
    exercise -> the grader's points, for the exercises whose score in ``r`` the instructor set in formgrader
    (:mod:`autograder.outputs.kept_scores`); their text says so."""
    manual = manual or {}
    tests = []
    for number, (eid, ex) in enumerate(ch.exercises.items(), 1):
        got = r.exercises.get(eid, 0.0)
        text = (_test_text(r, eid, ex.points) if eid not in manual
                else _set_by_instructor(r, eid, ex.points, manual[eid]))
        tests.append({"name": f"{ex.title or eid} [{eid}]", "number": str(number), "score": got,
                      "max_score": ex.points, "status": "passed" if got >= ex.points else "failed",
                      "output": text, "output_format": "text", "visibility": "visible"})
    # plain text: the messages may quote what a student's code raised or printed, which Gradescope's default
    # format would render as HTML
    return {"score": r.score, "output": _summary(r), "output_format": "text", "test_output_format": "text",
            "test_name_format": "text", "visibility": "visible", "stdout_visibility": "hidden", "tests": tests}


def prairielearn_results(r: StudentResult, ch: Chapter) -> dict:
    """PrairieLearn's external-grader results.json for one submission (score as a fraction of the maximum)."""
    tests = [{"name": f"{ex.title or eid} [{eid}]", "description": eid, "points": r.exercises.get(eid, 0.0),
              "max_points": ex.points, "message": _test_text(r, eid, ex.points), "output": ""}
             for eid, ex in ch.exercises.items()]
    fraction = r.score / r.max_score if r.max_score > 0 else 0.0
    return {"gradable": True, "score": min(1.0, max(0.0, fraction)), "message": _summary(r), "output": "",
            "tests": tests}


def write_gradescope(out_dir: Path, results: list[StudentResult], ch: Chapter,
                     manual: Mapping[tuple[str, str], float] | None = None) -> None:
    """``--lms gradescope``: ``OUT/gradescope/<student>/results.json`` for every submission (not for missing ones).
    ``manual``: (student, exercise) -> the grader's points where ``results`` hold a score set in formgrader."""
    manual = manual or {}
    for r in results:
        if r.status != "missing":
            mine = {eid: auto for (student, eid), auto in manual.items() if student == r.student}
            atomic_files.atomic_write(out_dir / "gradescope" / file_names.file_stem(r.student) / "results.json",
                                json.dumps(gradescope_results(r, ch, mine), indent=1, ensure_ascii=False) + "\n")
