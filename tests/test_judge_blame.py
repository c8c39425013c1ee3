"""Whose fault a failed call into the kernel is (autograder.judging.judge.Judge.ask), with a stand-in kernel session."""

import time
from types import SimpleNamespace

import pytest

from autograder.judging import judging_errors
from autograder.judging.judge import Judge
from autograder.judging.judging_errors import StudentError
from autograder.kernel.session import CellRun
from autograder.library import surface


def _judge(reply: dict) -> Judge:
    run = CellRun(ok=True, expressions={"r": {"status": "ok", "data": {"application/json": reply}}})
    session = SimpleNamespace(run=lambda *a, **k: run)
    context = SimpleNamespace(chapter=SimpleNamespace(answer_names={"ring_all_gather", "double"}))
    return Judge(context, session, surface.closure(()), 10.0, time.monotonic() + 60)  # type: ignore[arg-type]


def test_a_probe_missing_the_students_function_is_the_students_fault():
    """ch03's probe calls ring_all_gather; a notebook whose answer cell raised never defined it: the student's."""
    judge = _judge({"err": "the test's helper run_ring raised NameError: name 'ring_all_gather' is not defined",
                    "by": "test"})
    with pytest.raises(StudentError, match="your notebook does not define it"):
        judge.ask("__grader__.call('__grader_probe_run_ring', '')")


def test_a_probe_missing_anything_else_is_the_tests_fault():
    judge = _judge({"err": "NameError: name 'P' is not defined", "by": "test"})
    with pytest.raises(judging_errors.TestFault, match="'P' is not defined"):
        judge.ask("__grader__.call('__grader_probe_run_ring', '')")
    judge = _judge({"err": "AttributeError: 'list' object has no attribute 'tolist'", "by": "test"})
    with pytest.raises(judging_errors.TestFault):
        judge.ask("x")
