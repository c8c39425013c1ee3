"""autograder.gradebook (the end-to-end checks against nbgrader export are in test_grading.py)."""

import os
import sys
from pathlib import Path

import pytest

from autograder import gradebook, nbgrader_course

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

    from autograder.__main__ import main

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
