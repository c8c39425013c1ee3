"""A fork server for sandboxed kernels: every kernel starts from a process that has already imported ipykernel
and JAX, instead of importing them again (about 1.5 CPU-s of every grading kernel's start).

One server per grader process, started with the first kernel and stopped with the grader (:func:`address`):

- it runs with a fixed environment (:func:`kernel.kernel_env` of a folder that does not exist), imports only
  :data:`PRELOAD` (never scalelib, never anything of the instructor's) and is single-threaded (OpenBLAS gets one
  thread), so that what it hands on is the same for every kernel and the sandbox's ``unshare`` can work;
- it never reads a request itself: each connection is accepted and forked at once, and the child reads it (the
  server's memory holds nothing of any kernel's);
- the child is the kernel's launcher: it takes the relay's stdin, stdout, stderr, environment and folder and runs
  :func:`launcher.main`, so every step of the sandbox is the one a ``python -m autograder.sandbox`` process takes
  (limits, cgroup, namespaces, the new root, the drop to the kernel's uid, the lock). Where that process would
  ``exec`` the kernel's interpreter, PID 1 closes every descriptor but 0-2, forgets the grader's modules and runs
  the kernel's code (:func:`_become_kernel`);
- what ``jupyter_client`` starts is a relay (:data:`RELAY`, standard library only): it hands its descriptors over,
  forwards an interrupt to the sandbox's process group and exits with the launcher's code. The launcher kills its
  sandbox as soon as the relay's socket closes: the grader closes a kernel with SIGKILL to the relay.

The socket lies in a folder of the grader's only (mode 0700); a kernel, with a root of its own and no network
namespace in common, can reach neither it nor an abstract socket. ``AUTOGRADER_FORK_SERVER=0`` starts each kernel's
interpreter afresh instead (the old way; same sandbox, slower).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autograder.sandbox.probes import HostCheck

PRELOAD = ("ipykernel.kernelapp", "jax", "jax.numpy")  # what every grading kernel imports before the student's code
_READY = b"ready\n"
_LEN = 8  # bytes of a request's length prefix
# Address space a forked kernel needs beyond the server's own (ipykernel's threads and their stacks, zmq's): under a
# smaller RLIMIT_AS (``--memory-mb``), PID 1 ``exec``s the kernel's interpreter instead, as without a server.
HEADROOM_BYTES = 256 * 2**20

# The relay: ``python -I -S -c RELAY SOCKET CONFIG -- CMD...``. It dies with the grader (PDEATHSIG), passes its
# descriptors 0-2 and its environment with the launcher's arguments, turns SIGINT into b"I" and SIGTERM or SIGHUP
# into b"K" (kill), and exits with the code that follows b"X" (70 if the launcher is gone without one).
RELAY = r"""
import array, ctypes, json, os, select, signal, socket, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda *_: None)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(sys.argv[1])
    req = json.dumps({"argv": sys.argv[2:], "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    req = len(req).to_bytes(8, "big") + req
    sent = sock.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    sock.sendall(req[sent:])
    said = b""
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            for signum in os.read(wake_r, 64):
                sock.sendall(b"I" if signum == signal.SIGINT else b"K")
        if sock in ready:
            got = sock.recv(16)
            if not got:
                break
            said += got
            if len(said) >= 2 and said[:1] == b"X":
                os._exit(said[1])
except OSError as err:
    print(f"sandbox relay: {err}", file=sys.stderr, flush=True)
os._exit(70)
"""

_SERVER_MAIN = "import sys\nfrom autograder.kernel import forkserver\nforkserver.serve(sys.argv[1], int(sys.argv[2]))\n"


def relay_cmd(path: str, launcher_argv: list[str]) -> list[str]:
    """What jupyter_client starts for a kernel launched by the server at ``path``."""
    return [sys.executable, "-I", "-S", "-c", RELAY, path, *launcher_argv]


@dataclass
class _Server:
    proc: subprocess.Popen
    folder: str
    path: str  # its socket, in ``folder``
    lifeline: int  # the write end: the server exits once every copy is closed (this process exited or stopped it)


_lock = threading.Lock()
_server: _Server | None = None
_failed = ""


def enabled() -> bool:
    return os.environ.get("AUTOGRADER_FORK_SERVER", "1") != "0"


def address() -> str | None:
    """The socket of this process's fork server, started on first use; None if it is turned off or could not
    start (then kernels start the old way, and the reason is printed once)."""
    global _server, _failed
    if not enabled() or _failed:
        return None
    with _lock:
        if _server is not None and _server.proc.poll() is None:
            return _server.path
        if _server is not None:
            _stop(_server)
            _server = None
        try:
            _server = _start()
        except (OSError, RuntimeError, subprocess.SubprocessError) as err:
            _failed = str(err)
            print(f"grader: the kernels' fork server did not start ({err}); each kernel starts its own interpreter",
                  file=sys.stderr, flush=True)
            return None
        return _server.path


def _start(wait_s: float = 120.0) -> _Server:
    from autograder.kernel.environment import kernel_env

    folder = tempfile.mkdtemp(prefix="grader-forks-")
    path = os.path.join(folder, "s")
    read_end, write_end = os.pipe()
    env = kernel_env(Path(folder, "no-kernel-here"))  # every kernel's variables; each kernel gets its own values
    try:
        proc = subprocess.Popen([sys.executable, "-c", _SERVER_MAIN, path, str(read_end)],
                                pass_fds=[read_end], env=env, cwd="/", stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, start_new_session=True)
    except BaseException:
        os.close(write_end)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.close(read_end)
    server = _Server(proc, folder, path, write_end)
    assert proc.stdout is not None
    if not select.select([proc.stdout.fileno()], [], [], wait_s)[0] or proc.stdout.readline() != _READY:
        _stop(server)
        raise RuntimeError(f"no answer within {wait_s:.0f} s (exit code {proc.poll()})")
    atexit.register(_stop, server)
    return server


def _stop(server: _Server) -> None:
    """Close the lifeline (once: its number may belong to another file afterwards) and wait for the server."""
    if server.lifeline >= 0:
        with contextlib.suppress(OSError):
            os.close(server.lifeline)
        server.lifeline = -1
    try:
        server.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    if server.proc.stdout is not None:
        server.proc.stdout.close()
    shutil.rmtree(server.folder, ignore_errors=True)


def stop() -> None:
    """Stop this process's fork server, if it runs (the next kernel starts a new one)."""
    global _server
    with _lock:
        if _server is not None:
            _stop(_server)
            _server = None


def host_checks() -> list[HostCheck]:
    """The fork path as ``python -m autograder doctor`` sees it: :data:`probes.CONFINEMENT_PROBE` run in a kernel
    forked from this process's server under the course's grading memory limit (pyproject's ``memory-mb``), judged
    like the one ``probes.host_checks`` runs in a fresh interpreter. Empty where kernels cannot be sandboxed (no
    server then)."""
    from autograder.course import settings
    from autograder.sandbox import probes

    if probes.available():
        return []
    if not enabled():
        return [probes.HostCheck("fork server", True, "turned off (AUTOGRADER_FORK_SERVER=0): each kernel starts "
                                  "its own interpreter", False)]
    path = address()
    if path is None:
        return [probes.HostCheck("fork server", False, f"did not start ({_failed}): each kernel starts its own "
                                  "interpreter, in the same sandbox, about 1.5 CPU-s slower", False)]
    memory_mb = settings().memory_mb
    found = probes.confinement(lambda argv: relay_cmd(path, argv), memory_mb)
    if "error" not in found and not found.get("preloaded"):
        return [probes.HostCheck("fork server", False, f"a kernel under the grading memory limit ({memory_mb} MB, "
                                  "pyproject's memory-mb) started its own interpreter instead of forking: a fork "
                                  f"needs {_needed_mb()} MB of address space (what the server imported, and room "
                                  "for ipykernel's threads)", False)]
    forked = [probes.HostCheck(f"{c.name} (forked kernel)", c.ok, c.detail, c.required)
              for c in probes.confinement_checks(found)]
    return [probes.HostCheck("fork server", True, "kernels fork from a server that imported ipykernel and JAX; "
                              "the checks marked (forked kernel) ran in one", False), *forked]


def _needed_mb() -> int:
    """The smallest ``--memory-mb`` under which a kernel forks from the running server (see :func:`_become_kernel`)."""
    if _server is None:
        return 0
    return -(-(_address_space_bytes(_server.proc.pid) + HEADROOM_BYTES) // 2**20)


# ----------------------------------------------------------------------------------------------- the server side


def serve(path: str, lifeline: int) -> None:
    """The server's loop: preload, then fork a launcher per connection until ``lifeline`` reads EOF."""
    sys.modules["debugpy"] = None  # type: ignore[assignment]  # as the kernel's own command does (kernel.py)
    if "rfc3987_syntax" in sys.modules and sys.modules["rfc3987_syntax"] is None:  # autograder's marker, not a kernel's
        del sys.modules["rfc3987_syntax"]
    for name in PRELOAD:
        importlib.import_module(name)
    if "scalelib" in sys.modules:  # each kernel gets its own part of the library (autograder.library.surface)
        sys.exit("fork server: scalelib was imported; kernels must import their own")
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        sys.exit(f"fork server: {len(threads)} threads after its imports; it must fork with one")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    os.write(1, _READY)
    try:
        _accept(listener, lifeline)
    finally:  # its folder goes with it, also when the grader died without stopping it
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _accept(listener: socket.socket, lifeline: int) -> None:
    while True:
        ready = select.select([listener.fileno(), lifeline], [], [], 1.0)[0]
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        if lifeline in ready:
            return
        if listener.fileno() in ready:
            conn, _ = listener.accept()
            fd = conn.detach()
            if os.fork() == 0:
                code = 70
                try:
                    listener.close()
                    os.close(lifeline)
                    code = _launcher(fd)
                except BaseException as err:  # said in the kernel's log once its stderr is the relay's
                    with contextlib.suppress(BaseException):
                        print(f"sandbox: the fork server's launcher failed: {type(err).__name__}: {err}",
                              file=sys.stderr, flush=True)
                finally:
                    os._exit(code)
            os.close(fd)


def _receive(fd: int) -> tuple[dict, list[int]]:
    sock = socket.socket(fileno=os.dup(fd))
    try:
        data, ancillary, _, _ = sock.recvmsg(1 << 16, socket.CMSG_LEN(3 * 4))
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(memoryview(payload).cast("i"))
        size = int.from_bytes(data[:_LEN], "big")
        while len(data) < _LEN + size:
            more = sock.recv(_LEN + size - len(data))
            if not more:
                raise OSError("the relay hung up")
            data += more
    finally:
        sock.close()
    return json.loads(data[_LEN:_LEN + size]), fds


def _launcher(fd: int) -> int:
    """A forked child of the server: becomes what ``python -m autograder.sandbox ARGV`` would be."""
    from autograder.sandbox import launcher

    os.setsid()
    request, fds = _receive(fd)
    if len(fds) != 3:
        return 70
    for target, got in enumerate(fds):
        os.dup2(got, target)
        os.close(got)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    np = sys.modules.get("numpy")
    if np is not None:  # the global generator was seeded in the server, once for every kernel
        np.random.seed()
    code = launcher.main(request["argv"], relay=fd, become=_become_kernel)
    with contextlib.suppress(OSError):
        os.write(fd, b"X" + bytes([code & 0xFF]))
    return code


def _address_space_bytes(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def _become_kernel(cmd: list[str]) -> None:
    """PID 1 of the sandbox, its root built and its uid dropped: run ``cmd`` (``python -c CODE ARGS...``, the
    kernel's command) in this process instead of ``exec``-ing it, and exit. Returns (and the sandbox ``exec``s)
    for any other command."""
    if len(cmd) < 3 or cmd[0] != sys.executable or cmd[1] != "-c":
        return
    room = resource.getrlimit(resource.RLIMIT_AS)[0]
    if room != resource.RLIM_INFINITY and room < _address_space_bytes() + HEADROOM_BYTES:
        return  # a small address-space limit: a fresh interpreter starts far smaller than what the server imported
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # nothing of the server's or the launcher's reaches the kernel
    for name in [m for m in sys.modules if m == "autograder" or m.startswith("autograder.")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    sys.argv = ["-c", *cmd[3:]]
    sys.orig_argv = list(cmd)  # what ``python -c`` would have said (/proc/self/cmdline still shows the server's)
    if sys.path[:1] != [""]:  # as for ``python -c`` (the server was started so); the kernel's code decides
        sys.path.insert(0, "")
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(cmd[2], "<string>", "exec"), main.__dict__)  # the grader's own kernel command
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # what the interpreter's exit would run
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
