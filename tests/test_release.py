"""chapters/ is generated from solutions/: in sync, deterministic, and stamped from one setting."""

import re
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from autograder import course, release

pytestmark = pytest.mark.grading


def test_chapters_in_sync_with_solutions():
    # Both ways: `check`'s fingerprints, and every chapter rendered again and compared byte for byte.
    assert release.check() == [], "run `python -m autograder release` and commit chapters/ and README.md"
    assert release.stale(full=True) == [], "run `python -m autograder release` and commit chapters/"


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
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(course.ROOT / part, tmp_path / part)
    return tmp_path


def test_check_detects_a_changed_solution_and_a_hand_edited_chapter(tmp_path):
    root = _copy_course(tmp_path)
    first, second = course.chapter_names(root)[:2]
    assert release.check(root) == []
    nb = nbformat.read(root / "solutions" / f"{first}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new paragraph."))
    nb.cells[-1]["id"] = "added-cell"
    nbformat.write(nb, root / "solutions" / f"{first}.ipynb")
    student = root / "chapters" / f"{second}.ipynb"
    student.write_text(student.read_text().replace("Exercise", "Exercice", 1))
    found = {s.chapter: s.reason for s in release.check(root)}
    assert set(found) == {first, second}
    assert "solutions/" in found[first] and "edited by hand" in found[second]
    release.release(root, [first, second])
    assert release.check(root) == []
    assert release.stale(root) == []


def test_check_detects_a_changed_install_source_and_readme(tmp_path):
    root = _copy_course(tmp_path)
    problems = release.check(root, install_source="scalelib @ git+https://github.com/someone/fork@v2")
    assert {p.chapter for p in problems} == set(course.chapter_names(root)) | {"README.md"}
    assert all("install_source" in p.reason for p in problems if p.chapter != "README.md")


def test_install_source_is_stamped_from_pyproject_or_the_command_line(tmp_path):
    root = _copy_course(tmp_path)
    toml = (root / "pyproject.toml").read_text()
    mine = "scalelib @ git+https://example.org/my-fork@v1"
    toml = re.sub(r'(?m)^install-source = ".*"$', f'install-source = "{mine}"', toml)
    (root / "pyproject.toml").write_text(toml)
    name = course.chapter_names(root)[0]
    nb = nbformat.reads(release.render(name, root), as_version=4)
    setup = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
    assert f'SCALELIB_SOURCE = "{mine}"' in setup[0].source
    other = "scalelib @ git+https://github.com/someone/fork@v2"
    nb = nbformat.reads(release.render(name, root, install_source=other), as_version=4)
    assert f'SCALELIB_SOURCE = "{other}"' in nb.cells[[c.metadata.get("tags") for c in nb.cells].index(["setup"])].source


def test_stamp_requires_exactly_one_source_line():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    nb.cells[0].metadata["tags"] = ["setup"]
    with pytest.raises(release.ReleaseError, match="exactly one"):
        release.stamp_install_source(nb, "x")


def test_stubs_name_their_exercise_and_metadata_matches_what_jupyterlab_writes():
    from scalelib.exercise import stub_message

    for name in course.chapter_names():
        nb = nbformat.read(course.CHAPTERS / f"{name}.ipynb", as_version=4)
        assert nb.metadata["kernelspec"] == release.NOTEBOOK_METADATA["kernelspec"]
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert answers
        for cell in answers:
            exercise = cell.metadata["nbgrader"]["grade_id"].removesuffix("-answer")
            assert f'raise NotImplementedError("{stub_message(exercise)}")' in cell.source
            assert "write your answer here" not in cell.source


def test_readme_table_links_chapters_to_colab_only_for_a_github_source():
    readme = (course.ROOT / "README.md").read_text()
    names = course.chapter_names()
    github = release.readme_with_table(readme, names, "scalelib @ git+https://github.com/ann/scale-course@v3")
    url = "https://colab.research.google.com/github/ann/scale-course/blob/v3/chapters/01_rooflines.ipynb"
    assert f"[`01_rooflines`]({url})" in github
    plain = release.readme_with_table(github, names, "scalelib @ git+https://example.org/x@main")
    assert plain == release.readme_with_table(readme, names, "") and "colab.research" not in plain
    with pytest.raises(release.ReleaseError, match="no row for 01_rooflines"):
        release.readme_with_table(readme.replace("| 1 | `01_rooflines`", "| 1 | `00_intro`"), names, "")


def test_release_warns_loudly_when_no_install_source_is_set(capsys):
    release.warn_if_unconfigured("")
    assert "install-source is not set" in capsys.readouterr().err
    release.warn_if_unconfigured("scalelib @ git+https://github.com/ann/scale-course@v3")
    assert capsys.readouterr().err == ""


def test_cli_check_exit_codes():
    start = time.perf_counter()
    ok = subprocess.run([sys.executable, "-m", "autograder", "check"], capture_output=True, text=True, cwd=course.ROOT)
    print(f"`python -m autograder check` took {time.perf_counter() - start:.2f} s")
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, "-m", "autograder", "grade", "/nonexistent", "--chapter", "99"],
                         capture_output=True, text=True, cwd=course.ROOT)
    assert bad.returncode != 0 and "unknown chapter" in bad.stderr
