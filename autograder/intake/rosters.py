"""The class list: a roster CSV (``student`` and optional identity columns) or Canvas's gradebook export,
read as rows of identity keys, with Canvas's placeholder rows and its Test Student set aside.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

from autograder.intake.file_names import fold, norm

_ROSTER_SYNONYMS = {"sis user id": "sis_id", "sis login id": "login", "user id": "user_id", "login id": "login"}


CANVAS_EXPORT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def canvas_export(header: list[str]) -> bool:
    """Canvas's own gradebook export: it starts with Student, ID, then SIS columns, and has no id column of ours."""
    names = [h.strip() for h in header]
    return names[:2] == ["Student", "ID"] and "SIS Login ID" in names and "student" not in names


def _canvas_placeholder(row: dict[str, str]) -> bool:
    """Rows of a Canvas export that are not students: "Points Possible", and the "Manual Posting" (formerly
    "Muted") row with an empty Student and ID."""
    who = row.get("name", "")
    return who.casefold() == "points possible" or not (who or row.get("id"))


# Why a file of Canvas's Test Student is not graded (its row in submissions.csv)
CANVAS_TEST_STUDENT = "Canvas's Test Student (the student view user), not a student of the class"


def _canvas_test_student(row: dict[str, str]) -> bool:
    """Canvas's Test Student: the user Canvas adds to every course for its student view, in every gradebook export
    (named "Student, Test" there, "Test Student" elsewhere), never enrolled through the SIS (no SIS User ID or
    SIS Login ID). A person of that name with a SIS id is a student."""
    return (" ".join(row.get("name", "").split()).casefold() in ("student, test", "test student")
            and not (row.get("sis_id") or row.get("login")))


def read_roster(path: Path) -> list[dict[str, str]]:
    """Roster rows with lower-case column names (Canvas's 'SIS User ID' and 'SIS Login ID' become
    ``sis_id`` and ``login``); the ``student`` column is required and must be unique.

    Canvas's gradebook export is read as Canvas writes it: its "Student" column (the name, "Last, First") becomes
    ``name``, the student's id is the SIS Login ID (else the SIS User ID, else Canvas's ID), and its rows that are
    not students ("Points Possible", "Manual Posting"/"Muted", and Canvas's Test Student: see
    :func:`canvas_test_students`) are left out.
    """
    return roster_rows(path)[0]


def canvas_test_students(path: Path) -> list[dict[str, str]]:
    """The rows of Canvas's Test Student that :func:`read_roster` left out of a Canvas export (none for any other
    roster): it is in no class file, no missing-student row and no gradebook; the grader says so once."""
    return roster_rows(path)[1]


def roster_rows(path: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(the roster's students, the Canvas Test Student rows left out of them)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        canvas = canvas_export(header)
        keys = [_ROSTER_SYNONYMS.get(k, k) for k in (h.strip().lower() for h in header)]
        if canvas:
            keys[0] = "name"
        rows = [{k: (v or "").strip() for k, v in zip(keys, values) if k}
                for values in reader if any(v.strip() for v in values)]
    left_out: list[dict[str, str]] = []
    if canvas:
        rows = [r for r in rows if not _canvas_placeholder(r)]
        left_out = [r for r in rows if _canvas_test_student(r)]
        rows = [r for r in rows if not _canvas_test_student(r)]
        for r in rows + left_out:
            r["student"] = r.get("login") or r.get("sis_id") or r.get("id", "")
            if not r["student"]:
                raise SystemExit(f"{path}: Canvas's export has a row without SIS Login ID, SIS User ID or ID "
                                 f"({r.get('name')!r}); export the gradebook again or give a roster with a "
                                 "'student' column")
    if not rows or not (canvas or "student" in keys):
        raise SystemExit(f"{path}: a roster needs a 'student' column (and optionally name, id, sis_id, login, "
                         "section, email, aliases), or is Canvas's gradebook export (Student, ID, SIS User ID, "
                         "SIS Login ID, Section, ...)")
    seen: set[str] = set()
    for row in rows:
        row["student"] = unicodedata.normalize("NFC", row.get("student", ""))
        if not row["student"] or row["student"] in seen:
            raise SystemExit(f"{path}: every roster row needs its own non-empty 'student' "
                             f"({row['student']!r} is {'empty' if not row['student'] else 'repeated'})")
        seen.add(row["student"])
    return rows, left_out


def roster_keys(rows: list[dict[str, str]], key: Callable[[str], str] = norm) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    last_names: dict[str, list[str]] = {}
    for row in rows:
        own = {key(row["student"])}
        for col in ("id", "sis_id", "user_id", "login"):
            if row.get(col):
                own.add(key(row[col]))
        if row.get("email"):
            own.add(key(row["email"].split("@")[0]))
        if row.get("name"):
            parts = re.split(r"[\s,]+", row["name"].strip())
            own |= {key("".join(parts)), key("".join(reversed(parts)))}
            last_names.setdefault(key(parts[-1] if "," not in row["name"] else parts[0]), []).append(row["student"])
        for alias in row.get("aliases", "").split(";"):
            if alias.strip():
                own.add(key(alias))
        keys[row["student"]] = {k for k in own if k}
    for last, students in last_names.items():
        if len(students) == 1 and last:
            keys[students[0]].add(last)
    return keys


def roster_match(keys: list[str], exact: dict[str, set[str]], folded: dict[str, set[str]]) -> list[str]:
    """Roster students a file's keys match: exactly, else (a site that wrote 'Zoe' for 'Zoë') without accents."""
    hits = [s for s, ks in exact.items() if ks & set(keys)]
    if not hits:
        loose = {fold(k) for k in keys} - {""}
        hits = [s for s, ks in folded.items() if ks & loose]
    return hits
