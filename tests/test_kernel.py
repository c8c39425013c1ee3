"""autograder.kernel: one sandboxed kernel and its limits."""

import contextlib
import os
import re
import time

import pytest

from autograder.kernel.kernel_errors import KernelDied
from autograder.kernel.session import KernelSession, Limits
from autograder.sandbox import probes

pytestmark = pytest.mark.grading


def test_default_cpu_limit_is_the_wall_clock_budget_on_every_core():
    assert Limits(notebook_timeout_s=100).cpu_limit_s() >= 100 * (os.cpu_count() or 1)
    assert Limits(cpu_s=7).cpu_limit_s() == 7


def test_a_kernel_compiles_under_the_graders_xla_flags_with_the_chapters_device_count(tmp_path, monkeypatch):
    """The trusted context compiles under the grader's XLA flags; a kernel gets the same ones, or a flag that changes
    the optimized HLO would make a compiled program's cost differ between the two (a right answer losing points)."""
    from autograder.kernel.environment import kernel_env

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_cpu_use_fusion_emitters=false "
                                    "--xla_backend_optimization_level=0")
    assert kernel_env(tmp_path, 4)["XLA_FLAGS"].split() == [
        "--xla_cpu_use_fusion_emitters=false", "--xla_backend_optimization_level=0",
        "--xla_force_host_platform_device_count=4"]
    monkeypatch.delenv("XLA_FLAGS")
    assert kernel_env(tmp_path, 2)["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"


def test_a_kernel_never_sees_the_suites_compilation_cache(tmp_path, monkeypatch):
    """course.py gives each suite run a shared XLA program cache; a student's kernel must not learn where it is (it
    could read the instructor's compiled programs, or store its own for the trusted context to load)."""
    from autograder.kernel.environment import kernel_env

    cache = str(tmp_path / "scalelib-xla-cache-x")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", cache)
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env = kernel_env(tmp_path / "scratch")
    assert not [k for k in env if "CACHE" in k and k.startswith("JAX")]
    assert not [v for v in env.values() if cache in v]


def test_a_kernel_starts_without_ipykernels_debugger(tmp_path):
    """debugpy, which ipykernel imports at start for its debugger, is about 0.2 CPU-s of every kernel's start, and no
    grading kernel is debugged: the python3 kernel spec's command runs what ``ipykernel_launcher`` runs with debugpy
    marked absent (any other command is left as it is), and cells run as before."""
    from autograder.kernel.session import _SandboxedKernelManager
    from autograder.sandbox.config import SandboxConfig

    km = _SandboxedKernelManager(SandboxConfig(scratch="/tmp", isolate=False), kernel_name="python3")
    spec_cmd = km.kernel_spec.argv
    assert spec_cmd[1:3] == ["-m", "ipykernel_launcher"], spec_cmd
    cmd = km.format_kernel_cmd()
    assert cmd[cmd.index("--") + 2] == "-c" and "ipykernel_launcher" not in cmd, cmd
    km.kernel_spec.argv = [spec_cmd[0], "-m", "my_kernel", "-f", "{connection_file}"]
    assert "my_kernel" in km.format_kernel_cmd()

    limits = Limits(memory_mb=0, sandbox=probes.available() == "")
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    try:
        run = session.run("import sys\nprint(sys.modules['debugpy'], [m for m in sys.modules if 'pydevd' in m],"
                          " __name__, 'ipykernel.ipkernel' in sys.modules)", timeout=60)
        assert run.ok, run.error
        assert session.output[-1] == "None [] __main__ True\n", session.output[-1]
    finally:
        session.close()


def test_a_kernel_past_its_cpu_seconds_dies(tmp_path):
    """Killed at 2 CPU-s, not later, and the student reads why. As PID 1 of its namespace the kernel outlives a
    SIGXCPU: with the limit at (2, 7) it died at the hard limit, near 7 CPU-s."""
    limits = Limits(cpu_s=2, memory_mb=0, sandbox=probes.available() == "")
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    try:
        assert session.run("x = 1 + 1", timeout=30).ok
        start = time.monotonic()
        with pytest.raises(KernelDied):
            session.run("while True:\n    pass\n", timeout=60)  # wall limit far away: the CPU limit acts
        assert time.monotonic() - start < 30
        if limits.sandbox:
            said = re.fullmatch(r"the kernel died: stopped by its sandbox, at the CPU limit of 2 s \(it used "
                                r"(\d+\.\d) s of CPU time\)", session.death())
            # Not near 7 s (the old soft limit's fate). The kill acts on the tick-sampled CPU clock, which can run
            # ahead of the precise runtime wait4 reports: CI once read 1.9 s here.
            assert said and 1.5 <= float(said[1]) < 3, session.death()
    finally:
        session.close()


def test_an_oversized_reply_costs_the_call_not_the_grader(tmp_path):
    """Hostile finding 2: what crosses the channel is capped before the grader reads it."""
    import resource

    from autograder.kernel.kernel_errors import ChannelBroken

    limits = Limits(memory_mb=0, sandbox=probes.available() == "", max_reply_bytes=2**20)
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        session.run("forged = 'x' * 120_000_000", timeout=60, silent=True)
        with pytest.raises(ChannelBroken, match="more than 1048576 bytes in one message"):
            session.run("pass", timeout=60, silent=True, user_expressions={"r": "forged"})
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grown_mb < 100, grown_mb  # the reply (120 MB, repr'd) was never read
    finally:
        session.close()


def test_a_flood_on_the_kernels_own_stderr_is_not_blamed_on_the_next_cell(tmp_path):
    """Hostile finding 7: 100 MB written to fd 2 in one cell; the next cell runs clean, unblamed."""
    limits = Limits(memory_mb=0, sandbox=probes.available() == "", max_output_bytes=10_000)
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    try:
        flood = session.run("import os, sys\nfor _ in range(50):\n    os.write(2, b'x' * 2**20)\n"
                            "sys.__stderr__.write('y' * 50_000_000)\n", timeout=120)
        assert flood.ok, flood.error
        time.sleep(1)  # anything late would arrive now
        after = session.run("print('next cell')", timeout=30)
        assert after.ok and not after.output_capped and not after.timed_out
        assert session.output[-1] == "next cell\n"
    finally:
        session.close()
    assert (tmp_path / "kernel.log").stat().st_size < 200_000


def test_no_kernel_outlives_its_grader(tmp_path):
    """A grader killed outright (no cleanup runs) takes its sandboxes and kernels with it."""
    import signal
    import subprocess
    import sys

    code = ("import sys, time\nfrom pathlib import Path\nfrom autograder.kernel.session import KernelSession, Limits\n"
            "d = Path(sys.argv[1])\nKernelSession(d / 'scratch', Limits(memory_mb=0), d / 'log')\n"
            "print('started', flush=True)\ntime.sleep(600)\n")
    def mine() -> list[str]:
        """Every process working in this test's folder: launcher or relay, the sandbox's processes, the kernel (a
        kernel forked by the fork server has the server's command line; its folder is its own)."""
        found = set(subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True,
                                   check=False).stdout.split())
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/cwd").startswith(str(tmp_path)):
                    found.add(pid)
        return sorted(found)

    grader = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert grader.stdout.readline().strip() == "started"
        assert len(mine()) >= 3  # the launcher (or relay and launcher), the sandbox's first process, the kernel
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    deadline = time.monotonic() + 10
    while mine() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert mine() == []


