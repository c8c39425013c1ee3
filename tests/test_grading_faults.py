"""Whose fault a zero is, on a tiny synthetic chapter (issue 20, items 2, 4 and 5).

One grading run of five students, with three faults injected into the grader: the first grading of ``flaky``
raises the interpreter fault CPython 3.11 can raise (cpython#106905), the first write of the nbgrader gradebook
fails the same way, and the first binding of the set-up's values in ``unbound``'s fresh kernel fails as it does when
the machine is too loaded to finish it in time. Each is retried once; the run ends with grades.csv and the gradebook. ``lister`` answers
correctly in a way the test's probe helper did not expect, so the helper (not the student's function) raises: that
is reported as the test's fault. ``stub`` left the stubs: "not answered yet".

The run is started as an instructor would from a shell (issue 48): from the course's folder, with the export and
``--out`` given as relative paths, the grader's console captured. Its answers print (to stdout and stderr) and its
test cells wrap their visible checks in ``ex.visible_checks``, which prints that they passed: none of it may reach
the console.
"""

import contextlib
import csv
import io
import json
import os
import re
import threading
from pathlib import Path

import nbformat
import pytest

from autograder.grading import class_run
from autograder.judging import student_steps as student_mod
from autograder.kernel import session
from autograder.outputs import gradebook, tables

pytestmark = pytest.mark.grading

CHAPTER = "99_tiny"
SETUP = "from scalelib import exercise as ex\nimport numpy as np"
ADD = "def add(a, b):\n    return a + b\n"
DOUBLE = "import numpy as np\n\ndef double(xs):\n    return 2 * np.asarray(xs)\n"
DOUBLE_LIST = "def double(xs):\n    return [2 * x for x in xs]\n"  # right, but not an array
# what the students' add prints in their kernel, each time it is called (the judge calls it)
STUDENT_OUT, STUDENT_ERR = "STUDENT-PRINTED-TO-STDOUT", "STUDENT-PRINTED-TO-STDERR"
LOUD_ADD = (f"import sys\n\ndef add(a, b):\n    print({STUDENT_OUT!r})\n    print({STUDENT_ERR!r}, file=sys.stderr)\n"
            "    return a + b\n")
ADD_TEST = ("# Test ch99-add (1 point)\nwith ex.visible_checks('ch99-add'):\n    assert add(1, 2) == 3\n"
            "### BEGIN HIDDEN TESTS\n"
            "ex.check_close(add(0.1, 0.2), 0.3, 1e-9, 'add(0.1, 0.2)')\n### END HIDDEN TESTS\n")
DOUBLE_TEST = ("# Test ch99-double (2 points)\nwith ex.visible_checks('ch99-double'):\n"
               "    ex.check_array_close(double([1, 2]), [2, 4], 0, 0)\n"
               "### BEGIN HIDDEN TESTS\n"
               "@ex.probe\n"
               "def measure(xs):\n"
               "    out = double(xs)\n"
               "    return {'n': len(out.tolist()), 'total': float(np.sum(out))}\n"  # .tolist(): assumes an array
               "got = measure([1.0, 2.0, 3.0])\n"
               "ex.check_close(got['total'], 12.0, 1e-9, 'sum of double([1, 2, 3])')\n"
               "### END HIDDEN TESTS\n")


def _code(src, gid="", **nbg):
    cell = nbformat.v4.new_code_cell(src)
    if gid:
        cell.metadata["nbgrader"] = {"grade_id": gid, "schema_version": 3, "locked": False, **nbg}
    return cell


