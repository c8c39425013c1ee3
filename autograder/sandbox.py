"""Run one student kernel in an OS-level sandbox: ``python -m autograder.sandbox CONFIG_JSON -- CMD...``.

What it does, in this order (Linux, no root needed where unprivileged user namespaces are enabled):

1. resource limits (always, even without a sandbox): address space (``--memory-mb``), file size, no core
   dumps, and a CPU-seconds backstop; a memory cgroup for all the kernel's processes together where the host
   allows one (the processes sit in a leaf below the cgroup that carries the limit);
2. a child of the launcher joins that cgroup and makes new mount, network, PID, IPC, UTS and cgroup
   namespaces (as root: owned by the host, so that no process inside holds a capability over them; otherwise
   inside a user namespace of the grader's uid); its child is PID 1 there and becomes the kernel, so the
   kernel can neither see nor signal the grader, other kernels or anything else;
3. a fresh root file system (``pivot_root`` into a tmpfs, built in a tmpfs of the sandbox's own mount
   namespace: nothing is made on the host's disk) that contains only what Python needs, read-only: ``/usr``,
   ``/lib*``, ``/bin``, ``/etc``, the interpreter and the virtual environment, and the allowed part of
   ``scalelib``; a ``/dev`` holding only null, zero, full, random and urandom; ``/proc`` with ``/proc/sys``
   read-only. The only writable places are the kernel's scratch folder, ``/tmp`` and ``/dev/shm``, all three
   in one tmpfs of ``disk_mb`` (the student's whole disk: every file of every process, also counted in the
   memory cgroup). ``solutions/``, ``.git``, the gradebook, the grading output, other students' notebooks and
   home folders simply do not exist inside;
4. PID 1 then runs as an unprivileged host uid: a grader run as root drops it, after building the root and
   before any user namespace exists, to a dedicated uid and gid of no account, with no supplementary groups
   (:func:`kernel_ids`; another one per kernel); otherwise it is the grader's own uid. A user namespace of its
   own (mapping only that uid) is limited to holding one more: a second user+mount namespace on top, which
   locks every mount (read-only stays read-only, the old root cannot be re-exposed), in which the kernel is
   ``exec``'d (or, for a launcher forked by :mod:`autograder.zygote`, run in that process once every other
   descriptor is closed), holding no capability at all (bounding set empty, securebits locked, no_new_privs), so it
   can make no namespace of its own (each kind, alone or together), mount nothing, and has no System V shared
   memory or message queue (its IPC namespace allows none). The
   kernel talks to the grader over Unix sockets in its scratch folder, which the grader reaches through
   ``/proc/PID/root``; there is no network (only a down loopback).

If namespaces are unavailable, :func:`available` says so and the grader prints a loud warning and runs
kernels with resource limits only.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import ctypes.util
import itertools
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from autograder import cgroups, safe_text
from autograder.report import atomic_write

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 28, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# Every "root keeps or regains capabilities" rule switched off and locked: no setuid fix-up, no capabilities for
# uid 0 at exec, no ambient raise (SECBIT_NOROOT, NO_SETUID_FIXUP, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE, locked).
SECUREBITS_LOCKED_DOWN = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# The IPC namespace's own settings, set to 0 while the sandbox is built: System V shared memory and message
# queues hold memory that no process's resident set shows, so the kernel gets none of either.
IPC_NONE = ("kernel/shmmax", "kernel/shmall", "kernel/shmmni", "kernel/msgmni", "kernel/msgmnb")
# Descriptors per process: each pipe or socket one holds can keep a kernel buffer that no resident set shows,
# so their number is bounded (ipykernel and JAX use well under a hundred).
MAX_OPEN_FILES = 1024
DEVICES = ("null", "zero", "full", "random", "urandom")  # the only device nodes inside
KERNEL_LINE = "kernel stderr| "  # how the launcher marks each line the sandbox's processes write to their stderr
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}
BUILD = "/tmp"  # the sandbox builds its root in a tmpfs mounted here, in its own mount namespace only
# Host uids of sandboxed kernels when the grader runs as root: far above any account's, one per kernel slot.
KERNEL_UID_BASE, KERNEL_UID_SLOTS = 1_900_000_000, 1 << 20

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_PROC = "/proc"  # where this process's /proc is while the sandbox is built (under the old root, then)


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
    for line in Path(_PROC, "self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(target.rstrip("/") + "/"):
            out.append(point)
    return out


def _bind(src: str, target: str, writable: bool) -> None:
    """Bind ``src`` (a folder or a file, with everything mounted under it) at ``target``; read-only unless
    ``writable``."""
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


def _read_only_bind(path: str) -> None:
    _mount(path, path, None, MS_BIND | MS_REC)
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


_slots = itertools.count()


def kernel_ids() -> tuple[int, int]:
    """The host uid and gid a sandboxed kernel runs as. The grader's own when it is not root (a user namespace
    maps nothing else); as root, a dedicated pair that no account has, another one for each kernel this grader
    starts (two kernels never share one while a grader has fewer than a million of them at once)."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    import grp
    import pwd

    while True:
        uid = KERNEL_UID_BASE + (os.getpid() * 4099 + next(_slots)) % KERNEL_UID_SLOTS
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            return uid, uid


