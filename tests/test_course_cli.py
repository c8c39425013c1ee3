"""course.py, the two-command entry point: work copies for JupyterLab and the two suites; and two properties of
``python -m autograder``'s command line that need no grading run (its paths, and how ``doctor`` prints)."""

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

import course


def test_work_copies_carry_the_kernel_language_info_and_are_never_overwritten(tmp_path):
    chapters, work = tmp_path / "chapters", tmp_path / "work"
    chapters.mkdir()
    nb = {"cells": [], "metadata": {"kernelspec": {"name": "python3"}, "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (chapters / "01_intro.ipynb").write_text(json.dumps(nb))
    info = {"name": "python", "version": "3.12.1", "mimetype": "text/x-python"}
    assert course.make_work_copies(info, chapters, work) == []
    copy = json.loads((work / "01_intro.ipynb").read_text())
    assert copy["metadata"]["language_info"] == info and copy["metadata"]["kernelspec"] == {"name": "python3"}

    (work / "01_intro.ipynb").write_text((work / "01_intro.ipynb").read_text().replace('"cells": []', '"cells": [1]'))
    nb["cells"] = [{"cell_type": "markdown", "metadata": {}, "source": "new"}]
    (chapters / "01_intro.ipynb").write_text(json.dumps(nb))
    assert course.make_work_copies(info, chapters, work) == ["01_intro"]  # a newer release is reported...
    assert json.loads((work / "01_intro.ipynb").read_text())["cells"] == [1]  # ...and the student's copy kept


def _pins(constraints):
    """{package: version} of a constraints file."""
    return dict(line.split("==") for line in constraints.read_text().splitlines() if "==" in line)


def test_the_floor_suite_tests_the_lowest_jax_the_package_declares():
    env, args = course.SUITES["floor"]
    assert args[args.index("-m") + 1] == "not grading and not health and not sweep" and "tests" in args and "solutions" in args
    pins = _pins(env.constraints)
    declared = re.search(r'"jax>=([\d.]+),', (course.ROOT / "pyproject.toml").read_text()).group(1)
    assert pins["jax"] == pins["jaxlib"] == declared


def test_the_installers_are_pinned_too(monkeypatch):
    """What install_pinned runs: pip installs uv under the constraints, uv installs the package and pip under them
    (both pinned in each file, so no install step takes whatever the index holds that day)."""
    for env in (course.CURRENT, course.FLOOR):
        assert {"pip", "uv"} <= _pins(env.constraints).keys(), env.constraints
    calls = []
    monkeypatch.setattr(course, "run", lambda cmd, **kw: calls.append([str(c) for c in cmd]))
    monkeypatch.setattr(course.subprocess, "run", lambda cmd, **kw: calls.append(cmd))
    course.install_pinned(course.FLOOR, "test", course.FLOOR.path.relative_to(course.ROOT))
    pip, uv, warm = calls
    assert pip[1:] == ["-m", "pip", "install", "-q", "-c", str(course.FLOOR.constraints), "uv"]
    assert uv[0] == str(course.FLOOR.bin / "uv") and uv[uv.index("-c") + 1] == str(course.FLOOR.constraints)
    assert uv[-3:] == ["-e", ".[test]", "pip"] and warm[-2:] == ["-c", course.WARM_KERNEL]

    def uv_fails(cmd: list, **kw: object) -> None:  # uv cannot reach the index pip is configured for
        calls.append([str(c) for c in cmd])
        if cmd[0] == course.FLOOR.bin / "uv":
            raise course.subprocess.CalledProcessError(2, cmd)

    calls.clear()
    monkeypatch.setattr(course, "run", uv_fails)
    course.install_pinned(course.FLOOR, "test", course.FLOOR.path.relative_to(course.ROOT))
    assert calls[2][1:] == ["-m", "pip", "install", "-q", *uv[uv.index("-c"):]] and calls[3] == warm


def test_lab_opens_the_first_chapter_and_passes_options_to_jupyterlab(tmp_path):
    for name in ("02_tpus.ipynb", "01_rooflines.ipynb", "notes.ipynb"):
        (tmp_path / name).write_text("{}")
    cmd = course.lab_command(tmp_path / "python", tmp_path, ["--port", "8890", "--no-browser"], as_root=False)
    assert cmd[1:4] == ["-m", "jupyter", "lab"] and f"--ServerApp.root_dir={tmp_path}" in cmd
    assert "--LabApp.default_url=/lab/tree/01_rooflines.ipynb" in cmd and "--allow-root" not in cmd
    assert cmd[-3:] == ["--port", "8890", "--no-browser"]  # the student's options last: they win
    assert "--allow-root" in course.lab_command(tmp_path / "python", tmp_path, [], as_root=True)


def test_each_suite_run_compiles_into_its_own_new_cache_folder_removed_after(monkeypatch, tmp_path):
    """Workers, kernels and ranks of one run share stored programs; no program outlives its run (the sources may
    change before the next), a folder the host set is not used, and an interrupted run cleans up too."""
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "host-cache"))
    monkeypatch.setattr(course, "ensure_env", lambda *a, **kw: None)
    seen = []

    def fake_run(cmd: list, cwd: Path, env: dict) -> course.subprocess.CompletedProcess:
        folder = Path(env["JAX_COMPILATION_CACHE_DIR"])
        seen.append(folder)
        assert folder.is_dir() and not list(folder.iterdir())
        assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
        assert folder.stat().st_mode & 0o077 == 0  # nobody else on the host (a sandboxed kernel) can open it
        (folder / "program").write_bytes(b"compiled")
        if len(seen) == 3:
            raise KeyboardInterrupt
        return course.subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(course.subprocess, "run", fake_run)
    assert course.run_suite("current", [])[0] == 0 and course.run_suite("floor", [])[0] == 0
    with pytest.raises(KeyboardInterrupt):
        course.run_suite("current", [])
    assert len(set(seen)) == 3 and tmp_path / "host-cache" not in seen
    assert not [folder for folder in seen if folder.exists()]


