"""What grading writes for people: grades.csv, submissions.csv, feedback pages (and exports for an LMS)."""

from __future__ import annotations

import csv
import html
import io
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograder import align, submissions
    from autograder.grade import StudentResult


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
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["student", "chapter", "score", "max_score", "status", "detail", "file", *exercise_ids])
    for r in results:
        writer.writerow([r.student, chapter, f"{r.score:g}", f"{r.max_score:g}", r.status, r.detail, r.file,
                         *(f"{r.exercises.get(e, 0.0):g}" for e in exercise_ids)])
    atomic_write(path, buf.getvalue())


def write_manifest(path: Path, mapping: submissions.Mapping) -> None:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["file", "student", "use", "why"])
    for student, cand in sorted(mapping.chosen.items()):
        writer.writerow([cand.shown, student, "graded", f"chapter from {cand.chapter_from or 'content'}"])
    for cand, student in mapping.superseded:
        writer.writerow([cand.shown, student, "superseded", f"a later file of {student} was graded"])
    for name, why in mapping.unmatched:
        writer.writerow([name, "", "unmatched", why])
    for name, why in mapping.skipped:
        writer.writerow([name, "", "skipped", why])
    atomic_write(path, buf.getvalue())


def write_feedback(path: Path, chapter: str, r: StudentResult, ch: align.Chapter) -> None:
    e = html.escape
    rows = []
    for eid, ex in ch.exercises.items():
        got = r.exercises.get(eid, 0.0)
        note = r.messages.get(eid, "" if got == ex.points else "not graded")
        if eid in r.in_kernel:
            note = (note + " " if note else "") + "(judged inside your kernel)"
        out = r.outputs.get(eid, "")
        rows.append(f"<tr><td>{e(eid)}</td><td>{got:g} / {ex.points:g}</td><td>{'passed' if got == ex.points else 'failed'}</td>"
                    f"<td><pre>{e(note)}</pre>{f'<pre>{e(out)}</pre>' if out else ''}</td></tr>")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{e(chapter)}: {e(r.student)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{border:1px solid #ccc;padding:4px 8px;vertical-align:top}}
table{{border-collapse:collapse}}pre{{white-space:pre-wrap;margin:0}}</style></head><body>
<h1>{e(chapter)}: {e(r.student)}</h1>
<p>Status: <b>{e(r.status)}</b>{(' &mdash; ' + e(r.detail)) if r.detail else ''}</p>
<p>Score: <b>{r.score:g} / {r.max_score:g}</b>{(' &mdash; file ' + e(r.file)) if r.file else ''}</p>
<table><tr><th>exercise</th><th>points</th><th>result</th><th>details</th></tr>
{''.join(rows)}
</table></body></html>
"""
    atomic_write(path, page)
