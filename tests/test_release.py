"""chapters/ is generated from solutions/: in sync, deterministic, and stamped from one setting."""

import re
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from autograder import course
from autograder.instructor import release

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
            exercise = cell.metadata["nbgrader"]["grade_id"].removesuffix(course.ANSWER_SUFFIX)
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


def test_every_set_up_cell_is_the_template_folded_with_the_installer_of_bootstrap():
    import inspect

    from scalelib import bootstrap

    installer_body = inspect.getsource(bootstrap.install_scalelib).split('"""')[-1]  # the code after the docstring
    source = course.settings().install_source
    for folder, stamped in ((course.SOLUTIONS, ""), (course.CHAPTERS, source)):
        for name in course.chapter_names():
            nb = nbformat.read(folder / f"{name}.ipynb", as_version=4)
            (setup,) = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
            assert nb.cells.index(setup) == 1 and setup.source == release.setup_cell_source(stamped), (folder, name)
            assert setup.metadata["cellView"] == "form" and setup.metadata["jupyter"] == {"source_hidden": True}
            assert "\n".join(("    " + line) if line.strip() else "" for line in installer_body.splitlines()) \
                in setup.source  # the installer's code, as bootstrap.py has it, under the cell's `if`


def test_check_catches_a_hand_edited_set_up_cell_and_release_restores_it(tmp_path):
    root = _copy_course(tmp_path)
    first, second = course.chapter_names(root)[:2]
    for folder, name in (("solutions", first), ("chapters", second)):
        nb = nbformat.read(root / folder / f"{name}.ipynb", as_version=4)
        (setup,) = [c for c in nb.cells if "setup" in c.metadata.get("tags", [])]
        setup.source = setup.source.replace("devices.setup(8)", "devices.setup(4)")
        nbformat.write(nb, root / folder / f"{name}.ipynb")
    found = {s.chapter: s.reason for s in release.check(root)}
    assert "set-up cell differs from setup_cell.ipy" in found[first] and "edited by hand" in found[second]
    assert release.stamp_solution(root, first) == [root / "solutions" / f"{first}.ipynb"]
    assert release.stamp_solution(root, first) == []  # stamped once, unchanged the second time
    assert first not in {s.chapter for s in release.check(root)}


def _solution(name):
    return nbformat.read(course.SOLUTIONS / f"{name}.ipynb", as_version=4)


def test_exercise_ids_and_points_written_for_students_agree_with_the_metadata():
    for name in course.chapter_names():
        assert release.exercise_text_problems(_solution(name)) == [], name
    nb = _solution("01_rooflines")
    test = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01-einsum-intensity")
    test.metadata["nbgrader"]["points"] = 3  # the header and the test cell still say 2
    other = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ch01-ex1-1-int8")
    other.source = other.source.replace('visible_checks("ch01-ex1-1-int8")', 'visible_checks("ch01-ex1-2-mixed")')
    problems = release.exercise_text_problems(nb)
    assert any(p.startswith("ch01-einsum-intensity: its test cell starts") for p in problems)
    assert "ch01-einsum-intensity: the markdown says 2 points, its metadata 3 points" in problems
    assert any(p.startswith("ch01-ex1-1-int8: its test cell's ex.visible_checks name ['ch01-ex1-2-mixed']")
               for p in problems)
    assert len(problems) == 3, problems


def test_every_answer_cells_id_names_an_exercise_with_a_grade_cell():
    """The one rule (course.answer_id / exercise_of_answer) that release, align and gradebook read ids by."""
    assert course.exercise_of_answer(course.answer_id("ch01-x")) == "ch01-x"
    assert [course.exercise_of_answer(g) for g in ("ch01-x", "ch01-x-answers", "answer")] == [None, None, None]
    for name in course.chapter_names():
        cells = [c.metadata.get("nbgrader", {}) for c in _solution(name).cells]
        answered = [course.exercise_of_answer(m["grade_id"]) for m in cells if m.get("solution")]
        graded = {m["grade_id"] for m in cells if m.get("grade")}
        assert answered and None not in answered and set(answered) <= graded, (name, answered, graded)


def test_the_student_wheel_holds_scalelib_only_and_the_editable_install_adds_autograder(monkeypatch):
    """setup.py's choice, read without building (a real `pip wheel .` needs setuptools from the index)."""
    import setuptools

    chosen = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: chosen.update(kw))
    monkeypatch.chdir(course.ROOT)
    for command in ("bdist_wheel", "editable_wheel"):
        monkeypatch.setattr(sys, "argv", ["setup.py", command])
        exec(compile((course.ROOT / "setup.py").read_text(), "setup.py", "exec"), {"__name__": "__main__"})
        tops = {p.split(".")[0] for p in chosen["packages"]}
        assert tops == ({"scalelib", "autograder"} if command == "editable_wheel" else {"scalelib"}), command
        assert "scalelib.parallel" in chosen["packages"]
    assert "/dist/" in (course.ROOT / ".gitignore").read_text().splitlines()
