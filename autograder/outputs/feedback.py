"""One student's feedback page: each exercise's verdict and message, student text escaped for HTML.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.atomic_files import atomic_write
from autograder.safe_text import printable_lines

if TYPE_CHECKING:
    from autograder.instructor.chapter_model import Chapter
    from autograder.results import StudentResult


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


def write_feedback(path: Path, chapter: str, r: StudentResult, ch: Chapter) -> None:
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
