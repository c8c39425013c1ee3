"""scalelib.parallel.selfcheck: every scheme across 2 processes x 4 devices against one device.

One launch runs every check (``python -m scalelib.launch --processes 2 --local-devices 4 -m
scalelib.parallel.selfcheck``); each scheme's line is then its own test. The floor suite deselects the
``sweep`` mark and runs one scheme across processes (the single-process tests cover every scheme there).
The comparisons (scalelib.parallel.compare) are shown to catch differences, so an "ok" means something.
"""

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest

from scalelib import launch
from scalelib.hlo import CollectiveOp
from scalelib.parallel import cases, compare, registry, selfcheck
from scalelib.parallel.scheme import Collective, Scheme
from tests import test_collective_matmul

SMOKE = "data"  # the one scheme the floor suite runs across processes (-m "not sweep")
SCHEMES = [pytest.param(name, marks=() if name == SMOKE else pytest.mark.sweep) for name in selfcheck.checks()]


@pytest.fixture(scope="module")
def two_processes(request):
    """One launch of the selfcheck for every scheme whose test below was selected."""
    selected = [item.callspec.params["scheme"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_scheme_matches_single_device"
                and item.path == request.path]
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


def test_every_registered_scheme_is_checked():
    assert {case.scheme.name for case in selfcheck.cases().values()} == set(registry.names())
    # the selfcheck computes train.make_step's arithmetic as every scheme's reference
    assert all(cls.reference_step is Scheme.reference_step for cls in registry.SCHEMES.values())


def test_selfcheck_cases_come_from_the_shared_table():
    assert (selfcheck.MATMUL_RTOL, selfcheck.MATMUL_ATOL) == (test_collective_matmul.RTOL, test_collective_matmul.ATOL)
    assert all(cases.BY_ID[case.id] is case and case.selfcheck == name for name, case in selfcheck.cases().items())
    assert list(selfcheck.cases()) == ["data", "zero1", "zero2", "zero3", "tensor", "fsdp_tp", "multislice",
                                       "pipeline.gpipe", "pipeline.1f1b", "expert", "sequence.all_gather",
                                       "sequence.ring"]


def test_differences_are_reported():
    want = {"w": np.ones((2, 3)), "b": np.zeros(3)}
    assert compare.differences(want, want, "params") == []
    off = {"w": np.ones((2, 3)) + 2e-5, "b": np.zeros(3)}
    assert compare.differences(off, want, "params") == [
        "params['w'] off by up to 1.00e-05 beyond rtol 1e-05 (atol 1e-06)"]
    assert "has shape (3,), expected (2, 3)" in compare.differences({"w": np.ones(3), "b": np.zeros(3)}, want, "p")[0]


def test_collective_differences_are_reported():
    predicted = [Collective("all_reduce", ("data",), 64, count=2)]
    ops = [CollectiveOp("all_reduce", ("data",), 128)]  # both combined into one tuple op: allowed
    assert compare.collectives(ops, predicted) == []
    assert compare.collectives(ops, predicted, "counts") == ["all_reduce over ('data',): 1 ops compiled, 2 predicted"]
    extra = [*ops, CollectiveOp("all_gather", ("data",), 8)]
    assert compare.collectives(extra, predicted) == ["unpredicted all_gather over ('data',) (8 bytes)"]
    assert compare.collectives([], predicted) == ["all_reduce over ('data',): compiled 0 bytes, predicted 128"]
    assert compare.collectives(ops, predicted, "each")[0].startswith("compiled collectives")
    permute = Collective("collective_permute", ("stage",), 32, 10)
    permutes = [permute, permute, Collective("all_reduce", ("stage",), 4)]
    loop = [CollectiveOp("collective_permute", None, 32)] * 2 + [CollectiveOp("all_reduce", ("stage",), 4)]
    assert compare.collectives(loop, permutes, "loop", '"known_trip_count":{"n":"10"}') == []
    assert compare.collectives(loop, permutes, "loop", '"known_trip_count":{"n":"9"}') == [
        "loop trip counts ['9'], predicted [10] ticks"]


def test_axes_that_cross_processes():
    procs = np.array([[0, 0, 0, 0], [1, 1, 1, 1]])  # [slice, data]: the process of each device
    mesh = SimpleNamespace(devices=np.vectorize(lambda p: SimpleNamespace(process_index=p))(procs),
                           axis_names=("slice", "data"), shape={"slice": 2, "data": 4})
    assert compare.axes_cross_processes(mesh, crossing=("slice",), inside=("data",)) == []
    assert compare.axes_cross_processes(mesh, crossing=("data",), inside=("slice",)) == [
        "mesh axis 'data' stays inside each process; it should join the processes (the slow link)",
        "mesh axis 'slice' crosses processes; it should stay inside each one (the fast link)"]


def test_one_process_runs_the_same_checks(capsys, monkeypatch):
    """Alone (this session's 8 devices), main() prints one line per scheme and fails on a difference."""
    assert selfcheck.main(["collective_matmul.all_gather"]) == 0
    assert "collective_matmul.all_gather ok" in capsys.readouterr().out
    monkeypatch.setattr(selfcheck, "checks", lambda: {"data": lambda: ["loss at step 1 off by up to 1.00e-03"]})
    assert selfcheck.main(["data"]) == 1
    assert "data DIFFERS: loss at step 1 off by up to 1.00e-03" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown schemes"):
        list(selfcheck.run(["zigzag"]))
