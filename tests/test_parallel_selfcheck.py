"""scalelib.parallel.selfcheck: every scheme across 2 processes x 4 devices against one device, and
the other splits of 8 devices.

One launch runs every check (``python -m scalelib.launch --processes 2 --local-devices 4 -m
scalelib.parallel.selfcheck``); each scheme's line is then its own test. The floor suite deselects the
``sweep`` mark and runs one scheme across processes (the single-process tests cover every scheme there).
The other splits run a cheap subset (one launch each: 4 x 2 and 8 x 1 across processes, 1 x 8 in this
process): multislice, the scheme whose layout follows the split (8 processes of one device each are
slow to start and compile on a small machine, so nothing more). How every job is laid out, and what it
skips, is checked without running (``plan``), for the README's cluster shapes too. tests/test_cluster.py
runs the selfcheck through SLURM's srun and Open MPI's mpirun.
The comparisons (scalelib.parallel.compare) are shown to catch differences, so an "ok" means something.
"""

import contextlib
import io
import os
import re
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from scalelib import launch
from scalelib.hlo import CollectiveOp
from scalelib.parallel import compare, registry, selfcheck
from scalelib.parallel.scheme import Collective, Scheme

SMOKE = "data"  # the one scheme the floor suite runs across processes (-m "not sweep")
SCHEMES = [pytest.param(name, marks=() if name == SMOKE else pytest.mark.sweep) for name in selfcheck.checks()]


@pytest.fixture(scope="module")
def two_processes(request):
    """One launch of the selfcheck for every scheme whose test below was selected (after the stopped run's start)."""
    _started_with_the_main_launch(request)
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


def test_the_checks_other_packages_own_are_found():
    # the kernels' own checks (scalelib/kernels/matmul_selfcheck.py) come after the schemes, found on disk
    assert [suite.__name__ for suite in selfcheck.suites()] == ["scalelib.kernels.matmul_selfcheck"]
    names = [*selfcheck.plan(), *(f"collective_matmul.{k}" for k in ("all_gather", "reduce_scatter", "all_reduce"))]
    assert list(selfcheck.checks()) == names
    assert list(selfcheck.benchmarks()) == names  # every scheme is held by the 1 x 8 job, so none is left out


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
    assert compare.collectives(loop, permutes, "loop", _loops_hlo(10)) == []
    assert compare.collectives(loop, permutes, "loop", _loops_hlo(9)) == [
        "trip counts of the loops holding collectives [9], predicted one loop of 10 ticks"]
    # the all-reduce inside a loop too: two loops hold collectives
    assert compare.collectives(loop, permutes, "loop", _loops_hlo(10, reduce_in_a_loop=True)) == [
        "trip counts of the loops holding collectives [16, 10], predicted one loop of 10 ticks"]


def _loops_hlo(ticks: int, reduce_in_a_loop: bool = False) -> str:
    """A compiled pipeline's shape: the tick loop (its body calls a computation holding a permute) and a loop
    of XLA's own (an expanded scatter, no collective), unless that one holds the all-reduce."""
    extra = "  %ar = f32[4]{0} all-reduce(f32[4]{0} %x), to_apply=%add\n" if reduce_in_a_loop else ""
    return f"""HloModule m
%tick (p: f32[4]) -> f32[4] {{
  %p = f32[4]{{0}} parameter(0)
  ROOT %cp = f32[4]{{0}} collective-permute(f32[4]{{0}} %p), source_target_pairs={{{{0,1}},{{1,0}}}}
}}
%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %t = (s32[], f32[4]{{0}}) parameter(0)
  %c = f32[4]{{0}} call(f32[4]{{0}} %y), to_apply=%tick
  ROOT %r = (s32[], f32[4]{{0}}) tuple(s32[] %i, f32[4]{{0}} %c)
}}
%scatter_body (t: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %x = f32[4]{{0}} parameter(0)
{extra}  ROOT %r = (s32[], f32[4]{{0}}) tuple(s32[] %i, f32[4]{{0}} %x)
}}
ENTRY %main (a: f32[4]) -> f32[4] {{
  %w0 = (s32[], f32[4]{{0}}) while((s32[], f32[4]{{0}}) %a), condition=%cond, body=%scatter_body, \
backend_config={{"known_trip_count":{{"n":"16"}}}}
  %w1 = (s32[], f32[4]{{0}}) while((s32[], f32[4]{{0}}) %b), condition=%cond, body=%body, \
backend_config={{"known_trip_count":{{"n":"{ticks}"}}}}
  ROOT %o = f32[4]{{0}} get-tuple-element((s32[], f32[4]{{0}}) %w1), index=1
}}
"""


