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

import contextlib
import ctypes
import ctypes.util
import json
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from autograder import cgroups

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


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _enc
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


def _bind(src: str, new_root: str, writable: bool, at: str | None = None) -> None:
    target = new_root + (at or src)
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


def read_only_paths(library: bool = True) -> list[str]:
    """What a kernel needs to start: system folders, the interpreter, the environment (and scalelib, unless a
    kernel gets a library of its own: see :mod:`autograder.surface`)."""
    import importlib.util

    paths = {"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt"}
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))):
        paths.add(os.path.realpath(p))
    spec = importlib.util.find_spec("scalelib")
    if library and spec and spec.origin:
        paths.add(os.path.dirname(os.path.realpath(spec.origin)))
    out = sorted(p for p in paths if os.path.exists(p))
    # drop paths already inside another one
    return [p for p in out if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in out)]


_STRAYS: list[str] | None = None


def stray_libraries(target: str) -> list[str]:
    """Copies of scalelib other than ``target`` that a sandbox would see through its read-only folders (another
    Python's site-packages, a folder a ``.pth`` file adds): the sandbox hides them. Cached per process."""
    global _STRAYS
    if _STRAYS is None:
        import glob

        found: set[str] = set()
        sites: set[str] = set()
        for root in read_only_paths(library=False):
            for prefix in (root, f"{root}/local", *glob.glob(f"{root}/*/")):
                sites |= set(glob.glob(f"{prefix.rstrip('/')}/lib*/python*/*-packages"))
                sites |= set(glob.glob(f"{prefix.rstrip('/')}/lib/python3/dist-packages"))
        extra: set[str] = set()
        for site in sites:
            for pth in glob.glob(f"{site}/*.pth"):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    extra |= {line.strip() for line in Path(pth).read_text().splitlines()
                              if line.strip().startswith("/") and os.path.isdir(line.strip())}
        for folder in sites | extra:
            candidate = os.path.realpath(os.path.join(folder, "scalelib"))
            if os.path.isfile(os.path.join(candidate, "__init__.py")) and candidate != os.path.realpath(target):
                found.add(candidate)
        _STRAYS = sorted(found)
    return list(_STRAYS)


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
    library = cfg.get("library")
    for p in cfg.get("read_only") or read_only_paths(library=not library):
        _bind(p, new_root, writable=False)
    if library:  # this kernel's scalelib, where the real one would be (which is not bound at all)
        _bind(os.path.realpath(library), new_root, writable=False, at=cfg["library_target"])
    for p in cfg.get("hide", []):  # other copies of scalelib under the bound folders
        _mount("tmpfs", new_root + p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")
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
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            return "sandbox probe timed out"
        if run.returncode != 0 or not os.path.exists(os.path.join(tmp, "ok")):
            return (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    return ""


def _sysctl(name: str) -> str:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return ""


def hints() -> list[str]:
    """What to change on this host for :func:`probe` to pass (from the kernel settings that block it)."""
    out = []
    if _sysctl("kernel.unprivileged_userns_clone") == "0":
        out.append("sysctl -w kernel.unprivileged_userns_clone=1  (Debian/Ubuntu switch for user namespaces)")
    if _sysctl("user.max_user_namespaces") == "0":
        out.append("sysctl -w user.max_user_namespaces=15000")
    if _sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        out.append("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0  (Ubuntu 24.04+), or an AppArmor "
                   "profile allowing 'userns' for this Python")
    if Path("/.dockerenv").exists() or os.environ.get("KUBERNETES_SERVICE_HOST"):
        out.append("in a container: a seccomp profile that allows unshare/mount (e.g. Unconfined) and an unmasked "
                   "/proc (Kubernetes: procMount: Unmasked); see autograder/deploy/README.md")
    return out


@dataclass(frozen=True)
class HostCheck:
    name: str
    ok: bool
    detail: str
    required: bool  # False: grading goes on without it, in a weaker way the detail names


def host_checks() -> list[HostCheck]:
    """What the sandbox needs from this host, checked (``python -m autograder doctor`` prints them)."""
    why = available()
    ns = HostCheck("user namespaces", not why,
                   "a fresh root with only Python, the environment and the allowed part of scalelib; no network; "
                   "own PIDs" if not why else f"{why}. " + " ".join(hints()), True)
    cg = cgroups.available()
    mem = HostCheck("memory cgroup", not cg,
                    "the memory limit holds for all of a kernel's processes together" if not cg else
                    f"{cg}: the limit holds per process (RLIMIT_AS) and for all together by polling resident memory "
                    "every 0.1 s (a burst between two polls can exceed it briefly)", False)
    return [ns, mem]


_PROBED: str | None = None


def available() -> str:
    """Cached :func:`probe`: '' when kernels can be sandboxed."""
    global _PROBED
    if _PROBED is None:
        _PROBED = probe()
    return _PROBED


def _namespace_members(ns: str) -> list[int]:
    """The processes in the PID namespace ``ns`` (a /proc/<pid>/ns/pid link target), by host PID."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    out.append(int(entry))
    return out


def _resident_bytes(pids: list[int]) -> int:
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return total


class _StderrTap:
    """Keeps the first ``keep`` bytes of what the kernel writes to its stderr (fd 2) for the log; drops the rest.

    A pipe, drained here, instead of a file: a kernel writing 100 MB to its stderr neither fills the disk nor
    blocks, and the flood is never forwarded as output of some later cell.
    """

    def __init__(self, fd: int, keep: int = 64 * 1024) -> None:
        self.fd, self.left, self.dropped = fd, keep, 0
        os.set_blocking(fd, False)

    def drain(self, wait_s: float) -> None:
        import select

        with contextlib.suppress(OSError, ValueError):
            ready, _, _ = select.select([self.fd], [], [], wait_s)
            while ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return
                kept = chunk[: max(self.left, 0)]
                if kept:
                    os.write(2, kept)
                self.left -= len(kept)
                self.dropped += len(chunk) - len(kept)

    def close(self) -> None:
        self.drain(0)
        if self.dropped:
            print(f"sandbox: {self.dropped} more bytes of the kernel's stderr dropped", file=sys.stderr, flush=True)
        os.close(self.fd)


def _watch(pid: int, max_procs: int, memory_bytes: int | None, tap: _StderrTap | None,
           group: cgroups.MemoryGroup | None = None, poll_s: float = 0.1, note: Path | None = None) -> int | None:
    """Wait for the sandbox's PID 1; kill it (and with it its whole namespace) past ``max_procs`` processes, or,
    where no memory cgroup limits the sandbox, past ``memory_bytes`` of resident memory in all its processes.

    RLIMIT_NPROC cannot cap processes: it is not enforced for a grader run as root, and counts the grader's
    own threads otherwise. A fork bomb is stopped within one poll (the sandbox's memory cgroup lists its
    processes; without one, /proc is scanned for the PID namespace). The reason goes to ``note`` first: a
    namespace of a hundred copies of a kernel that imported JAX takes seconds to die (longer than a cell's time
    limit on a loaded machine), and the grader reads the note instead of waiting for this launcher to exit.
    """
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        ns = ""
    killed = False
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        if done:
            return status
        if not killed:
            members = group.members() if group is not None else (_namespace_members(ns) if ns else [])
            why = ""
            if len(members) > max_procs + (1 if group is not None else 0):  # the launcher may be in the group
                why = f"more than {max_procs} processes"
            elif memory_bytes and _resident_bytes(members) > memory_bytes:
                why = f"over the memory limit of {memory_bytes // 2**20} MB (all its processes together)"
            if why:
                if note is not None:
                    with contextlib.suppress(OSError):
                        note.write_text(why)
                print(f"sandbox: {why}; killed", file=sys.stderr, flush=True)
                os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: the kernel kills every process in it
                killed = True
        if tap is not None:
            tap.drain(poll_s)
        else:
            time.sleep(poll_s)


def _memory_group(cfg: dict) -> cgroups.MemoryGroup | None:
    if not cfg.get("memory_mb") or not cfg.get("cgroup", True):
        return None
    return cgroups.create(int(cfg["memory_mb"]) * 2**20)


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    cmd = argv[argv.index("--") + 1:]
    killed = kill_note(Path(cfg["scratch"]))
    killed.unlink(missing_ok=True)
    # If the grader dies (killed, out of memory), so does this launcher, and with it the kernel (PDEATHSIG too):
    # no student code outlives the run that started it.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _limits(cfg)
    if not cfg.get("isolate", True):
        os.execvp(cmd[0], cmd)
    group = _memory_group(cfg)
    if group is not None:
        # The grader removes the group if this launcher is killed before it can (the note is read with care).
        cgroup_note(Path(cfg["scratch"])).write_text(str(group.path))
        group.join()  # the kernel and everything it starts are counted together
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
    _map_ids(uid, gid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts go to the kernel (same process group)
    import tempfile

    new_root = tempfile.mkdtemp(prefix=".sandbox-root-")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.dup2(write_end, 2)
        os.close(read_end)
        os.close(write_end)
        try:
            _enter(cfg, new_root)
        except OSError as err:
            print(f"sandbox: {err}", file=sys.stderr, flush=True)
            os._exit(70)
        os.execvp(cmd[0], cmd)
    os.close(write_end)
    kept = False
    if group is not None:
        try:
            group.leave()
        except OSError:
            kept = True  # this launcher stays in the group; the grader removes it after the launcher exits
    tap = _StderrTap(read_end)
    memory_bytes = None if group is not None else int(cfg.get("memory_mb") or 0) * 2**20 or None
    status = _watch(pid, int(cfg.get("max_procs", 128)), memory_bytes, tap, group, note=killed)
    tap.close()
    if group is not None:
        if group.oom_kills():
            print(f"sandbox: over the memory limit of {cfg['memory_mb']} MB (all its processes together); "
                  "the kernel's OOM killer stopped a process", file=sys.stderr, flush=True)
        if not kept:
            group.remove()
            with contextlib.suppress(OSError):
                cgroup_note(Path(cfg["scratch"])).unlink()
    with contextlib.suppress(OSError):
        os.rmdir(new_root)
    if status is None:
        return 0
    return os.waitstatus_to_exitcode(status) if status else 0


def cgroup_note(scratch: Path) -> Path:
    """Where a launcher notes its memory cgroup until it removes it: beside the scratch folder, out of the
    sandbox's sight."""
    return scratch.parent / f".{scratch.name}.cgroup"


def kill_note(scratch: Path) -> Path:
    """Where a launcher says why it killed its sandbox, at the moment it does (the namespace may take seconds to
    die): beside the scratch folder, out of the sandbox's sight."""
    return scratch.parent / f".{scratch.name}.killed"


def remove_left_cgroup(scratch: Path) -> None:
    """Remove the memory cgroup of a launcher that was killed (the grader closes kernels with SIGKILL) or could
    not leave it (see main)."""
    note = cgroup_note(scratch)
    with contextlib.suppress(OSError, ValueError):
        path = Path(note.read_text()[:4096]).resolve()
        if path.is_relative_to(cgroups.ROOT) and path.name.startswith("scalelib-grader-"):
            cgroups.MemoryGroup(path, 0, path.parent).remove()
        note.unlink()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
