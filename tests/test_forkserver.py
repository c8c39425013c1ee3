"""autograder.kernel.forkserver: kernels forked from a server that imported ipykernel and JAX sit in the same sandbox as kernels
that start their own interpreter, hold nothing of the server's or the grader's, and die with their relay."""

import json
import os
import subprocess
import sys
import time

import pytest

from autograder.kernel import forkserver
from autograder.kernel.session import KernelSession, Limits
from autograder.sandbox import notes, probes

pytestmark = [pytest.mark.grading,
              pytest.mark.skipif(probes.available() != "", reason="the fork server serves sandboxed kernels only")]


@pytest.fixture(autouse=True)
def _server_on(monkeypatch):
    """These tests are about the server: on, whatever the run's setting (AUTOGRADER_FORK_SERVER=0 turns it off)."""
    monkeypatch.delenv("AUTOGRADER_FORK_SERVER", raising=False)

# What a kernel reports about itself: everything that could differ between a forked kernel and a fresh one.
PROBE = """
import json, os, sys
def caps():
    return {k: v for k, v in (line.split(':', 1) for line in open('/proc/self/status')) if k.startswith(('Cap', 'NoNew',
            'Seccomp', 'Uid', 'Gid', 'Groups'))}
print(json.dumps({
    "uid": [os.getuid(), os.geteuid()], "pid": os.getpid(), "status": caps(), "argv": sys.argv, "path": sys.path,
    "orig_argv": sys.orig_argv[1:2], "env": dict(os.environ), "fds": len(os.listdir('/proc/self/fd')), "cwd": os.getcwd(),
    "grader": sorted(m for m in sys.modules if m.startswith(('autograder.', 'scalelib'))),
    "absent": sorted(m for m, v in sys.modules.items() if v is None),
    "host": sorted(os.listdir('/')), "random": __import__('random').random(),
    "np_random": __import__('numpy').random.random()
}))
"""


def _started_by_server(session: KernelSession) -> bool:
    args = session.km.provisioner.process.args  # what jupyter_client started: the relay, or the launcher
    return args[1:4] == ["-I", "-S", "-c"] and args[4] == forkserver.RELAY


def _probe(session: KernelSession) -> dict:
    run = session.run(PROBE, timeout=60)
    assert run.ok, run.error
    return json.loads(session.output[-1])


@pytest.fixture
def secret(monkeypatch):
    """A value only the grader's environment holds; a fresh server is started with it there."""
    forkserver.stop()
    monkeypatch.setenv("GRADER_TOKEN", "tok-3f9a")
    yield "tok-3f9a"
    forkserver.stop()


