"""autograder.kernel: one sandboxed kernel and its limits."""

import os
import time

import pytest

from autograder import sandbox
from autograder.kernel import KernelDied, KernelSession, Limits

pytestmark = pytest.mark.grading


def test_default_cpu_limit_is_the_wall_clock_budget_on_every_core():
    assert Limits(notebook_timeout_s=100).cpu_limit_s() >= 100 * (os.cpu_count() or 1)
    assert Limits(cpu_s=7).cpu_limit_s() == 7


def test_a_kernel_past_its_cpu_seconds_dies(tmp_path):
    limits = Limits(cpu_s=6, memory_mb=0, sandbox=sandbox.available() == "")
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    try:
        assert session.run("x = 1 + 1", timeout=30).ok
        start = time.monotonic()
        with pytest.raises(KernelDied):
            session.run("while True:\n    pass\n", timeout=60)  # wall limit far away: the CPU limit acts
        assert time.monotonic() - start < 30
    finally:
        session.close()
