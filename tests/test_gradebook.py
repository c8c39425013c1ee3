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
