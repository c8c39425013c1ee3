"""Canvas's own gradebook export as the roster: which of its columns is the chapter's assignment.

Canvas's gradebook import fills the assignment a score column names when the name ends in the assignment's id, as
its export writes every assignment column (``Chapter 1: rooflines (41207)``); any other name makes Canvas create a
new assignment. So when the roster is Canvas's export, ``canvas.csv`` names the export's own column for the
chapter, chosen by one rule (:func:`is_chapters`): compared word by word (case, punctuation and spacing ignored;
``_`` separates words too), the column's name without its ``(id)`` is

* the chapter's name (``01_rooflines``), its short name (``rooflines``), its title as its notebook's first heading
  writes it (``Chapter 1 · Rooflines: is it the math or the bytes?``) or that title's topic (``Rooflines``), or
* ``Chapter N`` or ``Ch N`` (the chapter's number, with or without a leading zero), alone or followed by the topic
  or the short name (``Chapter 1``, ``Ch. 01 - Rooflines``, ``Chapter 1: rooflines``).

Nothing looser: ``Chapter 1 reading quiz`` is not the chapter's notebook. When no column or several columns match,
grading refuses before it starts and lists the candidates; ``--lms-assignment`` then names the column.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.intake import rosters

_ASSIGNMENT = re.compile(r"^(?P<name>.*?)\s*\((?P<id>\d+)\)$")  # "Name (12345)", as Canvas's export heads them


def header(roster: Path) -> list[str]:
    """The roster's first row, as Canvas wrote it (byte-order mark dropped)."""
    with roster.open(newline="", encoding="utf-8-sig") as f:
        return [h.strip() for h in next(csv.reader(f), [])]


def is_export(roster: Path) -> bool:
    """Whether the roster is Canvas's gradebook export (read as :func:`autograder.intake.rosters.read_roster` reads
    it)."""
    return rosters.canvas_export(header(roster))


def assignment_columns(roster: Path) -> list[str]:
    """The export's assignment columns, in its order: after the five identity columns, each one whose name ends in
    an assignment id in parentheses (Canvas's total columns, such as ``Current Score``, have none)."""
    return [h for h in header(roster)[len(rosters.CANVAS_EXPORT_COLUMNS):] if _ASSIGNMENT.match(h)]


def _words(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[^\W_]+", text.casefold()))


def chapter_title(solution: Path) -> str:
    """The title of a chapter: the first ``# `` heading of its notebook ('' when it has none)."""
    for c in json.loads(solution.read_text(encoding="utf-8")).get("cells", []):
        if c.get("cell_type") == "markdown":
            for line in "".join(c.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def chapter_names(chapter: str, title: str) -> set[tuple[str, ...]]:
    """Every name :func:`is_chapters` takes for ``chapter`` (``01_rooflines``) titled ``title``, as words."""
    number, _, short = chapter.partition("_")
    topic = re.sub(r"^\s*chapter\s+\d+\s*[·:.\-–—]?\s*", "", title, flags=re.IGNORECASE).split(":", 1)[0]
    ends = {(), _words(topic), _words(short)}
    names = {_words(chapter), _words(short), _words(title), _words(topic)}
    for word in ("chapter", "ch"):
        for n in {number, str(int(number))} if number.isdigit() else set():
            names |= {(word, n, *end) for end in ends}
    return {n for n in names if n}


def is_chapters(column: str, chapter: str, title: str) -> bool:
    """Whether the export's assignment column ``column`` is ``chapter``'s (the rule in this module's docstring)."""
    found = _ASSIGNMENT.match(column)
    return found is not None and _words(found.group("name")) in chapter_names(chapter, title)


@dataclass(frozen=True)
class Choice:
    """The column canvas.csv fills, and what to tell the instructor about it ('' when nothing)."""

    column: str | None  # None: the chapter's name, as before (the roster is not Canvas's export)
    note: str = ""


def choose(roster: Path, chapter: str, title: str, given: str | None) -> Choice:
    """The assignment column for ``canvas.csv``. ``given`` (``--lms-assignment``) wins: a column of the export as it
    is, or, when it is exactly one column's name without its id, or its id alone, that column; any other name is
    used as given, and the note says Canvas will create that assignment. Without ``given``, a roster that is Canvas's
    export gives the one column :func:`is_chapters` takes, and several or none stop grading with the candidates
    listed (SystemExit); any other roster keeps the chapter's name (a new assignment)."""
    export = is_export(roster)
    columns = assignment_columns(roster) if export else []
    if given is not None:
        if not export or given in columns:
            return Choice(given)
        same = [c for c in columns if (m := _ASSIGNMENT.match(c)) and given.strip() in (m.group("name"), m.group("id"))]
        if len(same) == 1:
            return Choice(same[0], f"canvas.csv fills Canvas's assignment {same[0]!r} (--lms-assignment {given!r})")
        return Choice(given, f"--lms-assignment {given!r} is no assignment column of {roster.name}: Canvas will "
                             "import it as a new assignment (to fill one, pass its column as the export writes it)")
    if not export:
        return Choice(None)
    hits = [c for c in columns if is_chapters(c, chapter, title)]
    if len(hits) == 1:
        return Choice(hits[0])
    listed = hits or columns
    what = "several of its assignment columns could be" if hits else "none of its assignment columns is"
    number = chapter.split("_", 1)[0]
    number = str(int(number)) if number.isdigit() else number
    candidates = "".join(f"\n  {c}" for c in listed) if listed else "\n  (the export has no assignment columns)"
    raise SystemExit(
        f"{roster}: {what} {chapter}'s: a column matches when its name without '(id)', ignoring case and "
        f"punctuation, is {chapter}, its title or topic, or 'Chapter {number}' alone or before "
        f"the topic. {'Matching' if hits else 'Assignment'} columns:{candidates}\n"
        f"Say which one canvas.csv fills: --lms-assignment \"<column>\" (as written above), or a new name for a "
        "new assignment")


def student_view_note(roster: Path) -> str:
    """The console's line about Canvas's Test Student when the roster (Canvas's export) holds it ('' otherwise)."""
    left_out = rosters.canvas_test_students(roster)
    if not left_out:
        return ""
    who = ", ".join(f"{r.get('name', '')!r} (ID {r.get('id', '')})" for r in left_out)
    return (f"left out Canvas's Test Student {who}: the student view user Canvas adds to every course is not a "
            "student of the class (not in grades.csv, canvas.csv or the gradebook, and no missing student)")
