"""chapters/ is generated from solutions/: in sync, deterministic, and stamped from one setting."""

import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder import course, release

pytestmark = pytest.mark.grading


def test_chapters_in_sync_with_solutions():
    assert release.stale() == [], "run `python -m autograder release` and commit chapters/"


def test_release_is_deterministic():
    name = course.chapter_names()[0]
    assert release.render(name) == release.render(name)


def test_student_notebooks_have_no_solutions_or_hidden_tests():
    for name in course.chapter_names():
        text = (course.CHAPTERS / f"{name}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
        nb = nbformat.read(course.CHAPTERS / f"{name}.ipynb", as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def _copy_course(tmp_path):
    for part in ("solutions", "chapters"):
        shutil.copytree(course.ROOT / part, tmp_path / part)
    shutil.copy(course.ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_check_detects_a_stale_chapter(tmp_path):
    root = _copy_course(tmp_path)
    name = course.chapter_names(root)[0]
    nb = nbformat.read(root / "solutions" / f"{name}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new paragraph."))
    nb.cells[-1]["id"] = "added-cell"
    nbformat.write(nb, root / "solutions" / f"{name}.ipynb")
    assert release.stale(root) == [name]
    release.release(root)
    assert release.stale(root) == []


def test_install_source_is_stamped_from_pyproject(tmp_path):
    root = _copy_course(tmp_path)
    toml = (root / "pyproject.toml").read_text()
    mine = "scalelib @ git+https://example.org/my-fork@v1"
    toml = toml.replace(course.settings().install_source, mine)
    (root / "pyproject.toml").write_text(toml)
    name = course.chapter_names(root)[0]
    nb = nbformat.reads(release.render(name, root), as_version=4)
    setup = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
    assert f'%pip install -q "{mine}"' in setup[0].source


def test_stamp_requires_exactly_one_pip_line():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nb.cells[0].metadata["tags"] = ["setup"]
    with pytest.raises(RuntimeError, match="exactly one"):
        release.stamp_install_source(nb, "x")


def test_cli_check_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "autograder", "check"], capture_output=True, text=True, cwd=course.ROOT)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "autograder", "grade", "/nonexistent", "--chapter", "99"],
                         capture_output=True, text=True, cwd=course.ROOT)
    assert bad.returncode != 0 and "unknown chapter" in bad.stderr
