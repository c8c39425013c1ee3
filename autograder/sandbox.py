"""Run one student kernel in an OS-level sandbox: ``python -m autograder.sandbox CONFIG_JSON -- CMD...``.

What it does, in this order (Linux, no root needed where unprivileged user namespaces are enabled):

1. resource limits (always, even without a sandbox): address space (``--memory-mb``), file size, no core
   dumps, and a CPU-seconds backstop;
2. new user, mount, network, PID, IPC and UTS namespaces (``unshare``); the kernel becomes PID 1 of its own
   PID namespace, so it can neither see nor signal the grader, other kernels or anything else;
3. a fresh root file system (``pivot_root`` into a tmpfs) that contains only what Python needs, read-only:
   ``/usr``, ``/lib*``, ``/bin``, ``/etc``, the interpreter and the virtual environment, and the installed
   ``scalelib`` package; plus the kernel's own scratch folder, the only writable place (besides a small
   private ``/tmp``). ``solutions/``, ``.git``, the gradebook, the grading output, other students' notebooks
   and home folders simply do not exist inside;
4. a second user+mount namespace on top, which locks every mount (read-only stays read-only, the old root
   cannot be re-exposed), then ``exec`` of the kernel. The kernel talks to the grader over Unix sockets in
   its scratch folder; there is no network (only a down loopback).

If namespaces are unavailable, :func:`available` says so and the grader prints a loud warning and runs
kernels with resource limits only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _map_ids(uid: int, gid: int) -> None:
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


def _locked_flags(path: str) -> int:
    """The flags of the mount under ``path`` that an unprivileged remount must keep."""
    st = os.statvfs(path)
    flags = 0
    for st_flag, ms_flag in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC)):
        if st.f_flag & st_flag:
            flags |= ms_flag
    return flags


def _submounts(target: str) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(target.rstrip("/") + "/"):
            out.append(point)
    return out


def _bind(src: str, new_root: str, writable: bool) -> None:
    target = new_root + src
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    _mount(src, target, None, MS_BIND | MS_REC)  # a user namespace may only bind whole trees
    if not writable:  # the top and every submount under it (/dev/shm, /etc/hosts, ...) read-only
        for point in [target] + _submounts(target):
            try:
                _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(point))
            except OSError:
                if point == target:
                    raise


def read_only_paths() -> list[str]:
    """What a kernel needs to start: system folders, the interpreter, the environment, scalelib."""
    import importlib.util

    paths = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt"}
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        paths.add(os.path.realpath(p))
    spec = importlib.util.find_spec("scalelib")
    if spec and spec.origin:
        paths.add(os.path.dirname(os.path.realpath(spec.origin)))
    out = sorted(p for p in paths if os.path.exists(p))
    # drop paths already inside another one
    return [p for p in out if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in out)]


def _limits(cfg: dict) -> None:
    if cfg.get("memory_mb"):
        n = int(cfg["memory_mb"]) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    if cfg.get("cpu_s"):
        n = int(cfg["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (n, n + 5))
    n = int(cfg.get("file_mb", 256)) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _enter(cfg: dict, new_root: str) -> None:
    """Child side: build the new root and lock it (we are PID 1 of a new PID namespace)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    scratch = os.path.realpath(cfg["scratch"])
    _unshare(CLONE_NEWNS)  # our own mount namespace: the launcher keeps the real root (to clean up)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    # A private /tmp first, so that read-only paths under /tmp (an environment or a checkout there)
    # are bound on top of it rather than hidden by it.
    os.makedirs(new_root + "/tmp", exist_ok=True)
    _mount("tmpfs", new_root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    for p in cfg.get("read_only") or read_only_paths():
        _bind(p, new_root, writable=False)
    _bind("/dev", new_root, writable=False)  # null, zero, urandom; binding keeps nodev as it is
    if os.path.isdir(new_root + "/dev/shm"):
        _mount("tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    os.makedirs(new_root + "/proc", exist_ok=True)
    _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _bind(scratch, new_root, writable=True)  # last: it may lie under /tmp
    os.makedirs(new_root + "/.old", exist_ok=True)
    _check(_libc.syscall(SYS_PIVOT_ROOT, new_root.encode(), (new_root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # Lock all of the above: a new user+mount namespace cannot undo mounts made in its parent.
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_ids(uid, gid)
    os.chdir(scratch)


def probe() -> str:
    """'' if sandboxing works here, else why not (run in a child process: unshare changes the caller)."""
    if sys.platform != "linux" or SYS_PIVOT_ROOT is None:
        return f"no Linux namespaces on {sys.platform}/{os.uname().machine}"
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        cfg = json.dumps({"scratch": tmp, "memory_mb": 0})
        cmd = [sys.executable, "-m", "autograder.sandbox", cfg, "--", sys.executable, "-c",
               "import os; assert not os.path.exists('/root/.bashrc-probe'); open('ok', 'w').write('1')"]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return "sandbox probe timed out"
        if run.returncode != 0 or not os.path.exists(os.path.join(tmp, "ok")):
            return (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    return ""


_PROBED: str | None = None


def available() -> str:
    """Cached :func:`probe`: '' when kernels can be sandboxed."""
    global _PROBED
    if _PROBED is None:
        _PROBED = probe()
    return _PROBED


def _namespace_size(ns: str) -> int:
    """How many processes live in the PID namespace ``ns`` (a /proc/<pid>/ns/pid link target)."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                n += os.readlink(f"/proc/{entry}/ns/pid") == ns
            except OSError:
                pass
    return n


def _wait_capping_processes(pid: int, max_procs: int, poll_s: float = 0.1) -> int | None:
    """Wait for the sandbox's PID 1; kill it (and with it its whole namespace) past ``max_procs`` processes.

    RLIMIT_NPROC cannot do this: it is not enforced for a grader run as root, and counts the grader's
    own threads otherwise. A fork bomb is stopped within one poll.
    """
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        ns = ""
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if done:
            return status
        if ns and _namespace_size(ns) > max_procs:
            print(f"sandbox: more than {max_procs} processes; killed", file=sys.stderr, flush=True)
            os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: the kernel kills every process in it
        time.sleep(poll_s)


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    cmd = argv[argv.index("--") + 1:]
    _limits(cfg)
    if cfg.get("isolate", True):
        uid, gid = os.getuid(), os.getgid()
        _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
        _map_ids(uid, gid)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts go to the kernel (same process group)
        import tempfile

        new_root = tempfile.mkdtemp(prefix=".sandbox-root-")
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                _enter(cfg, new_root)
            except OSError as err:
                print(f"sandbox: {err}", file=sys.stderr, flush=True)
                os._exit(70)
            os.execvp(cmd[0], cmd)
        status = _wait_capping_processes(pid, int(cfg.get("max_procs", 128)))
        if status is None:
            return 0
        try:
            os.rmdir(new_root)
        except OSError:
            pass
        return os.waitstatus_to_exitcode(status) if status else 0
    os.execvp(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