def test_grade_receives_every_path_of_the_command_line_absolute(tmp_path, monkeypatch):
    """Issue 48: a relative ``--out`` meant another folder once the process's working directory moved while the
    grader's threads ran; the entry resolves every path once, before any thread starts."""
    from autograder.cli import main as cli
    from autograder.grading import class_run

    seen = {}

    def fake_grade(path, chapter, out, **kwargs):
        seen.update(path=path, out=out, roster=kwargs["roster"], nbgrader_dir=kwargs["nbgrader_dir"])
        return []

    monkeypatch.setattr(class_run, "grade", fake_grade)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["grade", "subs.zip", "--chapter", "01", "--out", "OUT", "--roster", "people/roster.csv",
                     "--nbgrader-course", "../course"]) == cli.GRADED
    here = tmp_path.resolve()
    assert seen == {"path": here / "subs.zip", "out": here / "OUT", "roster": here / "people" / "roster.csv",
                    "nbgrader_dir": here.parent / "course"}


def test_doctor_prints_each_check_before_the_next_one_runs(monkeypatch):
    """``doctor``'s checks take seconds each (sandboxes and kernels are started): each line is printed and flushed
    as soon as its check is known, not all of them at the end. Checked by what had been flushed when each later
    check started, not by timing."""
    from autograder.cli import main as cli
    from autograder.kernel import forkserver, library_proof
    from autograder.sandbox import probes

    flushed: list[str] = []

    class Console(io.StringIO):
        def flush(self) -> None:
            flushed.append(self.getvalue())

    started: dict[str, str] = {}

    def stage(name, result):
        def run(*_args, **_kwargs):
            started[name] = flushed[-1] if flushed else ""
            return result
        return run

    check = probes.HostCheck
    monkeypatch.setattr(probes, "host_checks", stage("sandbox", [check("user namespaces", True, "fine", True),
                                                                   check("memory cgroup", False, "polled", False)]))
    monkeypatch.setattr(forkserver, "host_checks", stage("fork server", [check("fork server", True, "forks", False)]))
    monkeypatch.setattr(library_proof, "doctor", stage("scalelib", (True, "the grader's own")))
    console = Console()
    with contextlib.redirect_stdout(console):
        assert cli.main(["doctor"]) == 0
    assert started["sandbox"] == ""
    assert started["fork server"].splitlines() == ["ok    user namespaces: fine", "weak  memory cgroup: polled"]
    assert started["scalelib"].splitlines()[-1] == "ok    fork server: forks"
    assert flushed[-1].splitlines()[-1] == "ok    kernels' scalelib: the grader's own"


def test_export_refuses_what_is_no_finished_class_it_can_rewrite(tmp_path, capsys):
    """Issue 48: `python -m autograder export` rewrites a class's files from its results/ and gradebook; it refuses,
    naming what to do, a folder without shard.json, a shard (it has no gradebook), a run that did not finish, another
    roster than the class's, and a folder without a gradebook. Nothing is written when it refuses."""
    from autograder.cli.main import main
    from autograder.course import SOLUTIONS
    from autograder.grading import shards

    solution_hash = shards.sha256_file(SOLUTIONS / "01_rooflines.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("student\nann\n", encoding="utf-8")

    def out_with(name: str, shard: tuple[int, int], complete: bool, roster_hash: str = "") -> Path:
        out = tmp_path / name
        out.mkdir()
        shards.write_marker(out, shards.Marker("01_rooflines", shard, "6", solution_hash, True,
                                               roster_hash=roster_hash), [], complete=complete)
        return out

    cases = [(tmp_path / "empty", "nothing to export"),
             (out_with("shard", (1, 2), True), "is shard 1/2 of a class, which has no gradebook"),
             (out_with("stopped", (0, 1), False), "did not finish"),
             (out_with("roster", (0, 1), True, shards.sha256_file(roster)), "graded with another roster"),
             (out_with("book", (0, 1), True), "no gradebook.db in")]
    (tmp_path / "empty").mkdir()
    for out, said in cases:
        args = ["export", "--out", str(out)] + (["--roster", str(out / "other.csv")] if out.name == "roster" else [])
        if out.name == "roster":
            (out / "other.csv").write_text("student\nbob\n", encoding="utf-8")
        with pytest.raises(SystemExit, match=said):
            main(args)
        assert not [p.name for p in out.iterdir() if p.suffix == ".csv" and p.name != "other.csv"], out
