"""Rosters: ours (a 'student' column) and Canvas's own gradebook export, read as Canvas writes it (issue 20, item 8).

tests/data/canvas_gradebook_export.csv is laid out like Canvas's "Export Entire Gradebook": a byte-order mark, CRLF
lines, the five identity columns, assignment columns named "Name (id)", read-only total columns, a "Manual
Posting" row with an empty Student and ID, an indented "Points Possible" row, and Canvas's Test Student.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest

from autograder import course, report, submissions
from autograder.results import Status, StudentResult

pytestmark = pytest.mark.grading

CH = "01_rooflines"
EXPORT = Path(__file__).parent / "data" / "canvas_gradebook_export.csv"
NB = json.dumps({"cells": [], "metadata": {"scalelib": {"chapter": CH}}, "nbformat": 4, "nbformat_minor": 5})


def test_canvas_export_rows_are_its_students_and_nothing_else():
    rows = submissions.read_roster(EXPORT)
    assert [r["student"] for r in rows] == ["jdoe", "klee", "aoyelaran", "1099"]  # login, else Canvas's id
    jane = rows[0]
    assert (jane["name"], jane["id"], jane["sis_id"], jane["login"], jane["section"]) == (
        "Doe, Jane", "1001", "20231001", "jdoe", "Scaling 101 - Section A")
    assert rows[2]["name"] == "Oyelaran, Adé"
    assert not any("points possible" in r["name"].casefold() or r["name"] == "" for r in rows)


def test_our_roster_format_is_read_as_before(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,SIS User ID,email\nalice,Alice Liddell,S1,alice@example.org\n", encoding="utf-8")
    assert submissions.read_roster(roster) == [
        {"student": "alice", "name": "Alice Liddell", "sis_id": "S1", "email": "alice@example.org"}]
    (tmp_path / "bad.csv").write_text("who,name\nx,y\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="'student' column"):
        submissions.read_roster(tmp_path / "bad.csv")


def test_canvas_export_as_roster_gives_no_phantom_student(tmp_path):
    """Files named as Canvas's submission download names them match by Canvas's user id; the Points Possible row
    is neither a missing student nor a second Points Possible row in canvas.csv."""
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"doejane_1001_77001_{CH}.ipynb", NB)
        zf.writestr(f"leekim_late_1002_77002_Copy of {CH}.ipynb", NB)
    mapping = submissions.collect(archive, CH, course.chapter_names(), tmp_path / "work", EXPORT)
    assert set(mapping.chosen) == {"jdoe", "klee"} and not mapping.unmatched
    assert mapping.missing == ["aoyelaran", "1099"]

    results = [StudentResult("jdoe", Status.GRADED, 40.0, 42.0), StudentResult("klee", Status.GRADED, 42.0, 42.0),
               StudentResult("aoyelaran", Status.MISSING, 0.0, 42.0), StudentResult("1099", Status.MISSING, 0.0, 42.0)]
    out = tmp_path / "canvas.csv"
    report.write_canvas_csv(out, CH, results, submissions.read_roster(EXPORT), 42.0, "Chapter 1: rooflines (41207)")
    lines = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Chapter 1: rooflines (41207)"]
    assert [line[0] for line in lines].count("Points Possible") == 1 and lines[1][-1] == "42"
    assert [(line[0], line[1], line[3], line[-1]) for line in lines[2:]] == [
        ("Doe, Jane", "1001", "jdoe", "40"), ("Lee, Kim", "1002", "klee", "42"),
        ("Oyelaran, Adé", "1003", "aoyelaran", "0"), ("Student, Test", "1099", "", "0")]
