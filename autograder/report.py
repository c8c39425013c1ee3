"""What grading writes for people: grades.csv, submissions.csv, feedback pages (and exports for an LMS).

Every CSV is written by :func:`autograder.safe_text.csv_text`: text cells quoted, escaped and neutralised against
formula injection (a leading ``=``, ``+``, ``-``, ``@`` gets an apostrophe; ``safe_text.uncell`` undoes it),
numbers bare. A feedback page shows each text HTML-escaped, its control and format characters (terminal escape
sequences, bidirectional overrides) written as escapes (``safe_text.printable_lines``)."""

from __future__ import annotations

import html
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.safe_text import csv_text, printable_lines

if TYPE_CHECKING:
    from autograder import align, submissions
    from autograder.results import StudentResult

INSTRUCTOR_LOG = "instructor.log"  # under logs/: cells of the instructor's notebook that raised in the grader's run


def atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` all at once (a reader sees the old file or the new one), readable by others
    (a web server serving feedback pages), whatever the umask."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(path: Path, chapter: str, results: list[StudentResult], exercise_ids: list[str]) -> None:
    rows: list[list[object]] = [["student", "chapter", "score", "max_score", "status", "detail", "file", *exercise_ids]]
    for r in results:
        rows.append([r.student, chapter, r.score, r.max_score, str(r.status), r.detail, r.file,
                     *(r.exercises.get(e, 0.0) for e in exercise_ids)])
    atomic_write(path, csv_text(rows))


def write_long_csv(path: Path, chapter: str, results: list[StudentResult], ch: align.Chapter,
                   manual: Mapping[tuple[str, str], float] | None = None) -> None:
    """One row per student and exercise, for any system that imports scores: student, chapter, exercise, title,
    points, max_points, status, scored_by, auto_points. ``manual`` holds (student, exercise) -> the grader's points
    for the cells whose ``points`` an instructor set in formgrader (:mod:`autograder.exports`): ``scored_by`` is
    ``manual`` for those, ``autograder`` for the others, and ``auto_points`` is always what the grader gave."""
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


def write_class(out_dir: Path, ch: align.Chapter, results: list[StudentResult], mapping: submissions.Mapping | None,
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


def write_manifest(path: Path, mapping: submissions.Mapping) -> None:
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


_PAGE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; } .sub { color: #555; margin-top: 0; }
.score { font-size: 1.2rem; } table { border-collapse: collapse; width: 100%; margin-top: 1rem; }
th, td { border-bottom: 1px solid #ddd; padding: .5rem .6rem; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } .pts { white-space: nowrap; }
.id { color: #666; font-family: monospace; font-size: .85rem; }
.ok { color: #1a7f37; font-weight: 600; } .bad { color: #b42318; font-weight: 600; } .skip { color: #8a6d00; }
pre { white-space: pre-wrap; margin: .3rem 0 0; font-size: .85rem; background: #fafafa; padding: .4rem; }
"""


def _verdict(r: StudentResult, eid: str, points: float) -> tuple[str, str, str]:
    """(css class, what happened, why) for one exercise on the student's page."""
    got = r.exercises.get(eid, 0.0)
    message = r.messages.get(eid, "")
    if got == points and points > 0:
        return "ok", "all checks passed", ""
    if message.startswith(("answer not found", "not graded")) or r.status in ("missing", "invalid notebook",
                                                                               "wrong chapter"):
        return "skip", "not graded", message or r.detail
    from autograder.results import NOT_ANSWERED, TEST_FAULT

    if message.startswith(TEST_FAULT):
        return "skip", "the test failed, not your answer", message
    if message.startswith(NOT_ANSWERED):
        return "bad", NOT_ANSWERED, message
    return "bad", "a check failed" if message else "not graded", message


def write_feedback(path: Path, chapter: str, r: StudentResult, ch: align.Chapter) -> None:
    """The student's page: each exercise with its title and id, its points, and for a failure the check's own
    message and what the test printed (never the hidden tests' source). Every text on it is shown with its control
    and format characters escaped (:func:`autograder.safe_text.printable_lines`): the messages, the output, the
    detail, the file's name and the id may quote what the student's code or files hold."""

    def e(text: str) -> str:
        return html.escape(printable_lines(text))

    rows = []
    for eid, ex in ch.exercises.items():
        css, what, why = _verdict(r, eid, ex.points)
        printed = r.outputs.get(eid, "") if css != "ok" else ""
        details = (f"<pre>{e(why)}</pre>" if why else "") + (
            f"<pre>the test printed:\n{e(printed.strip())}</pre>" if printed.strip() else "")
        title = e(ex.title) if ex.title else e(eid)
        rows.append(f'<tr><td>{title}<br><span class="id">{e(eid)}</span></td>'
                    f'<td class="pts">{r.exercises.get(eid, 0.0):g} / {ex.points:g}</td>'
                    f'<td><span class="{css}">{e(what)}</span>{details}</td></tr>')
    detail = f" &mdash; {e(r.detail)}" if r.detail else ""
    file = f" &middot; file <code>{e(r.file)}</code>" if r.file else ""
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(chapter)}: {e(r.student)}</title><style>{_PAGE_STYLE}</style></head><body>
<h1>{e(chapter)}: {e(r.student)}</h1>
<p class="sub">Status: <b>{e(str(r.status))}</b>{detail}{file}</p>
<p class="score">Score: <b>{r.score:g} / {r.max_score:g}</b></p>
<table><thead><tr><th>exercise</th><th>points</th><th>result</th></tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table></body></html>
"""
    atomic_write(path, page)