def test_a_forked_kernel_is_the_kernel_a_fresh_interpreter_would_be(tmp_path, monkeypatch, secret):
    limits = Limits(memory_mb=0)
    forked = [KernelSession(tmp_path / f"f{i}", limits, tmp_path / f"f{i}.log") for i in range(2)]
    monkeypatch.setenv("AUTOGRADER_FORK_SERVER", "0")
    fresh = KernelSession(tmp_path / "fresh", limits, tmp_path / "fresh.log")
    try:
        assert _started_by_server(forked[0]) and not _started_by_server(fresh)
        a, b, c = (_probe(s) for s in (*forked, fresh))
        server = forkserver._server
        assert server is not None and a["pid"] == 1
        for key in ("uid", "status", "path", "grader", "absent", "host", "orig_argv"):
            assert a[key] == c[key], key
        assert a["argv"][0] == c["argv"][0] == "-c" and a["argv"][1:] == ["-f", str(tmp_path / "f0/kernel.json"),
                                                                         "--IPKernelApp.capture_fd_output=False"]
        assert a["cwd"] == str(tmp_path / "f0") and a["env"]["HOME"] == str(tmp_path / "f0")
        assert set(a["env"]) == set(c["env"]) and secret not in json.dumps(a)
        assert a["fds"] == c["fds"]  # nothing of the server's or the launcher's is open
        # each kernel draws its own random numbers (the server's generators were seeded once)
        assert a["random"] != b["random"] and a["np_random"] != b["np_random"]
        # the server's memory never held the grader's environment, so neither does a kernel's
        for session in forked:
            pid = int(notes.kernel_note(session.scratch).read_text())
            assert secret.encode() not in open(f"/proc/{pid}/environ", "rb").read()
        assert secret.encode() not in open(f"/proc/{server.proc.pid}/environ", "rb").read()
        # the server's socket is out of the kernel's reach
        run = forked[0].run(f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({server.path!r})", timeout=30)
        assert not run.ok and ("FileNotFoundError" in run.error or "PermissionError" in run.error), run.error
        assert oct(os.stat(server.folder).st_mode & 0o777) == "0o700"
    finally:
        for s in (*forked, fresh):
            s.close()


def test_an_interrupt_and_a_kill_reach_the_sandbox_through_the_relay(tmp_path):
    session = KernelSession(tmp_path / "s", Limits(memory_mb=0), tmp_path / "s.log")
    try:
        assert _started_by_server(session)
        run = session.run("import subprocess\nsubprocess.run(['sleep', '60'])", timeout=2)
        assert run.timed_out and "KeyboardInterrupt" in run.error, run
        assert session.run("print('still here')", timeout=30).ok and session.output[-1] == "still here\n"
        kernel = int(notes.kernel_note(session.scratch).read_text())
    finally:
        session.close()  # SIGKILL to the relay: its launcher then kills the sandbox
    deadline = time.monotonic() + 10
    while _running(kernel) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(kernel)


def test_the_server_stops_with_its_grader(tmp_path):
    """Killed outright, the grader's server sees its lifeline close, removes its folder and exits (its launchers die
    with it)."""
    code = ("import sys\nfrom autograder.kernel import forkserver\nprint(forkserver.address(), forkserver._server.proc.pid, flush=True)\n"
            "import time\ntime.sleep(600)\n")
    grader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        path, pid = grader.stdout.readline().split()
        assert os.path.exists(path) and os.path.exists(f"/proc/{pid}")
    finally:
        grader.kill()
        grader.wait()
        grader.stdout.close()
    deadline = time.monotonic() + 10
    while (_running(pid) or os.path.exists(os.path.dirname(path))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(pid) and not os.path.exists(os.path.dirname(path))  # nor its socket's folder


def _running(pid) -> bool:
    """Alive and not a zombie (an orphan's parent in a container may be slow to reap it)."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_kernel_whose_address_space_is_too_small_for_the_servers_starts_its_own_interpreter(tmp_path):
    """Under ``--memory-mb 400`` (RLIMIT_AS) a fork of the server, which holds JAX, has no room to start ipykernel's
    threads: PID 1 ``exec``s the kernel's interpreter instead, in the same sandbox."""
    session = KernelSession(tmp_path / "s", Limits(memory_mb=400), tmp_path / "s.log")
    try:
        assert _started_by_server(session)
        run = session.run("import os, sys\nprint(os.getpid(), 'jax' in sys.modules,"
                          " b'kernel.json' in open('/proc/self/cmdline', 'rb').read())", timeout=60)
        assert run.ok and session.output[-1] == "1 False True\n", (run, session.output)
    finally:
        session.close()


def test_doctor_probes_the_sandbox_in_a_forked_kernel_too(monkeypatch):
    """``autograder doctor`` runs the confinement probe in a kernel forked from the server, under the grading memory
    limit, and says so; where that limit leaves no room for a fork it says kernels start their own interpreter."""
    import dataclasses

    import autograder.course

    checks = {c.name: c for c in forkserver.host_checks()}
    assert checks["fork server"].ok, checks
    for name in ("host uid", "/proc/sys", "devices", "own limits"):
        check = checks[f"{name} (forked kernel)"]
        assert check.required and check.ok, check
    small = dataclasses.replace(autograder.course.settings(), memory_mb=400)
    monkeypatch.setattr(autograder.course, "settings", lambda: small)
    [check] = forkserver.host_checks()
    assert not check.ok and not check.required and "(400 MB, pyproject's memory-mb) started its own" in check.detail
    needed = int(check.detail.split("a fork needs ")[1].split()[0])
    assert 400 < needed < 8192, check.detail  # the server's address space and the headroom, in MB
