"""autograder.outputs.gradebook, and `nbgrader export` in the course folder it writes (autograder.outputs.nbgrader_export); the
end-to-end checks of a graded class against nbgrader export are in test_grading.py."""

import os
import sys
from pathlib import Path

import pytest

from autograder import safe_text
from autograder.instructor import nbgrader_course
from autograder.outputs import gradebook

pytestmark = pytest.mark.grading


def test_schema_version_read_in_process_equals_alembics_answer(monkeypatch):
    import nbgrader.api

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    current = nbgrader.api.get_alembic_version
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", getattr(current, "original", current))
    from_subprocess = nbgrader.api.get_alembic_version()  # runs `alembic heads`
    nbgrader_course.alembic_head_in_process()
    assert nbgrader.api.get_alembic_version() == from_subprocess


def test_an_nbgrader_id_is_one_safe_folder_name_and_ids_never_share_one():
    """Ids that formgrader would put into its pages unescaped, or that are no folder name of their own, are hashed
    (submissions.file_stem); others are kept. A kept id never holds '~', a hashed one always does."""
    kept = ["alice", "1001", "=1+2", "@SUM(A1)", "Ann Duffy", "zoë", "a.b", "..."]
    assert [gradebook.nbgrader_id(s) for s in kept] == kept
    hashed = ["..", ".", "", "a/b", "../x", 'x"y', "x'y", "a<b", "a>b", "a&b", "a`b", "a\\b", "a~b", "a\x1bb", "a\u202eb"]
    ids = [gradebook.nbgrader_id(s) for s in hashed]
    for s, i in zip(hashed, ids):
        assert "~" in i and "/" not in i and i not in (".", "..") and not i.startswith("."), (s, i)
    assert len(set(ids + kept)) == len(hashed) + len(kept)


def test_rows_an_earlier_grader_wrote_under_unsafe_ids_are_found_told_and_removed_on_request(tmp_path, capsys):
    """Graders before nbgrader_id wrote every id as it was: such rows stay in an old course folder, and formgrader
    would run what they hold. They are named on every grade or merge into the folder, and `forget-unsafe-ids`
    removes them (with --yes) and nothing else."""
    from nbgrader.api import Gradebook

    from autograder.cli.main import main

    course_dir = gradebook.prepare(tmp_path / "course", "01_rooflines")
    bad = ["<img src=x onerror=alert(1)>", 'x"y', "a\x1b[2Jb"]
    kept = ["alice", gradebook.nbgrader_id("<b>"), gradebook.nbgrader_id("c~d")]
    with Gradebook(gradebook.db_url(course_dir)) as gb:
        for sid in [*bad, *kept]:
            gb.add_student(sid)
        with gb.db.no_autoflush:  # as gradebook.record adds them (SQLAlchemy warns otherwise)
            gb.add_submission("01_rooflines", bad[0])
            gb.add_submission("01_rooflines", "alice")
    assert gradebook.unsafe_ids(course_dir) == sorted(bad)
    warning = gradebook.unsafe_ids_warning(course_dir)
    assert warning.startswith("WARNING:") and "3 student rows" in warning and "\x1b" not in warning
    assert f"python -m autograder forget-unsafe-ids {course_dir}" in warning

    assert main(["forget-unsafe-ids", str(course_dir)]) == 0  # lists only
    said = capsys.readouterr().out
    assert "\x1b" not in said and "submissions of 01_rooflines; 0 manual scores" in said and "run again with --yes" in said
    assert gradebook.unsafe_ids(course_dir) == sorted(bad)
    assert main(["forget-unsafe-ids", str(course_dir), "--yes"]) == 0
    assert "3 rows removed" in capsys.readouterr().out
    assert gradebook.unsafe_ids(course_dir) == [] and gradebook.unsafe_ids_warning(course_dir) == ""
    with Gradebook(gradebook.db_url(course_dir)) as gb:
        assert sorted(s.id for s in gb.students) == sorted(kept)
        assert gb.find_submission("01_rooflines", "alice")
    assert main(["forget-unsafe-ids", str(tmp_path)]) == 2  # not a course folder: said, nothing done
    assert "no gradebook.db" in capsys.readouterr().err