def test_a_file_the_grader_hands_the_kernel_is_new_and_read_in_its_sandbox(tmp_path, monkeypatch):
    """Large set-up values reach the kernel as a file in its scratch folder (``put_file``): the kernel reads
    it; a link the student left under the file's name is refused, not followed out of the folder."""
    limits = Limits(memory_mb=0, sandbox=probes.available() == "")
    session = KernelSession(tmp_path / "scratch", limits, tmp_path / "kernel.log")
    host = tmp_path / "host.txt"
    host.write_text("the grader's own file")
    try:
        path = session.put_file(b"\x00" * 3_000_000 + b"end")
        got = session.run(f"data = open({path!r}, 'rb').read()", timeout=30, silent=True,
                          user_expressions={"r": "(len(data), data[-3:])"})
        assert got.ok and got.expressions["r"]["data"]["text/plain"] == "(3000003, b'end')"
        session.remove_file(path)
        gone = session.run("import os", timeout=30, silent=True, user_expressions={"r": f"os.path.exists({path!r})"})
        assert gone.expressions["r"]["data"]["text/plain"] == "False"
        monkeypatch.setattr("secrets.token_hex", lambda n: "guessed")
        planted = session.run(f"os.symlink({str(host)!r}, {path.replace(path.rsplit('-', 1)[1], 'guessed')!r})",
                              timeout=30, silent=True)
        assert planted.ok, planted.error
        with pytest.raises(FileExistsError):
            session.put_file(b"overwritten")
    finally:
        session.close()
    assert host.read_text() == "the grader's own file"
