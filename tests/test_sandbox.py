"""autograder.sandbox and autograder.cgroups: what a student's kernel may use of the host, as a whole.

Hostile-run finding 6 of issue #14: the memory limit holds for all of a sandbox's processes together, not per
process; finding 7's first half: a flood written to the kernel's own stderr stays out of the grader's channels.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder import cgroups, grade, sandbox

pytestmark = [pytest.mark.grading,
              pytest.mark.skipif(sandbox.available() != "", reason=f"no OS sandbox here: {sandbox.available()}")]

FORK_FOUR = """
import os, time
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(150 * 2**20)  # each child well under the per-process limit
        for j in range(0, len(block), 4096):
            block[j] = 1
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
print([os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids], flush=True)
"""


def _sandboxed(tmp_path, code: str, **cfg) -> subprocess.CompletedProcess:
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    config = json.dumps({"scratch": str(scratch), **cfg})
    return subprocess.run([sys.executable, "-m", "autograder.sandbox", config, "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "polling"])
def test_the_memory_limit_holds_for_all_processes_together(tmp_path, cgroup):
    if cgroup and cgroups.available():
        pytest.skip(cgroups.available())
    run = _sandboxed(tmp_path, FORK_FOUR, memory_mb=400, cgroup=cgroup)
    assert "over the memory limit of 400 MB" in run.stderr, run.stderr
    finished = json.loads(run.stdout.strip()).count(0) if run.stdout.strip() else 0
    assert finished * 150 < 400  # four children of 150 MB never all ran to the end


def test_a_stderr_flood_is_dropped_not_kept(tmp_path):
    start = time.monotonic()
    run = _sandboxed(tmp_path, "import os\nfor _ in range(100):\n    os.write(2, b'x' * 2**20)\nprint('done')\n",
                     memory_mb=0)
    assert run.stdout.strip() == "done" and time.monotonic() - start < 30
    assert len(run.stderr) < 70_000 and "more bytes of the kernel's stderr dropped" in run.stderr


def test_host_checks_say_what_the_sandbox_needs():
    checks = {c.name: c for c in sandbox.host_checks()}
    assert checks["user namespaces"].required and checks["user namespaces"].ok
    assert not checks["memory cgroup"].required and checks["memory cgroup"].detail


def test_no_sandbox_means_no_grading_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "_PROBED", "user namespaces are disabled")
    with pytest.raises(grade.Unsandboxed, match="--allow-unsandboxed"):
        grade.grade(tmp_path, "01_rooflines", tmp_path / "out", quiet=True)
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="no notebooks found"):  # allowed: it goes on (and finds nothing here)
        grade.grade(tmp_path, "01_rooflines", tmp_path / "out", quiet=True, allow_unsandboxed=True)


def test_a_restricted_kernel_holds_only_its_part_of_scalelib(tmp_path):
    """The structural half of 'answers that cannot delegate': walk the kernel's whole file system; the only
    scalelib files are the reduced modules of its surface, and nothing anywhere is named like another module."""
    from autograder import surface
    from autograder.kernel import KernelSession, Limits

    allowed = surface.closure([surface.Item("scalelib.hardware", "Chip")])
    library = allowed.write(tmp_path / "lib")
    session = KernelSession(tmp_path / "scratch", Limits(memory_mb=0), tmp_path / "kernel.log", library=library,
                            allowed=allowed.describe())
    try:
        walk = session.run("""
import os, importlib
found, scalelib_files = [], []
for top in [d for d in os.listdir("/") if d not in ("proc", "sys", "dev")]:
    for folder, dirs, files in os.walk("/" + top):
        for f in files:
            if f.split(".")[0] in ("roofline", "collectives", "sharding", "transformer", "ring_collectives"):
                try:
                    if b"scalelib" in open(os.path.join(folder, f), "rb").read():  # not jax's own sharding.py
                        found.append(os.path.join(folder, f))
                except OSError:
                    pass
        if os.path.basename(folder) == "scalelib":
            scalelib_files += [os.path.join(folder, f) for f in files]
import scalelib.hardware as h
print(sorted(found), sorted(os.path.basename(p) for p in scalelib_files), hasattr(h, "Chip"))
try:
    importlib.import_module("scalelib.roofline")
except ModuleNotFoundError as err:
    print(err)
""", timeout=120)
        assert walk.ok, walk.error
        listing, refusal = "".join(session.output).strip().splitlines()[-2:]
    finally:
        session.close()
    assert listing.strip() == "[] ['__init__.py', 'hardware.py'] True", listing
    assert "not available while this exercise is graded" in refusal


def test_closing_a_kernel_leaves_no_memory_cgroup_behind(tmp_path):
    """The grader closes kernels with SIGKILL, so the launcher cannot tidy up: the grader removes the group."""
    from autograder.kernel import KernelSession, Limits

    if cgroups.available():
        pytest.skip(cgroups.available())
    before = cgroups.groups_made()
    session = KernelSession(tmp_path / "scratch", Limits(memory_mb=2048), tmp_path / "kernel.log")
    try:
        assert session.run("x = 1", timeout=60).ok
        assert cgroups.groups_made() - before  # the kernel runs in a group of its own
    finally:
        session.close()
    assert not cgroups.groups_made() - before


def test_a_fork_bomb_after_jax_is_a_crash_seen_at_once_and_leaves_nothing(tmp_path):
    """A namespace of a hundred forks of a kernel that imported JAX takes seconds to die, longer than a cell's
    limit on a loaded machine; the grader learns of the kill from the launcher's note, not from its exit, so the
    cell ends as a crash (not a time-out). Closing leaves no note, and no memory cgroup once its processes are
    gone (removed by the launcher, by close, or by the next close's sweep)."""
    from autograder.kernel import KernelDied, KernelSession, KernelTimedOut, Limits

    scratch = tmp_path / "scratch"
    session = KernelSession(scratch, Limits(memory_mb=6144), tmp_path / "kernel.log")
    try:
        assert session.run("import jax, jax.numpy as jnp\nx = jnp.ones(3) + 1", timeout=120).ok
        note = sandbox.cgroup_note(scratch)
        group = Path(note.read_text()) if note.exists() else None  # this kernel's own memory cgroup, if any
        with pytest.raises(KernelDied) as died:
            session.run("import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                        "        time.sleep(0.01)\n", timeout=120)
        assert not isinstance(died.value, KernelTimedOut)
        assert "more than 128 processes" in session.log_tail()
        assert sandbox.kill_note(scratch).read_text() == "more than 128 processes"  # what alive() reads
        assert not session.alive()
    finally:
        session.close()
    assert not sandbox.kill_note(scratch).exists()
    if group is not None and group.exists():  # its processes outlived the wait in close (a loaded machine)
        members = cgroups.MemoryGroup(group, 0, group.parent).members
        for _ in range(600):
            if not members():
                break
            time.sleep(0.5)
        cgroups.sweep()  # what the next close or run does
    assert group is None or not group.exists(), group


def test_sweep_removes_only_empty_groups_of_launchers_that_are_gone():
    if cgroups.available():
        pytest.skip(cgroups.available())
    made = subprocess.run([sys.executable, "-c", "from autograder import cgroups; print(cgroups.create(2**26).path)"],
                          capture_output=True, text=True, timeout=60, check=True)
    orphan = Path(made.stdout.strip())  # its creator has exited
    mine = cgroups.create(2**26)  # this process made it, and runs
    assert mine is not None and orphan.exists()
    try:
        cgroups.sweep()
        assert not orphan.exists() and mine.path.exists()
    finally:
        mine.remove()
        if orphan.exists():
            orphan.rmdir()
