"""Rosters: ours (a 'student' column) and Canvas's own gradebook export, read as Canvas writes it (issue 20, item 8).

tests/data/canvas_gradebook_export.csv is laid out like Canvas's "Export Entire Gradebook": a byte-order mark, CRLF
lines, the five identity columns, assignment columns named "Name (id)", read-only total columns, a "Manual
Posting" row with an empty Student and ID, an indented "Points Possible" row, and Canvas's Test Student.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import zipfile
from pathlib import Path

import pytest

from autograder import course
from autograder.intake import collection, rosters
from autograder.outputs import tables
from autograder.results import Status, StudentResult

pytestmark = pytest.mark.grading

CH = "01_rooflines"
EXPORT = Path(__file__).parent / "data" / "canvas_gradebook_export.csv"
NB = json.dumps({"cells": [], "metadata": {"scalelib": {"chapter": CH}}, "nbformat": 4, "nbformat_minor": 5})


def _export_with(tmp_path: Path, *lines: str, header: str | None = None) -> Path:
    """tests/data's Canvas export with ``lines`` added (CRLF, as Canvas writes them), its header replaced by
    ``header`` when given."""
    text = EXPORT.read_bytes().decode("utf-8-sig")
    if header is not None:
        text = header + "\r\n" + text.split("\r\n", 1)[1]
    path = tmp_path / f"export-{len(list(tmp_path.glob('export-*.csv')))}.csv"  # a new file each time
    path.write_text("\ufeff" + text + "".join(f"{line}\r\n" for line in lines), encoding="utf-8")
    return path


def test_canvas_export_rows_are_its_students_and_nothing_else(tmp_path):
    """Issue 48: Canvas's Test Student (its student view user, in every export, no SIS ids) is no student; a real
    student without SIS ids keeps Canvas's ID as id, and one named "Test Student" who has a SIS id is a student."""
    export = _export_with(tmp_path, '"Nguyen, Minh",1100,,,Scaling 101 - Section B,,,,,,,,,,',
                          '"Student, Test",1101,S-1101,tstudent,Scaling 101 - Section B,,,,,,,,,,')
    rows = rosters.read_roster(export)
    assert [r["student"] for r in rows] == ["jdoe", "klee", "aoyelaran", "1100", "tstudent"]  # login, else the ID
    jane = rows[0]
    assert (jane["name"], jane["id"], jane["sis_id"], jane["login"], jane["section"]) == (
        "Doe, Jane", "1001", "20231001", "jdoe", "Scaling 101 - Section A")
    assert rows[2]["name"] == "Oyelaran, Adé"
    assert not any("points possible" in r["name"].casefold() or r["name"] == "" for r in rows)
    assert [(r["name"], r["student"]) for r in rosters.canvas_test_students(export)] == [("Student, Test", "1099")]
    ours = tmp_path / "ours.csv"  # our own roster's rows are all students
    ours.write_text('student,name\nx,"Student, Test"\n', encoding="utf-8")
    assert [r["student"] for r in rosters.read_roster(ours)] == ["x"]
    assert rosters.canvas_test_students(ours) == []


def test_our_roster_format_is_read_as_before(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("student,name,SIS User ID,email\nalice,Alice Liddell,S1,alice@example.org\n", encoding="utf-8")
    assert rosters.read_roster(roster) == [
        {"student": "alice", "name": "Alice Liddell", "sis_id": "S1", "email": "alice@example.org"}]
    (tmp_path / "bad.csv").write_text("who,name\nx,y\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="'student' column"):
        rosters.read_roster(tmp_path / "bad.csv")


def test_canvas_export_as_roster_gives_no_phantom_student(tmp_path):
    """Files named as Canvas's submission download names them match by Canvas's user id; the Points Possible row
    is neither a missing student nor a second Points Possible row in canvas.csv, and neither is Canvas's Test
    Student (issue 48), whose own file is not graded and says why."""
    archive = tmp_path / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"doejane_1001_77001_{CH}.ipynb", NB)
        zf.writestr(f"leekim_late_1002_77002_Copy of {CH}.ipynb", NB)
        zf.writestr(f"studenttest_1099_77099_{CH}.ipynb", NB)  # the instructor tried the student view
    mapping = collection.collect(archive, CH, course.chapter_names(), tmp_path / "work", EXPORT)
    assert set(mapping.chosen) == {"jdoe", "klee"}
    assert mapping.unmatched == [(f"studenttest_1099_77099_{CH}.ipynb", rosters.CANVAS_TEST_STUDENT)]
    assert mapping.missing == ["aoyelaran"]

    results = [StudentResult("jdoe", Status.GRADED, 40.0, 42.0), StudentResult("klee", Status.GRADED, 42.0, 42.0),
               StudentResult("aoyelaran", Status.MISSING, 0.0, 42.0)]
    out = tmp_path / "canvas.csv"
    tables.write_canvas_csv(out, CH, results, rosters.read_roster(EXPORT), 42.0, "Chapter 1: rooflines (41207)")
    lines = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Chapter 1: rooflines (41207)"]
    assert [line[0] for line in lines].count("Points Possible") == 1 and lines[1][-1] == "42"
    assert [(line[0], line[1], line[3], line[-1]) for line in lines[2:]] == [
        ("Doe, Jane", "1001", "jdoe", "40"), ("Lee, Kim", "1002", "klee", "42"),
        ("Oyelaran, Adé", "1003", "aoyelaran", "0")]


def test_grading_with_canvas_export_fills_its_chapter_column_and_leaves_the_test_student_out(tmp_path):
    """Issue 48, the round trip: with Canvas's export as roster and no --lms-assignment, canvas.csv names the
    export's own column of the chapter ("Chapter 1: rooflines (41207)"; a bare "01_rooflines" made Canvas create a
    new assignment), and Canvas's Test Student is in no class file, no missing row and not in the gradebook; the
    console says so once. Nobody submitted, so no kernel starts."""
    from nbgrader.api import Gradebook

    from autograder.grading import class_run
    from autograder.outputs import gradebook

    subs, out = tmp_path / "subs", tmp_path / "out"
    subs.mkdir()
    console = io.StringIO()
    with contextlib.redirect_stdout(console):
        got = class_run.grade(subs, CH, out, roster=EXPORT, lms="canvas", allow_unsandboxed=True)
    assert [(r.student, r.status) for r in got] == [("aoyelaran", "missing"), ("jdoe", "missing"), ("klee", "missing")]
    lines = list(csv.reader((out / "canvas.csv").open(encoding="utf-8", newline="")))
    assert lines[0][-1] == "Chapter 1: rooflines (41207)"
    assert [line[1] for line in lines[2:]] == ["1001", "1002", "1003"]
    assert {r["student"] for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))} == {
        "aoyelaran", "jdoe", "klee"}
    with Gradebook(gradebook.db_url(out / "nbgrader")) as gb:
        assert sorted(s.id for s in gb.students) == ["aoyelaran", "jdoe", "klee"]
    said = console.getvalue()
    assert said.count("Test Student") == 1 and "left out Canvas's Test Student 'Student, Test' (ID 1099)" in said


