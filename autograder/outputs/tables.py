"""What grading writes for people: grades.csv, submissions.csv, feedback pages (and exports for an LMS).

Every CSV is written by :func:`autograder.safe_text.csv_text`: text cells quoted, escaped and neutralised against
formula injection (a leading ``=``, ``+``, ``-``, ``@`` gets an apostrophe; ``safe_text.uncell`` undoes it),
numbers bare. A feedback page shows each text HTML-escaped, its control and format characters (terminal escape
sequences, bidirectional overrides) written as escapes (``safe_text.printable_lines``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.atomic_files import atomic_write
from autograder.safe_text import csv_text

if TYPE_CHECKING:
    from autograder.instructor import chapter_model
    from autograder.intake import collection
    from autograder.results import StudentResult


INSTRUCTOR_LOG = "instructor.log"  # under logs/: cells of the instructor's notebook that raised in the grader's run


def write_csv(path: Path, chapter: str, results: list[StudentResult], exercise_ids: list[str]) -> None:
    rows: list[list[object]] = [["student", "chapter", "score", "max_score", "status", "detail", "file", *exercise_ids]]
    for r in results:
        rows.append([r.student, chapter, r.score, r.max_score, str(r.status), r.detail, r.file,
                     *(r.exercises.get(e, 0.0) for e in exercise_ids)])
    atomic_write(path, csv_text(rows))


def write_long_csv(path: Path, chapter: str, results: list[StudentResult], ch: chapter_model.Chapter,
                   manual: Mapping[tuple[str, str], float] | None = None) -> None:
    """One row per student and exercise, for any system that imports scores: student, chapter, exercise, title,
    points, max_points, status, scored_by, auto_points. ``manual`` holds (student, exercise) -> the grader's points
    for the cells whose ``points`` an instructor set in formgrader (:mod:`autograder.outputs.kept_scores`):
    ``scored_by`` is ``manual`` for those, ``autograder`` for the others, and ``auto_points`` is always what the grader
    gave."""
    manual = manual or {}
    rows: list[list[object]] = [["student", "chapter", "exercise", "title", "points", "max_points", "status",
                                 "scored_by", "auto_points"]]
    for r in results:
        for eid, ex in ch.exercises.items():
            points = r.exercises.get(eid, 0.0)
            auto = manual.get((r.student, eid))
            rows.append([r.student, chapter, eid, ex.title, points, ex.points, str(r.status),
                         "autograder" if auto is None else "manual", points if auto is None else auto])
    atomic_write(path, csv_text(rows))


CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def write_canvas_csv(path: Path, chapter: str, results: list[StudentResult], roster: list[dict[str, str]],
                     max_score: float, assignment: str | None = None) -> None:
    """A file Canvas's gradebook import accepts: its five identity columns, then one column for this chapter's
    assignment ("Name (assignment id)" matches an existing assignment; a bare name creates one), a "Points
    Possible" row, and one row per roster student in roster order, with the same total as grades.csv (0 for a
    missing notebook). Students not on the roster are left out: Canvas could not match them."""
    by_student = {r.student: r for r in results}
    rows: list[list[object]] = [[*CANVAS_COLUMNS, assignment or chapter],
                                ["Points Possible", "", "", "", "", max_score]]
    for row in roster:
        r = by_student.get(row["student"])
        rows.append([row.get("name") or row["student"], row.get("id", ""), row.get("sis_id", ""),
                     row.get("login", ""), row.get("section", ""), "" if r is None else r.score])
    atomic_write(path, csv_text(rows))


def write_class(out_dir: Path, ch: chapter_model.Chapter, results: list[StudentResult],
                mapping: collection.Mapping | None,
                roster: list[dict[str, str]] | None, lms: str | None, assignment: str | None,
                manifest: bytes | None = None, manual: Mapping[tuple[str, str], float] | None = None) -> None:
    """Every whole-class file: grades.csv, grades_long.csv, submissions.csv (from ``mapping``, or ``manifest`` as
    it was written, or left as it is without either), and canvas.csv for ``lms="canvas"``. ``results`` hold the
    scores to write; ``manual`` marks the cells among them an instructor set (see :func:`write_long_csv`)."""
    write_csv(out_dir / "grades.csv", ch.name, results, list(ch.exercises))
    write_long_csv(out_dir / "grades_long.csv", ch.name, results, ch, manual)
    if mapping is not None:
        write_manifest(out_dir / "submissions.csv", mapping)
    elif manifest is not None:
        atomic_write(out_dir / "submissions.csv", manifest.decode("utf-8"))
    if lms == "canvas":
        if roster is None:
            raise SystemExit("--lms canvas needs --roster")
        write_canvas_csv(out_dir / "canvas.csv", ch.name, results, roster, ch.max_score, assignment)


def write_manifest(path: Path, mapping: collection.Mapping) -> None:
    rows: list[list[object]] = [["file", "student", "use", "why"]]
    for student, cand in sorted(mapping.chosen.items()):
        rows.append([cand.shown, student, "graded", f"chapter from {cand.chapter_from or 'content'}"])
    for cand, student in mapping.superseded:
        rows.append([cand.shown, student, "superseded", f"a later file of {student} was graded"])
    for name, why in mapping.unmatched:
        rows.append([name, "", "unmatched", why])
    for name, why in mapping.skipped:
        rows.append([name, "", "skipped", why])
    atomic_write(path, csv_text(rows))