# Issue 48: ids a student chose (file names give the ids), roster names and emails, each of which nbgrader's own CSV
# export (fields joined with "," and never quoted) would write as a formula cell or as shifted columns
EXPORT_CLASS = {  # student -> (roster row or None, points per exercise: the first n exercises answered)
    "=1+1": ({"name": "Eq Uals", "email": "=HYPERLINK(\"http://x\")"}, 1),
    "a;b,c": ({"name": "Semi, Colon", "email": "a@b.c,=2+2"}, 2),
    "+cmd|' /C calc'!A0": (None, 3),  # off the roster: the id is the name formgrader shows
    "new\nline": (None, 4),  # a line break in the id, hence in the last name
    "plain": ({"name": "Line\nBreak -1+1", "email": "plain@example.org\n@SUM(A1)"}, 5),
    "bidi": ({"name": "\u202eEve Gnp.exe", "email": "eve\x1b[2J@example.org"}, 6),  # formgrader shows them too
    "absent": ({"name": "@Not Here", "email": ""}, 0),  # on the roster, no file: exported with 0
}


def test_nbgrader_export_in_the_course_folder_writes_a_csv_that_is_safe_to_open(tmp_path):
    """The README's route to a CSV, `nbgrader export` run in the course folder the grader wrote, goes through the
    folder's own exporter (autograder.outputs.nbgrader_export): nbgrader's columns, each row as wide as the header, no cell
    that a spreadsheet would run as a formula (a leading = + - @ tab or CR is behind an apostrophe, as in grades.csv),
    no line break or comma that moves a column; --student and --assignment choose rows as nbgrader's do. Under
    nbgrader's own exporter (the config before issue 48), `a;b,c`'s row has 12 cells and `=1+1`'s id is a formula."""
    import csv
    import subprocess

    from nbgrader.api import Gradebook

    from autograder import course
    from autograder.instructor import chapter_model
    from autograder.outputs.nbgrader_export import COLUMNS
    from autograder.results import Status, StudentResult

    chapter = "01_rooflines"
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb")
    results, roster, expected = [], [], {}
    for student, (row, answered) in EXPORT_CLASS.items():
        points = {e: (x.points if i < answered else 0.0) for i, (e, x) in enumerate(ch.exercises.items())}
        status = Status.MISSING if student == "absent" else Status.GRADED
        results.append(StudentResult(student, status, sum(points.values()), ch.max_score, points))
        expected[gradebook.nbgrader_id(student)] = 0.0 if status == Status.MISSING else sum(points.values())
        if row is not None:
            roster.append({"student": student, **row})
    course_dir = gradebook.write(tmp_path / "course", chapter, results, roster=roster).parent

    nbgrader = Path(sys.executable).parent / "nbgrader"

    def export(*args: str) -> list[list[str]]:
        target = tmp_path / "export.csv"
        target.unlink(missing_ok=True)
        subprocess.run([str(nbgrader), "export", "--to", str(target), *args], cwd=course_dir, check=True,
                       capture_output=True)
        with target.open(newline="", encoding="utf-8") as f:
            return list(csv.reader(f))

    header, *rows = export()
    assert header == list(COLUMNS) == ["assignment", "duedate", "timestamp", "student_id", "last_name",
                                       "first_name", "email", "raw_score", "late_submission_penalty", "score",
                                       "max_score"]  # nbgrader 0.9's CsvExportPlugin's columns, in its order
    assert len(rows) == len(EXPORT_CLASS)
    for row in rows:
        assert len(row) == len(header), row
        for value in row:
            assert not value.startswith(safe_text.FORMULA_TRIGGERS), row
            assert value.isprintable(), row  # no line break, no control or format character
    got = {safe_text.uncell(r[3]): r for r in rows}
    assert set(got) == set(expected)
    for sid, score in expected.items():
        r = dict(zip(header, got[sid]))
        assert r["assignment"] == chapter
        assert float(r["score"]) == float(r["raw_score"]) == pytest.approx(score), r
        assert float(r["max_score"]) == ch.max_score and float(r["late_submission_penalty"]) == 0
    shown = {sid: dict(zip(header, r)) for sid, r in got.items()}
    assert safe_text.uncell(shown["=1+1"]["email"]) == '=HYPERLINK("http://x")'
    assert safe_text.uncell(shown["a;b,c"]["email"]) == "a@b.c,=2+2"
    assert (shown["a;b,c"]["first_name"], shown["a;b,c"]["last_name"]) == ("Colon", "Semi")
    assert shown["absent"]["timestamp"] == ""
    odd = gradebook.nbgrader_id("+cmd|' /C calc'!A0")
    assert safe_text.uncell(shown[odd]["last_name"]) == "+cmd|' /C calc'!A0"
    assert safe_text.uncell(shown[gradebook.nbgrader_id("new\nline")]["last_name"]) == "new\nline"
    assert shown["plain"]["email"] == "plain@example.org\\x0a@SUM(A1)"
    assert (shown["bidi"]["first_name"], shown["bidi"]["email"]) == ("\\u202eEve", "eve\\x1b[2J@example.org")
    with Gradebook(gradebook.db_url(course_dir)) as gb:  # what formgrader's pages show: no raw control character
        held = [t for s in gb.students for t in (s.id, s.first_name, s.last_name, s.email) if t]
    assert held and all(t.isprintable() for t in held), held

    # nbgrader's options reach the folder's exporter and choose the rows as its own exporter does: both flags in one
    # more run of the command (each start imports nbgrader, some 4 CPU-s), the other choices on the same exporter
    # with the options set as ExportApp sets them
    chosen = export("--assignment", chapter, "--student", "a;b,c", "--student", "plain")
    assert chosen[0] == header and sorted(safe_text.uncell(r[3]) for r in chosen[1:]) == ["a;b,c", "plain"]

    from autograder.outputs.nbgrader_export import SafeCsvExportPlugin

    def export_in_process(**options: list[str]) -> list[list[str]]:
        target = tmp_path / "in-process.csv"
        with Gradebook(gradebook.db_url(course_dir)) as gb:
            SafeCsvExportPlugin(to=str(target), **options).export(gb)
        with target.open(newline="", encoding="utf-8") as f:
            return list(csv.reader(f))

    assert export_in_process() == [header, *rows]  # the same file as the command wrote
    assert len(export_in_process(assignment=[chapter])) == len(EXPORT_CLASS) + 1
    assert export_in_process(assignment=["no_such_chapter"]) == [header]


