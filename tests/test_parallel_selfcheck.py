"""scalelib.parallel.selfcheck: every scheme across 2 processes x 4 devices against one device.

One launch runs every check (``python -m scalelib.launch --processes 2 --local-devices 4 -m
scalelib.parallel.selfcheck``); each scheme's line is then its own test. The floor suite deselects the
``sweep`` mark and runs one scheme across processes (the single-process tests cover every scheme there). The comparison helpers are
shown to catch a difference, so an "ok" line means something.
"""

import io
import re

import numpy as np
import pytest

from scalelib import launch
from scalelib.parallel import data, selfcheck
from tests import test_collective_matmul, test_parallel_data

SMOKE = "data"  # the one scheme the floor suite runs across processes (-m "not sweep")
SCHEMES = [pytest.param(name, marks=() if name == SMOKE else pytest.mark.sweep) for name in selfcheck.checks()]


@pytest.fixture(scope="module")
def two_processes(request):
    """One launch of the selfcheck for every scheme whose test below was selected."""
    selected = [item.callspec.params["scheme"] for item in request.session.items
                if item.originalname == "test_scheme_matches_single_device" and item.path == request.path]
    out, err = io.StringIO(), io.StringIO()
    result = launch.launch(["-m", "scalelib.parallel.selfcheck", *selected], 2, 4, timeout_s=900, out=out, err=err)
    return result, out.getvalue(), err.getvalue()


def test_selfcheck_runs_across_two_processes(two_processes):
    result, out, err = two_processes
    assert "[0] selfcheck on process 0 of 2 (scalelib.launch): 4 of 8 cpu devices are local" in out, err
    assert result.returncode == 0, out + err


@pytest.mark.parametrize("scheme", SCHEMES)
def test_scheme_matches_single_device(two_processes, scheme):
    _, out, err = two_processes
    lines = [line for line in out.splitlines() if line.startswith(f"[0] {scheme} ")]
    assert len(lines) == 1 and re.match(rf"\[0\] {re.escape(scheme)} ok  \(\d+\.\d s\)$", lines[0]), out + err


def test_tolerances_are_the_single_process_tests():
    assert (selfcheck.RTOL, selfcheck.ATOL) == (test_parallel_data.RTOL, test_parallel_data.ATOL)
    assert (selfcheck.MATMUL_RTOL, selfcheck.MATMUL_ATOL) == (test_collective_matmul.RTOL, test_collective_matmul.ATOL)


def test_differences_are_reported():
    want = {"w": np.ones((2, 3)), "b": np.zeros(3)}
    assert selfcheck.differences(want, want, "params") == []
    off = {"w": np.ones((2, 3)) + 2e-5, "b": np.zeros(3)}
    assert selfcheck.differences(off, want, "params") == [
        "params['w'] off by up to 1.00e-05 beyond rtol 1e-05 (atol 1e-06)"]
    assert "has shape (3,), expected (2, 3)" in selfcheck.differences({"w": np.ones(3), "b": np.zeros(3)}, want, "p")[0]


def test_collective_differences_are_reported():
    predicted = [data.Collective("all_reduce", ("data",), 64, count=2)]
    ops = [selfcheck_op("all_reduce", ("data",), 128)]  # both combined into one tuple op: allowed
    assert selfcheck.collective_differences(ops, predicted) == []
    assert selfcheck.collective_differences(ops, predicted, exact_counts=True) == [
        "all_reduce over ('data',): 1 ops compiled, 2 predicted"]
    extra = ops + [selfcheck_op("all_gather", ("data",), 8)]
    assert selfcheck.collective_differences(extra, predicted) == ["unpredicted all_gather over ('data',) (8 bytes)"]
    assert selfcheck.collective_differences(ops[:0], predicted)[0] == \
        "all_reduce over ('data',): compiled 0 bytes, predicted 128"


def selfcheck_op(kind, axes, nbytes):
    from scalelib.hlo import CollectiveOp

    return CollectiveOp(kind, axes, nbytes)


def test_one_process_runs_the_same_checks(capsys, monkeypatch):
    """Alone (this session's 8 devices), main() prints one line per scheme and fails on a difference."""
    assert selfcheck.main(["collective_matmul.all_gather"]) == 0
    assert "collective_matmul.all_gather ok" in capsys.readouterr().out
    broken = {"data": lambda: ["loss at step 1 off by up to 1.00e-03"]}
    monkeypatch.setattr(selfcheck, "checks", lambda: broken)
    assert selfcheck.main(["data"]) == 1
    assert "data DIFFERS: loss at step 1 off by up to 1.00e-03" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown schemes"):
        list(selfcheck.run(["zigzag"]))