def _drop_to(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` with no supplementary groups (from root; a no-op for the grader's own ids)."""
    if os.geteuid() == 0:
        if uid == 0 or gid == 0:
            raise OSError(1, "refusing to run a kernel as root")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        _libc.prctl(PR_SET_DUMPABLE, 1)  # its own /proc files stay its own (to write its user namespace's maps)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise OSError(1, "could not drop root")


@dataclass(frozen=True)
class _Plan:
    """What the sandbox's processes need, gathered by the launcher: the ids the kernel runs as, whether the
    sandbox is built as root (then dropped to them) or in a user namespace of the grader's own uid, the
    folders to bind, and the files the grader put in the scratch folder (the connection file)."""

    uid: int
    gid: int
    privileged: bool
    scratch: str
    read_only: list[str]
    seeds: dict[str, bytes]

    @classmethod
    def make(cls, cfg: dict) -> _Plan:
        privileged = os.geteuid() == 0
        if not privileged:
            uid, gid = os.getuid(), os.getgid()
        elif cfg.get("uid") is not None:
            uid, gid = int(cfg["uid"]), int(cfg.get("gid", cfg["uid"]))
        else:
            uid, gid = kernel_ids()
        scratch = os.path.realpath(cfg["scratch"])
        read_only = list(cfg.get("read_only") or read_only_paths(library=not cfg.get("library")))
        seeds = {}
        for entry in sorted(os.scandir(scratch), key=lambda e: e.name)[:16]:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_size <= 2**20:
                seeds[entry.name] = Path(entry.path).read_bytes()
        return cls(uid, gid, privileged, scratch, read_only, seeds)


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
        # Soft and hard limit alike: at the hard limit the kernel sends SIGKILL. The soft limit's SIGXCPU would not
        # do: the kernel runs as PID 1 of its PID namespace, and Linux drops a signal whose action is the default
        # for such a process (only SIGKILL and SIGSTOP get through).
        n = int(cfg["cpu_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (n, n))
    n = int(cfg.get("file_mb", 256)) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queue holds memory
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, top) if soft != resource.RLIM_INFINITY else top, top))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Leave the kernel no capability in any namespace, now or after an ``exec``: the bounding and ambient sets
    emptied, root's exec-time capabilities switched off (securebits, locked), the three sets cleared, and
    ``no_new_privs`` set. Without CAP_SYS_ADMIN in its own user namespace the kernel can make no mount, PID,
    network, IPC, UTS or cgroup namespace and mount nothing; a new user namespace (which needs no capability) is
    refused by the namespace count its parent allows (``max_user_namespaces``)."""
    _check(_libc.prctl(PR_SET_SECUREBITS, ctypes.c_ulong(SECUREBITS_LOCKED_DOWN), 0, 0, 0), "securebits")
    last = int(Path(_PROC, "sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0), f"drop capability {cap}")
    _check(_libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0), "clear ambient")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0), "no_new_privs")


def _close_ipc(proc: str) -> None:
    """Set the sandbox's own IPC namespace's limits (under ``proc``, its /proc) to no shared memory segment and
    no message queue; an error if the host's kernel keeps these settings for its first namespace only."""
    for name in IPC_NONE:
        Path(proc, "sys", name).write_text("0")


def _enter(cfg: dict, plan: _Plan, lifeline: int | None = None) -> None:
    """The sandbox's PID 1: build the new root in tmpfs mounts of its own mount namespace (nothing is made on the
    host), pivot into it, become the kernel's unprivileged uid (as root: drop to it; otherwise it already is,
    as root of a user namespace) and lock it all. ``lifeline``: a pipe's end that reads EOF once the parent
    has died."""
    global _PROC
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _unshare(CLONE_NEWNS)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    # The build area: a tmpfs over /tmp (in this namespace only), holding the new root, the old root and the
    # writable tmpfs; after the first pivot the host's folders are under /oldroot, /tmp included.
    _mount("tmpfs", BUILD, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700")
    for name in ("newroot", "oldroot", "w"):
        os.mkdir(f"{BUILD}/{name}")
    _check(_libc.syscall(SYS_PIVOT_ROOT, BUILD.encode(), f"{BUILD}/oldroot".encode()), "pivot_root")
    os.chdir("/")
    _PROC = "/oldroot/proc"
    new = "/newroot"
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    # Everything the kernel may write, in one tmpfs: its scratch folder, /tmp and /dev/shm together.
    disk_mb = int(cfg.get("disk_mb") or 0)
    _mount("tmpfs", "/w", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755" + (f",size={disk_mb}m" if disk_mb else ""))
    for name, mode in (("tmp", 0o1777), ("shm", 0o1777), ("scratch", 0o755)):
        os.mkdir(f"/w/{name}")
        os.chmod(f"/w/{name}", mode)
    for name, data in plan.seeds.items():
        Path("/w/scratch", name).write_bytes(data)
    if plan.privileged:
        os.chown("/w/scratch", plan.uid, plan.gid)
        for name in plan.seeds:
            os.chown(f"/w/scratch/{name}", plan.uid, plan.gid)
    # A private /tmp first, so that read-only paths under /tmp (an environment or a checkout there)
    # are bound on top of it rather than hidden by it.
    _bind("/w/tmp", new + "/tmp", writable=True)
    for p in plan.read_only:
        _bind("/oldroot" + p, new + p, writable=False)
    library = cfg.get("library")
    if library:  # this kernel's scalelib, where the real one would be (which is not bound at all)
        _bind("/oldroot" + os.path.realpath(library), new + cfg["library_target"], writable=False)
    for p in cfg.get("hide", []):  # other copies of scalelib under the bound folders
        _mount("tmpfs", new + p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")
    os.makedirs(new + "/dev", exist_ok=True)
    _mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        _bind(f"/oldroot/dev/{name}", f"{new}/dev/{name}", writable=True)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{new}/dev/{name}")
    _bind("/w/shm", new + "/dev/shm", writable=True)
    _mount(None, new + "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    os.makedirs(new + "/proc", exist_ok=True)
    _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _close_ipc(new + "/proc")  # while PID 1 is still root of the namespace that owns the IPC namespace
    _bind("/w/scratch", new + plan.scratch, writable=True)  # last: it may lie under /tmp
    _check(_libc.umount2(b"/oldroot", MNT_DETACH), "umount old root")
    os.chdir(new)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount build area")  # the build area goes; its mounts stay
    os.chdir("/")
    _PROC = "/proc"
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if plan.privileged:  # built as root: now the kernel's uid, root of a user namespace of its own
        _drop_to(plan.uid, plan.gid)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of uid clears it
        if lifeline is not None and select.select([lifeline], [], [], 0)[0]:  # its parent died before that
            os._exit(70)
        _unshare(CLONE_NEWUSER | CLONE_NEWNS)
        _map_ids(plan.uid, plan.gid)
    # This user namespace may hold one more (the lock below) and no other: the kernel, root of that last one,
    # can make no user namespace of its own (which needs no capability); the others need the capabilities that
    # _drop_capabilities takes away.
    with contextlib.suppress(OSError):
        Path("/proc/sys/user/max_user_namespaces").write_text("1")
    for part in ("sys", "sysrq-trigger", "irq", "bus"):  # the host kernel's settings: read-only
        if os.path.exists(f"/proc/{part}"):
            _read_only_bind(f"/proc/{part}")
    # Lock all of the above: a new user+mount namespace cannot undo mounts made in its parent.
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_ids(uid, gid)
    _drop_capabilities()
    os.chdir(plan.scratch)


def _launcher_cmd(argv: list[str]) -> list[str]:
    """The command that runs :func:`main` with ``argv`` in a process of its own (the way without a fork server)."""
    return [sys.executable, "-m", "autograder.sandbox", *argv]


def _launch(code: str, cfg: dict, args: tuple[str, ...] = (), timeout_s: float = 60,
            launcher: Callable[[list[str]], list[str]] = _launcher_cmd) -> tuple[str, str]:
    """Run ``python -c code`` in a sandbox (scratch: a temporary folder) started by ``launcher``'s command;
    (stdout, why it failed or '')."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        cmd = launcher([json.dumps({"scratch": tmp, **cfg}), "--", sys.executable, "-c", code, *args])
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return "", "sandbox probe timed out"
        if run.returncode != 0:
            return run.stdout, (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    return run.stdout, ""


def probe() -> str:
    """'' if sandboxing works here, else why not (run in a child process: unshare changes the caller)."""
    if sys.platform != "linux" or SYS_PIVOT_ROOT is None:
        return f"no Linux namespaces on {sys.platform}/{os.uname().machine}"
    out, why = _launch("import os; assert not os.path.exists('/root/.bashrc-probe'); open('ok', 'w').write('1'); "
                       "print('sandbox', open('ok').read())", {"memory_mb": 0})
    if why or out.strip() != "sandbox 1":
        return why or f"the probe said {out.strip()[-200:]!r}"
    return ""


# What student code tries from inside a sandbox to get hold of the host (doctor runs it; tests do too). Each
# attempt opens for writing and writes nothing: were the sandbox broken, the probe itself would change nothing.
CONFINEMENT_PROBE = r"""
import ctypes, json, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
found = {"usr_owner": os.stat("/usr").st_uid, "dev": sorted(os.listdir("/dev")), "preloaded": "jax" in sys.modules}
found["sysctl_writable"] = []
for folder, _, files in os.walk("/proc/sys"):
    for f in files:
        try:
            os.close(os.open(os.path.join(folder, f), os.O_WRONLY))
            found["sysctl_writable"].append(os.path.join(folder, f))
        except OSError:
            pass
found["devices_opened"] = []
for name in ("kvm", "mem", "kmem", "kmsg", "port", "sda", "vda", "nvme0", "loop0", "loop-control", "fuse", "ptmx",
             "console", "tty", "btrfs-control", "net/tun", "cpu/0/msr"):
    try:
        os.close(os.open("/dev/" + name, os.O_RDWR))
        found["devices_opened"].append(name)
    except OSError:
        pass
try:
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    found["rlimit_raised"] = True
except (ValueError, OSError):
    found["rlimit_raised"] = False
def alone(what, flag):  # in a child: one namespace asked for on its own, so that one refusal hides no other
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, b"made" if libc.unshare(flag) == 0 else os.strerror(ctypes.get_errno()).encode())
        os._exit(0)
    os.close(w)
    said = os.read(r, 200).decode() or "no answer"
    os.close(r)
    os.waitpid(pid, 0)
    return said
found["namespaces"] = {name: alone(name, flag) for name, flag in (
    ("mount", 0x00020000), ("cgroup", 0x02000000), ("uts", 0x04000000), ("ipc", 0x08000000),
    ("user", 0x10000000), ("pid", 0x20000000), ("net", 0x40000000))}
os.makedirs("/tmp/probe-mount", exist_ok=True)
found["namespaces"]["tmpfs mount"] = ("made" if libc.mount(b"tmpfs", b"/tmp/probe-mount", b"tmpfs", 0, None) == 0
                                      else os.strerror(ctypes.get_errno()))
libc.shmget.restype = ctypes.c_int
found["namespaces"]["shared memory segment"] = ("made" if libc.shmget(0, 4096, 0o1000 | 0o600) >= 0
                                                else os.strerror(ctypes.get_errno()))
found["capabilities"] = [line.split()[1] for line in open("/proc/self/status") if line.startswith("Cap")]
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # a cgroup namespace of its own, the memory hierarchies mounted, every limit file it shows opened
    os.close(read)
    raised, how = [], ""
    try:
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(0x10000000 | 0x00020000 | 0x02000000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        open("/proc/self/setgroups", "w").write("deny")
        open("/proc/self/uid_map", "w").write(f"0 {uid} 1")
        open("/proc/self/gid_map", "w").write(f"0 {gid} 1")
        how = "namespace made"
        for fstype, data in (("cgroup", b"memory"), ("cgroup2", None)):
            at = f"/tmp/{fstype}"
            os.makedirs(at, exist_ok=True)
            if libc.mount(fstype.encode(), at.encode(), fstype.encode(), 0, data) != 0:
                continue
            how += f"; {fstype} mounted"
            for folder, _, files in os.walk(at):
                for f in files:
                    if f in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max"):
                        try:
                            os.close(os.open(os.path.join(folder, f), os.O_WRONLY))
                            raised.append(os.path.join(folder, f))
                        except OSError:
                            pass
    except OSError as err:
        how = f"{how}; {err}"
    os.write(write, json.dumps([raised, how]).encode())
    os._exit(0)
os.close(write)
chunks = []
while True:
    chunk = os.read(read, 65536)
    if not chunk:
        break
    chunks.append(chunk)
os.waitpid(pid, 0)
found["limits_raised"], found["cgroup_attempt"] = json.loads(b"".join(chunks) or b'[[], "no answer"]')
print(json.dumps(found))
"""
PROBE_MEMORY_MB = 256


def confinement(launcher: Callable[[list[str]], list[str]] = _launcher_cmd, memory_mb: int = PROBE_MEMORY_MB) -> dict:
    """What :data:`CONFINEMENT_PROBE` found in a sandbox like a kernel's ({'error': ...} if it did not run), started
    by ``launcher`` (``zygote.host_checks`` passes the fork server's relay). ``preloaded``: JAX was imported before
    the probe ran, i.e. the probe was forked from the server rather than run by an interpreter of its own."""
    uid, gid = kernel_ids()
    out, why = _launch(CONFINEMENT_PROBE, {"memory_mb": memory_mb, "disk_mb": 16, "uid": uid, "gid": gid},
                       launcher=launcher)
    try:
        return {**json.loads(out.strip().splitlines()[-1]), "uid": uid} if not why else {"error": why}
    except (ValueError, IndexError):
        return {"error": f"unreadable probe output {out[-200:]!r}"}


def confinement_checks(found: dict) -> list[HostCheck]:
    """Judge :func:`confinement`'s findings: one required check per property."""
    if "error" in found:
        return [HostCheck("confinement", False, f"the confinement probe did not run: {found['error']}", True)]
    uid = found.get("uid", "?")
    root = found["usr_owner"] == 0
    checks = [HostCheck(
        "host uid", not root,
        "student code is host root inside the sandbox (files of the host's root show as its own): it can do what "
        "root can to anything the sandbox shows" if root else
        f"student code runs as host uid {uid}{' (dedicated, no account)' if os.geteuid() == 0 else ''}; the host's "
        "root owns nothing inside that it may change", True)]
    sysctl = found["sysctl_writable"]
    checks.append(HostCheck(
        "/proc/sys", not sysctl,
        f"{len(sysctl)} kernel settings writable from inside, e.g. {', '.join(sysctl[:3])}" if sysctl else
        "read-only: no kernel setting can be changed from inside", True))
    extra = sorted(set(found["dev"]) - set(DEVICES) - set(DEV_LINKS) - {"shm"})
    opened = found["devices_opened"]
    checks.append(HostCheck(
        "devices", not extra and not opened,
        f"device nodes beyond {'/'.join(DEVICES)} inside: {', '.join(sorted(set(extra) | set(opened)))}"
        if extra or opened else f"/dev holds only {', '.join(DEVICES)} (and shm, fd links)", True))
    made = sorted(name for name, said in found["namespaces"].items() if said == "made")
    held = [c for c in found["capabilities"] if int(c, 16)]
    checks.append(HostCheck(
        "namespaces", not made and not held,
        f"student code can make: {', '.join(made)}" + (f" (capabilities held: {' '.join(held)})" if held else "")
        if made or held else
        "student code holds no capability and can make no namespace (each kind tried alone: "
        + ", ".join(k for k in found["namespaces"] if k not in ("tmpfs mount", "shared memory segment"))
        + "), mount no tmpfs and make no System V shared memory segment", True))
    raised = found["limits_raised"] + (["RLIMIT_AS"] if found["rlimit_raised"] else [])
    checks.append(HostCheck(
        "own limits", not raised,
        f"student code may raise its own limits: {', '.join(raised)}" if raised else
        "cannot be raised from inside: " + (
            "student code may make no namespace of its own (no cgroup namespace, no cgroup mount), and cannot raise "
            "its rlimits" if "[Errno 28]" in found["cgroup_attempt"] else
            f"no memory limit file writable ({found['cgroup_attempt'].strip('; ')}), no rlimit raised"), True))
    return checks


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


def host_checks() -> Iterator[HostCheck]:
    """What the sandbox needs from this host, checked, each yielded as soon as it is known (``python -m autograder
    doctor`` prints each before the next one runs: the confinement probe takes seconds)."""
    why = available()
    yield HostCheck("user namespaces", not why,
                    "a fresh root with only Python, the environment and the allowed part of scalelib; no network; "
                    "own PIDs" if not why else f"{why}. " + " ".join(hints()), True)
    cg = cgroups.available()
    yield HostCheck("memory cgroup", not cg,
                    "the memory limit holds for all of a kernel's processes together" if not cg else
                    f"{cg}: the limit holds per process (RLIMIT_AS) and for all together by polling every 0.1 s what "
                    "the kernel holds (resident memory, its files in memory, memory files; a burst between two polls "
                    "can exceed it briefly, and pipes' and sockets' buffers are bounded, not counted: for a count "
                    "of every byte, run the grader as root or with a delegated cgroup v2 memory controller, e.g. "
                    "under `systemd-run --user --scope -p Delegate=yes`)", False)
    if not why:
        yield from confinement_checks(confinement())


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


def _memory_file_bytes(pids: list[int]) -> int:
    """The memory that the memory files (``memfd_create``) open in ``pids`` hold, each file once however many
    descriptors or processes share it. Such a file's pages are in no resident set until mapped; one mapped is also
    in the resident memory of the processes that touched it, and then counted twice (on the safe side)."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/memfd:"):
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


def held_bytes(pids: list[int], files_bytes: int) -> int:
    """All the memory a sandbox without a memory cgroup holds, as its launcher polls it: the resident memory of
    its processes, the pages of its own tmpfs (``files_bytes``: its scratch folder, /tmp and /dev/shm) and of its
    memory files. It has no other place to keep memory that no process's resident set shows: it can mount no
    tmpfs, its IPC namespace allows no System V segment or message queue, and pipes' and sockets' buffers are
    bounded by its :data:`MAX_OPEN_FILES` descriptors per process (a memory cgroup counts those too)."""
    return _resident_bytes(pids) + files_bytes + _memory_file_bytes(pids)


class _StderrTap:
    """Keeps the first ``keep`` bytes of what the kernel writes to its stderr (fd 2) for the log; drops the rest.

    A pipe, drained here, instead of a file: a kernel writing 100 MB to its stderr neither fills the disk nor
    blocks, and the flood is never forwarded as output of some later cell.

    Every line it forwards starts with :data:`KERNEL_LINE`, so that nothing the student writes there reads as the
    launcher's own verdict (whose lines start with ``sandbox:``) in the log or a row. What the kernel wrote is
    decoded as UTF-8 (a character split between two reads is joined; bytes that are no UTF-8 show as ``\\xNN``)
    and its terminal escapes, bidirectional controls and other control characters but newline and tab are
    written as text (:func:`autograder.safe_text.printable_lines`), so that ``cat`` of a kernel's log cannot drive
    an instructor's terminal.
    """

    def __init__(self, fd: int, keep: int = 64 * 1024) -> None:
        self.fd, self.left, self.dropped = fd, keep, 0
        self.line_start = True
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        os.set_blocking(fd, False)

    def _mark(self, data: bytes) -> bytes:
        lines = data.split(b"\n")
        out = [(KERNEL_LINE.encode() if self.line_start and lines[0] else b"") + lines[0]]
        out += [KERNEL_LINE.encode() + line if line else line for line in lines[1:]]
        self.line_start = data.endswith(b"\n")
        return b"\n".join(out)

    def drain(self, wait_s: float) -> None:
        import select

        with contextlib.suppress(OSError, ValueError):
            ready, _, _ = select.select([self.fd], [], [], wait_s)
            while ready:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return
                kept = chunk[: max(self.left, 0)]
                shown = safe_text.printable_lines(self._decoder.decode(kept)).encode() if kept else b""
                if shown:  # empty while a character waits for the rest of its bytes
                    os.write(2, self._mark(shown))
                self.left -= len(kept)
                self.dropped += len(chunk) - len(kept)

    def close(self) -> None:
        self.drain(0)
        if self.dropped:
            print(f"sandbox: {self.dropped} more bytes of the kernel's stderr dropped", file=sys.stderr, flush=True)
        os.close(self.fd)


class _Disk:
    """The sandbox's writable tmpfs, seen from the launcher through ``/proc/PID/root`` once the kernel's PID 1
    has built its root (until then the path shows the host's folder, or nothing)."""

    def __init__(self, pid: int, scratch: str, disk_mb: int) -> None:
        self.path, self.bytes = f"/proc/{pid}/root{scratch}", disk_mb * 2**20
        try:
            self.host_dev = os.stat(scratch).st_dev
        except OSError:
            self.host_dev = -1
        self.fd: int | None = None

    def ready(self) -> bool:
        if self.fd is None:
            with contextlib.suppress(OSError):
                fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
                st = os.fstatvfs(fd)
                if os.fstat(fd).st_dev != self.host_dev and (not self.bytes or st.f_blocks * st.f_frsize == self.bytes):
                    self.fd = fd
                else:
                    os.close(fd)
        return self.fd is not None

    def full(self) -> bool:
        """Fewer than 16 pages left: what a writer that went on past the limit leaves (its writes then fail)."""
        if not self.bytes or self.fd is None:
            return False
        with contextlib.suppress(OSError):
            st = os.fstatvfs(self.fd)
            return st.f_bavail * st.f_frsize < 16 * 4096
        return False

    def used_bytes(self) -> int:
        """What the sandbox's files hold of the tmpfs (host memory), 0 until its root is built."""
        if self.fd is None:
            return 0
        with contextlib.suppress(OSError):
            st = os.fstatvfs(self.fd)
            return (st.f_blocks - st.f_bfree) * st.f_frsize
        return 0


def _watch(child: int, kernel: int, cfg: dict, tap: _StderrTap | None, group: cgroups.MemoryGroup | None = None,
           poll_s: float = 0.1, relay: int | None = None) -> int | None:
    """Wait for the sandbox (``child``, whose child ``kernel`` is PID 1 of its namespace); kill it past
    ``max_procs`` processes, once its disk is full, or, where no memory cgroup limits the sandbox, past its
    memory limit in all the memory its processes and files hold (:func:`held_bytes`). Say each memory-cgroup OOM
    kill as it happens.

    RLIMIT_NPROC cannot cap processes: it is not enforced for a grader run as root, and counts the grader's
    own threads otherwise. A fork bomb is stopped within one poll (the sandbox's memory cgroup lists its
    processes; without one, /proc is scanned for the PID namespace). The reason goes to the kill note first: a
    namespace of a hundred copies of a kernel that imported JAX takes seconds to die (longer than a cell's time
    limit on a loaded machine), and the grader reads the note instead of waiting for this launcher to exit.
    The kernel's pid goes to its note once its root is built (the grader reaches its sockets through it).
    ``relay``: the socket of a fork server's relay (:mod:`autograder.zygote`), which stands for this launcher in
    the grader: b"I" interrupts the sandbox's process group, b"K" or the socket's end kills the sandbox.
    """
    scratch = Path(cfg["scratch"])
    max_procs = int(cfg.get("max_procs", 128))
    memory_mb = int(cfg.get("memory_mb") or 0)
    memory_bytes = None if group is not None else memory_mb * 2**20 or None
    disk = _Disk(kernel, os.path.realpath(scratch), int(cfg.get("disk_mb") or 0)) if kernel else None
    try:
        ns = os.readlink(f"/proc/{kernel}/ns/pid") if kernel else ""
    except OSError:
        ns = ""
    announced = killed = False
    ooms = 0
    while True:
        try:
            done, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            return None
        except InterruptedError:
            continue
        # before the exit: an OOM kill of the namespace's PID 1 ends it at once, and the grader then asks why
        if group is not None and group.oom_kills() > ooms:
            ooms = group.oom_kills()
            with contextlib.suppress(OSError):
                atomic_write(oom_note(scratch), str(ooms))
            print(f"sandbox: over the memory limit of {memory_mb} MB (all its processes together); the OOM killer "
                  f"stopped a process ({ooms} so far)", file=sys.stderr, flush=True)
        if done:
            return status
        if relay is not None and select.select([relay], [], [], 0)[0]:
            try:
                said = os.read(relay, 64)
            except OSError:
                said = b""
            if b"I" in said:
                with contextlib.suppress(OSError):  # the launcher and the sandbox's first process ignore it
                    os.killpg(0, signal.SIGINT)
            if not said or b"K" in said:
                relay = None
                if not killed:
                    with contextlib.suppress(OSError):
                        os.kill(kernel or child, signal.SIGKILL)
                    killed = True
        if disk is not None and not announced and disk.ready():
            with contextlib.suppress(OSError):
                atomic_write(kernel_note(scratch), str(kernel))
            announced = True
        if not killed:
            members = group.members() if group is not None else (_namespace_members(ns) if ns else [])
            why = ""
            if len(members) > max_procs + (1 if group is not None else 0):  # the sandbox's first process
                why = f"more than {max_procs} processes"
            elif memory_bytes and held_bytes(members, disk.used_bytes() if disk else 0) > memory_bytes:
                why = f"over the memory limit of {memory_bytes // 2**20} MB (all its processes together)"
            elif disk is not None and disk.full():
                why = f"over the disk limit of {cfg['disk_mb']} MB (all its files together)"
            if why:
                with contextlib.suppress(OSError):
                    atomic_write(kill_note(scratch), why)
                print(f"sandbox: {why}; killed", file=sys.stderr, flush=True)
                with contextlib.suppress(OSError):  # PID 1 of the namespace: the kernel kills every process in it
                    os.kill(kernel or child, signal.SIGKILL)
                killed = True
        wait_s = poll_s if announced or disk is None else 0.005  # the grader waits for the note to connect
        if tap is not None:
            tap.drain(wait_s)
        else:
            time.sleep(wait_s)


def _memory_group(cfg: dict) -> cgroups.MemoryGroup | None:
    if not cfg.get("memory_mb") or not cfg.get("cgroup", True):
        return None
    return cgroups.create(int(cfg["memory_mb"]) * 2**20)


def _sandbox(cfg: dict, cmd: list[str], plan: _Plan, group: cgroups.MemoryGroup | None, err_fd: int,
             pid_fd: int, become: Callable[[list[str]], None] | None = None) -> None:
    """The launcher's child: joins the memory cgroup, drops to the kernel's uid, makes the namespaces and forks
    their PID 1 (which builds the root and becomes the kernel: ``become(cmd)`` runs it in that process where it
    can, else ``cmd`` is ``exec``'d), tells the launcher its pid, and waits for it. Never returns."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if group is not None:
            group.join()  # the kernel and everything it starts are counted together
        flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
        if plan.privileged:  # as root: no user namespace yet (PID 1 builds the root as root, then drops)
            _unshare(flags)
        else:  # a user namespace of the grader's uid; its root builds the new root
            _unshare(CLONE_NEWUSER | flags)
            _map_ids(plan.uid, plan.gid)
        lifeline, held = os.pipe()  # this process holds one end: the kernel sees EOF on the other once it died
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            own = os.dup(2)  # the launcher's stderr, for this process's own errors (closed at exec and by become)
            os.set_inheritable(own, False)
            os.dup2(err_fd, 2)
            os.close(err_fd)
            os.close(pid_fd)
            os.close(held)
            try:
                _enter(cfg, plan, lifeline)
                if become is not None:
                    become(cmd)
                os.execvp(cmd[0], cmd)
            except OSError as err:  # the file it concerns, if any, is part of its text
                with contextlib.suppress(OSError):
                    os.write(own, f"sandbox: {err}\n".encode())
            os._exit(70)
        os.close(lifeline)
        os.close(err_fd)
        os.write(pid_fd, str(pid).encode())
        os.close(pid_fd)
        while True:
            try:
                _, status, usage = os.wait4(pid, 0)
                break
            except InterruptedError:
                continue
        code = os.waitstatus_to_exitcode(status)
        cpu_s = int(cfg.get("cpu_s") or 0)
        used_s = usage.ru_utime + usage.ru_stime
        # Linux enforces RLIMIT_CPU on the tick-sampled CPU clock, while wait4 reports the scheduler's precise
        # runtime: on a busy machine a process can be killed at its limit with a little less counted here.
        if cpu_s and code == -signal.SIGKILL and used_s >= cpu_s - 0.5:
            with contextlib.suppress(OSError):  # the grader tells the student why (kernel.KernelSession.death)
                atomic_write(kill_note(Path(cfg["scratch"])),
                             f"at the CPU limit of {cpu_s} s (it used {used_s:.1f} s of CPU time)")
        os._exit(code if code >= 0 else 128 - code)
    except BaseException as err:
        with contextlib.suppress(BaseException):
            print(f"sandbox: could not start the sandbox: {err}", file=sys.stderr, flush=True)
        os._exit(70)


def main(argv: list[str], relay: int | None = None, become: Callable[[list[str]], None] | None = None) -> int:
    """``python -m autograder.sandbox CONFIG_JSON -- CMD...``; the fork server (:mod:`autograder.zygote`) calls it
    in a forked child with its relay's socket and a ``become`` that runs the kernel without an ``exec``."""
    cfg = json.loads(argv[0])
    cmd = argv[argv.index("--") + 1:]
    scratch = Path(cfg["scratch"])
    remove_notes(scratch)
    # If the grader dies (killed, out of memory), so does this launcher, and with it the kernel (PDEATHSIG too):
    # no student code outlives the run that started it.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _limits(cfg)
    if not cfg.get("isolate", True):
        if relay is not None:
            raise ValueError("the fork server starts sandboxed kernels only")
        os.execvp(cmd[0], cmd)
    group = _memory_group(cfg)
    if group is not None:
        # The grader removes the group if this launcher is killed before it can (the note is read with care).
        atomic_write(cgroup_note(scratch), str(group.path))
    plan = _Plan.make(cfg)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts go to the kernel (same process group)
    read_end, write_end = os.pipe()
    pid_read, pid_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.close(pid_read)
        if relay is not None:
            os.close(relay)  # the relay sees its end once the launcher is gone, whoever else lives
        _sandbox(cfg, cmd, plan, group, write_end, pid_write, become)
    os.close(write_end)
    os.close(pid_write)
    tap = _StderrTap(read_end)
    with os.fdopen(pid_read, "rb") as said:
        told = said.read(32)  # the kernel's pid, or nothing if the sandbox could not be made
    kernel = int(told) if told.strip().isdigit() else 0
    status = _watch(child, kernel, cfg, tap, group, relay=relay)
    tap.close()
    kernel_note(scratch).unlink(missing_ok=True)
    if group is not None:
        group.remove()
        with contextlib.suppress(OSError):
            cgroup_note(scratch).unlink()
    if status is None:
        return 0
    return os.waitstatus_to_exitcode(status) if status else 0


def cgroup_note(scratch: Path) -> Path:
    """Where a launcher notes its memory cgroup until it removes it: beside the scratch folder, out of the
    sandbox's sight."""
    return scratch.parent / f".{scratch.name}.cgroup"


def kill_note(scratch: Path) -> Path:
    """Where a launcher says why it killed its sandbox, at the moment it does (the namespace may take seconds to
    die): beside the scratch folder, out of the sandbox's sight. Like every note it is written with
    ``report.atomic_write``: the grader reads a note as soon as it exists, and one written in place is empty for a
    moment (a fork bomb's row once said only "the kernel died")."""
    return scratch.parent / f".{scratch.name}.killed"


def kernel_note(scratch: Path) -> Path:
    """Where a launcher notes the kernel's host pid once its root is built (the grader reaches the kernel's
    sockets, in its own tmpfs, through ``/proc/PID/root``)."""
    return scratch.parent / f".{scratch.name}.pid"


def oom_note(scratch: Path) -> Path:
    """Where a launcher counts the processes of its sandbox that the OOM killer stopped (the kernel goes on if
    it was a child)."""
    return scratch.parent / f".{scratch.name}.oom"


def remove_notes(scratch: Path) -> None:
    for note in (kill_note(scratch), kernel_note(scratch), oom_note(scratch)):
        note.unlink(missing_ok=True)


def remove_left_cgroup(scratch: Path) -> None:
    """Remove the memory cgroup of a launcher that was killed (the grader closes kernels with SIGKILL)."""
    note = cgroup_note(scratch)
    with contextlib.suppress(OSError, ValueError):
        path = Path(note.read_text()[:4096]).resolve()
        if path.is_relative_to(cgroups.ROOT) and path.name.startswith("scalelib-grader-"):
            cgroups.MemoryGroup(path, 0, path.parent).remove()
        note.unlink()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