@pytest.mark.parametrize("column, matches", [
    ("Chapter 1: rooflines (41207)", True), ("Chapter 1 (12)", True), ("chapter 01 (12)", True),
    ("Ch. 1 - Rooflines (12)", True), ("01_rooflines (12)", True), ("Rooflines (12)", True),
    ("Chapter 1 · Rooflines: is it the math or the bytes? (12)", True),
    ("Chapter 10 (12)", False), ("Chapter 1 reading quiz (12)", False), ("Batch 1 (12)", False),
    ("Quiz 1 (41190)", False), ("Chapter 1", False),  # no assignment id: not an assignment column of the export
])
def test_the_rule_for_the_chapters_column(column, matches):
    from autograder.intake import canvas_columns

    title = canvas_columns.chapter_title(course.SOLUTIONS / f"{CH}.ipynb")
    assert title.startswith("Chapter 1 · Rooflines")
    assert canvas_columns.is_chapters(column, CH, title) is matches


def test_no_column_or_several_are_refused_before_grading_with_the_candidates(tmp_path):
    """Issue 48: an export in which no column, or more than one, is the chapter's stops grade before anything runs
    or is written, listing the candidates and asking for --lms-assignment (merge and export ask the same function);
    naming one (as the export writes it, by its name alone or by its id) fills that column, and any other name is
    said to be a new one."""
    from autograder.grading import class_run

    identity = ",".join(rosters.CANVAS_EXPORT_COLUMNS)
    several = _export_with(tmp_path, header=f"{identity},Chapter 1 (51),01_rooflines (52),Quiz 1 (53),Current Score")
    with pytest.raises(SystemExit) as refused:
        class_run.grade(tmp_path, CH, tmp_path / "out", roster=several, lms="canvas")
    said = str(refused.value)
    assert "several of its assignment columns" in said and '--lms-assignment "<column>"' in said
    assert "\n  Chapter 1 (51)\n  01_rooflines (52)\n" in said and "Quiz 1" not in said
    assert not (tmp_path / "out").exists()
    none = _export_with(tmp_path, header=f"{identity},Quiz 1 (53),Week 2 (54),Current Score")
    with pytest.raises(SystemExit, match=r"none of its assignment columns .*\n  Quiz 1 \(53\)\n  Week 2 \(54\)\n"):
        class_run.grade(tmp_path, CH, tmp_path / "out", roster=none, lms="canvas")
    assert not (tmp_path / "out").exists()

    from autograder.intake import canvas_columns

    title = canvas_columns.chapter_title(course.SOLUTIONS / f"{CH}.ipynb")
    assert canvas_columns.choose(several, CH, title, "Chapter 1 (51)") == canvas_columns.Choice("Chapter 1 (51)")
    assert canvas_columns.choose(several, CH, title, "52").column == "01_rooflines (52)"
    assert canvas_columns.choose(several, CH, title, "01_rooflines").column == "01_rooflines (52)"
    new = canvas_columns.choose(several, CH, title, "Notebook 1")
    assert new.column == "Notebook 1" and "new assignment" in new.note
    ours = tmp_path / "ours.csv"
    ours.write_text("student,name\nx,X\n", encoding="utf-8")
    assert canvas_columns.choose(ours, CH, title, None) == canvas_columns.Choice(None)  # not Canvas's export: as before