def test_axes_that_cross_processes():
    procs = np.array([[0, 0, 0, 0], [1, 1, 1, 1]])  # [slice, data]: the process of each device
    mesh = SimpleNamespace(devices=np.vectorize(lambda p: SimpleNamespace(process_index=p))(procs),
                           axis_names=("slice", "data"), shape={"slice": 2, "data": 4})
    assert compare.axes_cross_processes(mesh, crossing=("slice",), inside=("data",)) == []
    assert compare.axes_cross_processes(mesh, crossing=("data",), inside=("slice",)) == [
        "mesh axis 'data' stays inside each process; it should join the processes (the slow link)",
        "mesh axis 'slice' crosses processes; it should stay inside each one (the fast link)"]


def test_one_process_runs_the_same_checks(capsys, monkeypatch):
    """Alone (this session's 8 devices: the 1 x 8 split), main() prints one line per scheme and fails on a
    difference; multislice runs, saying that one process leaves where its axes run unchecked."""
    assert selfcheck.main(["collective_matmul.all_gather", "multislice"]) == 0
    out = capsys.readouterr().out
    assert "selfcheck on process 0 of 1 (single process): 8 of 8 cpu devices are local" in out
    assert "collective_matmul.all_gather ok" in out
    assert re.search(r"^multislice ok \(one process: the slice axis cannot cross processes, .*\)  \(\d+\.\d s\)$",
                     out, re.M), out
    monkeypatch.setattr(selfcheck, "checks", lambda *job: {"data": lambda: ["loss at step 1 off by up to 1.00e-03"]})
    assert selfcheck.main(["data"]) == 1
    assert "data DIFFERS: loss at step 1 off by up to 1.00e-03" in capsys.readouterr().out
    with pytest.raises(ValueError, match="unknown schemes"):
        list(selfcheck.run(["zigzag"]))


# ------------------------------------------------------------------ any device count and process split


@pytest.mark.sweep
@pytest.mark.parametrize(("processes", "local", "schemes"), [(4, 2, ["multislice"]), (8, 1, ["multislice"])])
def test_other_splits_of_8_devices(processes, local, schemes):
    out, err = io.StringIO(), io.StringIO()
    result = launch.launch(["-m", "scalelib.parallel.selfcheck", *schemes], processes, local, timeout_s=900,
                           out=out, err=err)
    text = out.getvalue()
    assert f"[0] selfcheck on process 0 of {processes} (scalelib.launch): {local} of 8 cpu devices are local" in text
    for scheme in schemes:
        assert re.search(rf"^\[0\] {re.escape(scheme)} ok  \(\d+\.\d s\)$", text, re.M), text + err.getvalue()
    assert result.returncode == 0, text + err.getvalue()


