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