def _notebook(add_src, double_src):
    md = nbformat.v4.new_markdown_cell
    stub = '    raise NotImplementedError("{}: not answered yet (replace this line with your code)")\n'
    nb = nbformat.v4.new_notebook(cells=[
        _code(SETUP, "setup", solution=False, grade=False, locked=True),
        md("## Exercise 99.A: add (`ch99-add`)"),
        _code(add_src or "def add(a, b):\n" + stub.format("ch99-add"), "ch99-add-answer", solution=True, grade=False),
        _code(ADD_TEST, "ch99-add", solution=False, grade=True, points=1, locked=True),
        md("## Exercise 99.B: double (`ch99-double`)"),
        _code(double_src or "def double(xs):\n" + stub.format("ch99-double"), "ch99-double-answer", solution=True,
              grade=False),
        _code(DOUBLE_TEST, "ch99-double", solution=False, grade=True, points=2, locked=True),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["scalelib"] = {"chapter": CHAPTER}
    return nb


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-course")
    (root / "pyproject.toml").write_text('[tool.scalelib-course]\ninstall-source = ""\ncell-timeout-s = 60\n')
    (root / "solutions").mkdir()
    solution = _notebook("### BEGIN SOLUTION\n" + ADD + "### END SOLUTION\n",
                         "### BEGIN SOLUTION\n" + DOUBLE + "### END SOLUTION\n")
    nbformat.write(solution, root / "solutions" / f"{CHAPTER}.ipynb")
    subs = root / "subs"
    subs.mkdir()
    for name, (a, d) in {"right": (LOUD_ADD, DOUBLE), "flaky": (LOUD_ADD, DOUBLE), "unbound": (LOUD_ADD, DOUBLE),
                         "lister": (LOUD_ADD, DOUBLE_LIST), "stub": ("", "")}.items():
        nbformat.write(_notebook(a, d), subs / f"{name}.ipynb")
    (subs / "README.txt").write_text("not a submission\n")  # an entry that is not a notebook

    injected = {"student": 0, "gradebook": 0, "bind": 0}
    real_grade, real_record, real_run = student_mod.grade_student, gradebook.record, session.KernelSession.run
    grading = threading.local()  # whom this worker thread is grading

    def flaky_run(self, code, *args, **kwargs):
        if code.startswith("__grader__.bind(") and getattr(grading, "student", "") == "unbound" \
                and not injected["bind"]:
            injected["bind"] += 1
            return session.CellRun(ok=False, error="KeyboardInterrupt: ", timed_out=True)
        return real_run(self, code, *args, **kwargs)

    def flaky_grade(shared, student, *args, **kwargs):
        grading.student = student
        if student == "flaky" and not injected["student"]:
            injected["student"] += 1
            raise SystemError("AST constructor recursion depth mismatch (before=18, after=4)")
        return real_grade(shared, student, *args, **kwargs)

    def flaky_record(*args, **kwargs):
        if not injected["gradebook"]:
            injected["gradebook"] += 1
            raise SystemError("AST constructor recursion depth mismatch (before=3, after=1)")
        return real_record(*args, **kwargs)

    out = root / "out"
    real_chdir, chdirs = os.chdir, []

    def chdir(path):  # any change of the grader's working directory while it grades (its threads share it)
        chdirs.append((threading.current_thread().name, str(path)))
        real_chdir(path)

    console, errors = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setattr(class_run, "grade_student", flaky_grade)
        mp.setattr(gradebook, "record", flaky_record)
        mp.setattr(session.KernelSession, "run", flaky_run)
        mp.setattr(os, "chdir", chdir)
        with contextlib.redirect_stdout(console), contextlib.redirect_stderr(errors):
            graded = class_run.grade(Path("subs"), CHAPTER, Path("out"), root, workers=2)  # relative, as in a shell
        mp.setattr(os, "chdir", real_chdir)
    results = {r.student: r for r in graded}
    rows = {row["student"]: row for row in csv.DictReader((out / "grades.csv").open())}
    return results, rows, out, injected, {"chdirs": chdirs, "console": console.getvalue(), "errors": errors.getvalue()}


def test_a_grader_fault_is_retried_and_the_run_still_writes_grades_and_gradebook(run):
    from nbgrader.api import Gradebook

    results, rows, out, injected, _ = run
    assert injected == {"student": 1, "gradebook": 1, "bind": 1}  # every fault did happen
    assert results["flaky"].status == "graded" and results["flaky"].score == 3, results["flaky"]
    assert results["unbound"].status == "graded" and results["unbound"].score == 3, results["unbound"]
    assert "binding the set-up's values" in (out / "logs" / "unbound.kernel.log").read_text()  # graded again
    assert rows["flaky"]["score"] == "3" and set(rows) == {"right", "flaky", "unbound", "lister", "stub"}
    assert "grading again" in (out / "logs" / "flaky.kernel.log").read_text()
    with Gradebook(f"sqlite:///{out / 'nbgrader' / 'gradebook.db'}") as gb:
        assert gb.find_submission(CHAPTER, "flaky").score == pytest.approx(3)
        assert gb.find_submission(CHAPTER, "right").score == pytest.approx(3)


def test_a_failing_test_helper_is_the_tests_fault_not_the_students(run):
    results, rows, out, _, _ = run
    lister = results["lister"]
    message = lister.messages["ch99-double"]
    assert lister.exercises == {"ch99-add": 1.0, "ch99-double": 0.0}
    assert message.startswith("the test itself failed, not your answer") and "your function raised" not in message
    assert "the test's helper measure raised AttributeError" in message
    assert "ch99-double could not be judged (the instructor's test is at fault" in lister.detail
    page = (out / "feedback" / "lister.html").read_text()
    assert "the test failed, not your answer" in page and "a check failed" not in page
    log = (out / "logs" / tables.INSTRUCTOR_LOG).read_text()
    assert "test of ch99-double failed for lister (not the student's fault)" in log
    assert json.loads((out / "results" / "right.json").read_text())["score"] == 3  # the same test judges arrays


def test_a_stub_that_still_raises_reads_not_answered_yet(run):
    results, _, out, _, _ = run
    stub = results["stub"]
    assert stub.score == 0
    for eid in ("ch99-add", "ch99-double"):
        assert stub.messages[eid].startswith("not answered yet"), stub.messages[eid]
    page = (out / "feedback" / "stub.html").read_text()
    assert page.count(">not answered yet<") == 2 and "a check failed" not in page


def test_the_grader_never_changes_its_working_directory(run):
    """Issue 48: the grader's threads share one working directory. nbgrader's converters changed it to the course
    folder while the gradebook was made, and for those seconds a worker's relative path pointed there."""
    assert run[4]["chdirs"] == []


def test_every_output_lies_in_the_relative_out_and_nowhere_else(run):
    _, _, out, _, _ = run
    root = out.parent
    assert sorted(p.name for p in root.iterdir()) == ["out", "pyproject.toml", "solutions", "subs"]
    written = [p.relative_to(out) for p in out.rglob("*")]
    assert not [p for p in written if "out" in p.parts], written  # no out/out/, no out/nbgrader/out/
    assert {"grades.csv", "grades_long.csv", "submissions.csv", "feedback", "results", "logs", "nbgrader"} <= {
        p.parts[0] for p in written}
    assert sorted(p.name for p in (out / "feedback").iterdir()) == [f"{s}.html" for s in
                                                                    ("flaky", "lister", "right", "stub", "unbound")]


def test_the_console_shows_progress_then_problems_then_files_and_nothing_a_student_printed(run):
    """Issue 48: the instructor's console holds a line per student as it is graded, then the run's problems, then
    a neutral note on the entries that are not notebooks, then where the files are; what the students' code and the
    test cells printed is in the results (the feedback), not there."""
    results, _, out, _, seen = run
    console, errors = seen["console"], seen["errors"]
    for text in (STUDENT_OUT, STUDENT_ERR, "visible checks passed"):
        assert text not in console and text not in errors, text
    assert "ch99-add: visible checks passed" in results["right"].outputs["ch99-add"]  # it went to the feedback
    lines = console.splitlines()
    progress = [i for i, line in enumerate(lines) if line.startswith("[")]
    assert len(progress) == 5, console
    problems = next(i for i, line in enumerate(lines) if re.fullmatch(r"problems \(\d+\):", line))
    ignored = next(i for i, line in enumerate(lines) if line.startswith("not graded: 1 entry"))
    files = lines.index(f"files written in {out}:")
    assert progress[-1] < problems < ignored < files, console
    assert lines[ignored + 1] == "  README.txt: not a notebook (.ipynb), ignored", console
    block = "\n".join(lines[problems:ignored])
    for text in ("grader error while grading flaky (SystemError", "; graded again (see ",
                 "nbgrader gradebook: SystemError", "1 problem(s) of the instructor's notebook or tests",
                 "test of ch99-double failed for lister (not the student's fault)"):
        assert text in block, (text, console)
    assert "README" not in block
    assert lines[files + 1] == "  grades.csv, grades_long.csv, submissions.csv", console
    assert any(line.startswith(f"  nbgrader gradebook: {out / 'nbgrader' / 'gradebook.db'}")
               for line in lines[files:]), console
    assert lines[problems - 1].startswith("5 students: ") and "notebooks in" in lines[problems - 2], console