@pytest.mark.parametrize(("devices", "processes"), [(8, 1), (8, 2), (8, 4), (8, 8), (16, 2), (32, 8), (4, 4), (2, 1)])
def test_every_scheme_is_laid_out_for_even_jobs(devices, processes):
    """1 x 8 to 8 x 1, the README's SLURM job (2 nodes x 8 GPUs) and TPU v5e-32 (8 hosts x 4 chips), and
    small jobs: no scheme is skipped, every mesh takes the same devices from each process, and
    multislice's slice axis is the processes whenever there are several."""
    plan = selfcheck.plan(devices, processes)
    assert all(isinstance(c, selfcheck.Case) for c in plan.values()), plan
    for case in plan.values():
        size = int(np.prod(case.shape))
        assert size <= devices and size % processes == 0, case
        case.scheme.check(case.cfg, dict(zip(case.scheme.mesh_axes, case.shape, strict=True)), case.batch, case.seq)
    slice_, data = plan["multislice"].shape
    assert (slice_, data) == ((processes, devices // processes) if processes > 1 else (2, devices // 2))
    assert bool(plan["multislice"].note) == (processes == 1)
    assert set(selfcheck.checks(devices, processes)) == set(selfcheck.checks())  # every name, whatever the job


def test_what_a_job_cannot_hold_is_skipped_with_its_reason(capsys):
    plan = selfcheck.plan(3, 3)  # 3 processes of 1 device: no model axis divides both 3 and the 4 KV heads
    assert plan["tensor"] == plan["fsdp_tp"] == selfcheck.Skip(
        "its model axis must divide the model's 4 KV heads and the job's 3 devices, and only 1 does (nothing to split)")
    assert isinstance(plan["multislice"], selfcheck.Case) and plan["multislice"].shape == (3, 1)
    assert selfcheck.plan(5, 1)["multislice"] == selfcheck.Skip(
        "alone, it needs an even number of devices for 2 slices; this job has 5")
    result = next(selfcheck.run(["tensor"], 3, 3))
    assert result.ok and result.line() == f"tensor skipped: {plan['tensor'].reason}"
    with pytest.raises(ValueError, match="needs 2 or more devices; this job has 1"):
        selfcheck.plan(1, 1)
    with pytest.raises(ValueError, match="8 devices cannot be split evenly over 3 processes"):
        selfcheck.plan(8, 3)


def test_a_cluster_launcher_sets_the_cpu_devices_per_process():
    from scalelib import distributed

    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "a", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
             "SLURM_LOCALID": "1"}
    assert distributed.cluster_processes(slurm) == 2
    assert distributed.cluster_processes({**slurm, "SLURM_NTASKS": "x"}) is None
    assert distributed.cluster_processes({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}) is None
    ompi = {"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"}
    assert distributed.cluster_processes(ompi) == 4
    assert distributed.cluster_processes({}) is None


STOPPED_S = 40.0  # well past the fixed 30 s gloo gives a collective's members to arrive
STOPPED_TEST = "test_a_rank_stopped_past_gloos_30_s_before_its_first_check_still_passes"


class _Lines(io.StringIO):
    """Output that says when a line starting with ``text`` was written."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def write(self, s: str) -> int:
        if s.startswith(self.text):
            self.seen.set()
        return super().write(s)


def _selfcheck_rank(launcher_pid: int, port: int, rank: int) -> int:
    """The pid of the selfcheck process of the given rank that this launcher started with its coordinator on
    ``port`` (read from /proc; the module's other launch has the same launcher)."""
    wanted = {f"SCALELIB_LAUNCHER_PID={launcher_pid}".encode(), f"SCALELIB_PROCESS_ID={rank}".encode(),
              f"SCALELIB_COORDINATOR=localhost:{port}".encode()}
    for entry in Path("/proc").iterdir():
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if wanted <= env and b"scalelib.parallel.selfcheck" in cmd:
            return int(entry.name)
    raise AssertionError(f"no selfcheck process of rank {rank} started by {launcher_pid} on port {port}")


class _StoppedRun:
    """A launch of the smoke scheme whose rank 1 is stopped (SIGSTOP) for STOPPED_S as soon as rank 0 starts its
    first check, then continued; run in the background, so that its wait overlaps the module's main launch."""

    def __init__(self) -> None:
        self.out, self.err, self.box = _Lines("[0] selfcheck on"), io.StringIO(), {}
        self.failures: list[str] = []
        self.stopped: int | None = None
        self.stopped_s = 0.0  # how long rank 1 was held, once it was
        self.port = launch.free_port()
        self.run = threading.Thread(target=lambda: self.box.update(r=launch.launch(
            ["-m", "scalelib.parallel.selfcheck", SMOKE], 2, 4, timeout_s=600, port=self.port, out=self.out,
            err=self.err)))
        self.control = threading.Thread(target=self._stop_and_continue)
        self.run.start()
        self.control.start()

    def _stop_and_continue(self) -> None:
        try:
            if not self.out.seen.wait(300):
                self.failures.append("rank 0 never started its first check")
                return
            self.stopped = _selfcheck_rank(os.getpid(), self.port, 1)
            os.kill(self.stopped, signal.SIGSTOP)  # before its reference, so before any collective of the check
            self.stopped_s = STOPPED_S
            self.run.join(STOPPED_S)
            if not self.run.is_alive():
                self.failures.append("the job gave up while rank 1 was stopped")
        except Exception as fault:  # said by the test, not lost in this thread
            self.failures.append(f"{type(fault).__name__}: {fault}")
        finally:
            self._continue()

    def _continue(self) -> None:
        if self.stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.stopped, signal.SIGCONT)
            self.stopped = None

    def finish(self) -> None:
        """Wait for the job (continuing rank 1 first, should its controller have failed)."""
        self.control.join(STOPPED_S + 300)
        self._continue()
        self.run.join(600)

    def text(self) -> str:
        return self.out.getvalue() + self.err.getvalue()


@pytest.fixture(scope="module")
def stopped_run():
    run = _StoppedRun()
    try:
        yield run
    finally:
        run.finish()


def _started_with_the_main_launch(request) -> None:
    """Starts the stopped run before the module's main launch, when its test was selected."""
    if any(getattr(item, "originalname", None) == STOPPED_TEST and item.path == request.path
           for item in request.session.items):
        request.getfixturevalue("stopped_run")


@pytest.mark.sweep
def test_a_rank_stopped_past_gloos_30_s_before_its_first_check_still_passes(stopped_run):
    """Rank 1 is stopped (SIGSTOP) for 40 s as soon as rank 0 starts its first check, then continued: the check
    still passes. Before, rank 0 alone computed the reference and sent it in a collective, so any rank reaching
    that collective more than gloo's 30 s apart failed the job (seen on a busy machine and under mpirun); now
    every rank computes its own and the ranks meet at a barrier that is no collective (its limit,
    SCALELIB_BARRIER_TIMEOUT_S, is 600 s). The run starts with the module's main launch (``two_processes``)."""
    stopped_run.finish()
    assert stopped_run.failures == [], stopped_run.text()
    assert stopped_run.stopped_s == STOPPED_S
    result = stopped_run.box["r"]
    assert result.returncode == 0, stopped_run.text()
    assert re.search(rf"^\[0\] {SMOKE} ok  \(\d+\.\d s\)$", stopped_run.out.getvalue(), re.M), stopped_run.text()