def test_the_graded_copy_shows_what_a_student_printed_escaped_never_raw():
    """Issue 48: formgrader opens each graded copy (and nbgrader's feedback is made from it): the student's answer
    code in its answer cell, and under each test cell what the grader found, quoting what the student's code printed
    or raised. JupyterLab acts on a terminal's escape sequences in a notebook's output and browsers on bidirectional
    overrides: in the copy each shows as its escape, lines and tabs kept. The summary cell and the comments were
    escaped before (safe_text.markdown_literal, markdown_inert)."""
    import json

    import nbformat

    from autograder import course
    from autograder.instructor import chapter_model
    from autograder.results import Status, StudentResult
    from tests.notebook_answers import answered
    from tests.test_safe_text import STUDENT_OUTPUT, assert_shown_escaped, raw_controls

    chapter = "01_rooflines"
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb")
    first, second = list(ch.exercises)[:2]

    def hostile(gid: str, src: str) -> str:
        return f"# {STUDENT_OUTPUT}\n{src}" if gid == course.answer_id(first) else src

    submission = nbformat.writes(answered(chapter, hostile)).encode()
    r = StudentResult("eve", Status.CRASHED, 0.0, ch.max_score, dict.fromkeys(ch.exercises, 0.0),
                      detail=f"kernel said {STUDENT_OUTPUT}",
                      messages={first: f"ExerciseError: {STUDENT_OUTPUT}"}, outputs={second: STUDENT_OUTPUT})
    released = json.loads((course.CHAPTERS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    nb = gradebook.graded_copy(released, r, ch, submission)

    def texts(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        return [t for item in items for t in texts(item)]

    assert [safe_text.printable(c) for t in texts(nb) for c in raw_controls(t)] == []
    cells = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): c for c in nb["cells"]}
    answer = "".join(cells[course.answer_id(first)]["source"])
    assert_shown_escaped(answer)
    assert answer.startswith("# cleared \\x1b[2J") and "\n" in answer
    for eid, quoted in [(first, "ExerciseError: cleared"), (second, "the test printed:\ncleared")]:
        output = "".join(cells[eid]["outputs"][0]["text"])
        assert quoted in output
        assert_shown_escaped(output)
