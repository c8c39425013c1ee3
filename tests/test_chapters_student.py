"""The released chapters as a student meets them: Run All on an untouched notebook, and the set-up cell.

Run All must reach the last cell of every chapter with every figure drawn while no exercise is answered:
each test cell says its exercise is not answered yet, and no demo cell may use an answer (a demo that
called a stub would raise and stop the run here). The set-up cell, where scalelib is missing and the
instructor set no install source, must say what to do in a few lines, without a traceback.

These run in the floor suite (marker ``student``: Colab's JAX), with ``SCALELIB_STRICT_CHECKS`` unset,
as in a student's kernel. Grading and the solution notebooks run strict.
"""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import course
from autograder.instructor import release
from scalelib import exercise
from tests.conftest import FAST_COMPILE_XLA_FLAGS, IpcKernelManager

pytestmark = pytest.mark.student

COUNT_FIGURES = """import matplotlib.figure as _mf
_figures_made = []
_figure_init = _mf.Figure.__init__
def _counting_init(self, *args, **kwargs):
    _figure_init(self, *args, **kwargs)
    _figures_made.append(1)
_mf.Figure.__init__ = _counting_init"""

# Make this kernel one where scalelib is not installed: drop the editable install's finder and any
# path entry holding a scalelib folder, then check that the import system agrees.
HIDE_SCALELIB = """import importlib.util, os, sys
sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", type(f).__name__) != "_EditableFinder"]
sys.path[:] = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "scalelib"))]
assert importlib.util.find_spec("scalelib") is None"""


def _execute(nb, cwd, allow_errors=False):
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=allow_errors,
                   kernel_manager_class=IpcKernelManager, resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.fixture
def student_kernel_env(monkeypatch):
    monkeypatch.delenv(exercise.STRICT_ENV, raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # a student's runtime compiles at XLA's defaults, not with the suite's fast-compile flags (tests/conftest.py)
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f not in FAST_COMPILE_XLA_FLAGS]
    monkeypatch.setenv("XLA_FLAGS", " ".join(kept))


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_run_all_of_an_untouched_chapter_reaches_the_end(chapter, student_kernel_env, tmp_path):
    nb = nbformat.read(course.CHAPTERS / f"{chapter}.ipynb", as_version=4)
    cells = nb.cells
    nb.cells = [nbformat.v4.new_code_cell(COUNT_FIGURES), *cells,
                nbformat.v4.new_code_cell("print('figures made:', len(_figures_made))")]
    _execute(nb, tmp_path)  # raises at the first cell that fails, as Run All stops there

    tests = [c for c in cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert tests
    for cell in tests:
        exercise_id = cell.metadata["nbgrader"]["grade_id"]
        said = _text(cell)
        assert f"{exercise_id}: not answered yet" in said or f"{exercise_id}: not checked yet" in said, (exercise_id, said)
        assert "checks passed" not in said and "check passed" not in said, (exercise_id, said)
    images = sum("image/png" in o.get("data", {}) for c in cells if c.cell_type == "code" for o in c.outputs)
    made = int(_text(nb.cells[-1]).split(":")[1])
    assert images == made, f"{made} figures were made but {images} drawn"


def _setup_cell(source: str):
    nb = nbformat.read(course.CHAPTERS / f"{course.chapter_names()[0]}.ipynb", as_version=4)
    (setup,) = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
    release.stamp_install_source(nb, source)
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(HIDE_SCALELIB), setup], metadata=nb.metadata)


def _only_error(nb) -> dict:
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert len(errors) == 1, errors
    return errors[0]


def test_setup_cell_without_scalelib_or_a_source_says_what_to_do(student_kernel_env, tmp_path):
    nb = _execute(_setup_cell(""), tmp_path, allow_errors=True)
    error = _only_error(nb)
    shown = "\n".join(error["traceback"])
    assert "scalelib is not installed" in shown and "upload scalelib's wheel" in shown and "course's link" in shown
    assert len(error["traceback"]) <= 5 and "Traceback" not in shown and "File " not in shown  # no traceback wall
    assert "installing" not in _text(nb.cells[1])


def test_setup_cell_whose_install_fails_says_so_briefly(student_kernel_env, tmp_path):
    missing = os.path.join(str(tmp_path), "nowhere", "scalelib-0.1.0-py3-none-any.whl")
    nb = _execute(_setup_cell(missing), tmp_path, allow_errors=True)
    shown = "\n".join(_only_error(nb)["traceback"])
    assert f"Installing it from {missing} failed" in shown and "upload scalelib's wheel" in shown
    assert "Traceback" not in shown and len(shown.splitlines()) <= 9
