"""The instructor's set-up (issue 20, item 7): one command makes the environment `release` and `grade` need, and
the install source is stored once, in pyproject.toml, where release, a partial release and check all read it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import tomllib

import course as course_cli
from autograder import course
from autograder.instructor import release

pytestmark = pytest.mark.grading

FORK = "scalelib @ git+https://github.com/someone/their-fork@v3"


def _copy_course(tmp_path: Path, chapters: int = 2) -> Path:
    """The course with its first ``chapters`` chapters (each release renders them through nbgrader)."""
    keep = course.chapter_names()[:chapters]
    for part in ("solutions", "chapters"):
        (tmp_path / part).mkdir()
        for name in keep:
            shutil.copy(course.ROOT / part / f"{name}.ipynb", tmp_path / part / f"{name}.ipynb")
    manifest = json.loads((course.CHAPTERS / release.MANIFEST).read_text())
    (tmp_path / "chapters" / release.MANIFEST).write_text(json.dumps({k: manifest[k] for k in keep}))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(course.ROOT / part, tmp_path / part)
    return tmp_path


def _stamped(root: Path, chapter: str) -> str:
    nb = nbformat.read(root / "chapters" / f"{chapter}.ipynb", as_version=4)
    setup = next(c for c in nb.cells if "setup" in c.metadata.get("tags", []))
    return re.search(r'SCALELIB_SOURCE = "([^"]*)"', setup.source).group(1)


def test_the_install_source_is_remembered_by_check_and_a_partial_release(tmp_path):
    root = _copy_course(tmp_path)
    first, second = course.chapter_names(root)[:2]
    before = (root / "pyproject.toml").read_text()
    assert course.store_install_source(FORK, root)  # what `release --install-source FORK` does first
    after = (root / "pyproject.toml").read_text()
    assert tomllib.loads(after)["tool"]["scalelib-course"]["install-source"] == FORK
    # one line changed, the comments around it kept
    assert [a for a, b in zip(after.splitlines(), before.splitlines()) if a != b] == [f'install-source = "{FORK}"']
    assert not course.store_install_source(FORK, root)  # stored already: nothing to write

    release.release(root)  # a plain release after it: every chapter stamped with the stored source
    assert release.check(root) == []  # a plain check does not call for a release that would erase it
    release.release(root, [first])  # a partial release keeps it too
    assert release.check(root) == []
    assert _stamped(root, first) == _stamped(root, second) == FORK
    assert "colab.research.google.com/github/someone/their-fork/blob/v3/chapters/" in (root / "README.md").read_text()


def test_a_changed_stored_source_makes_check_name_every_chapter(tmp_path):
    root = _copy_course(tmp_path)
    course.store_install_source(FORK, root)
    stale = {s.chapter for s in release.check(root)}
    assert stale == set(course.chapter_names(root)) | {"README.md"}


def test_an_install_source_that_cannot_be_stored_is_refused_with_a_reason(tmp_path):
    root = _copy_course(tmp_path)
    for bad in ('scalelib @ "x"', "a\nb", "back\\slash"):
        with pytest.raises(SystemExit, match="must not contain"):
            course.store_install_source(bad, root)
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text().replace('install-source = ""', ""))
    with pytest.raises(SystemExit, match="exactly one line"):
        course.store_install_source(FORK, root)


def test_check_takes_no_install_source_of_its_own():
    from autograder.cli.main import main

    with pytest.raises(SystemExit):
        main(["check", "--install-source", FORK])  # argparse: unrecognised; the stored one is the only one


def test_one_command_sets_up_the_instructors_environment(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(course_cli, "ensure_env", lambda env, extra, pinned: calls.append((env, extra, pinned)))
    assert course_cli.main(["instructor"]) == 0
    [(env, extra, pinned)] = calls
    assert env is course_cli.CURRENT and pinned
    extras = tomllib.loads((course.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = {req.split(">")[0].split("[")[0].split(";")[0].strip()
              for part in extra.split(",") for req in extras[part]}
    assert {"nbgrader", "jupyterlab", "nbformat", "nbclient"} <= wanted  # release, grade, formgrader, editing
    printed = capsys.readouterr().out
    assert "-m autograder release" in printed and "formgrader" in printed
    readme = (course.ROOT / "README.md").read_text()
    assert "python3 course.py instructor" in readme

