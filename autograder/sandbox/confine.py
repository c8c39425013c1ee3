"""What the sandbox's PID 1 does (step 3 and 4 of :mod:`autograder.sandbox`): build a fresh root in tmpfs
mounts of its own mount namespace, bind only what Python needs, become the kernel's unprivileged uid, and lock
it all in a user namespace that holds no capability.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.sandbox.config import SandboxConfig
from autograder.sandbox.syscalls import (
    CLONE_NEWNS,
    CLONE_NEWUSER,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_REMOUNT,
    PR_SET_PDEATHSIG,
    SYS_PIVOT_ROOT,
    bind,
    check_ret,
    close_ipc,
    drop_capabilities,
    drop_to,
    libc,
    map_ids,
    mount,
    read_only_bind,
    set_proc,
    unshare,
)

DEVICES = ("null", "zero", "full", "random", "urandom")  # the only device nodes inside


DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2"}


BUILD = "/tmp"  # the sandbox builds its root in a tmpfs mounted here, in its own mount namespace only


# Host uids of sandboxed kernels when the grader runs as root: far above any account's, one per kernel slot.
KERNEL_UID_BASE, KERNEL_UID_SLOTS = 1_900_000_000, 1 << 20


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


@dataclass(frozen=True)
class Plan:
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
    def make(cls, cfg: SandboxConfig) -> Plan:
        privileged = os.geteuid() == 0
        if not privileged:
            uid, gid = os.getuid(), os.getgid()
        elif cfg.uid is not None:
            uid, gid = cfg.uid, cfg.uid if cfg.gid is None else cfg.gid
        else:
            uid, gid = kernel_ids()
        scratch = os.path.realpath(cfg.scratch)
        read_only = list(cfg.read_only or read_only_paths(library=not cfg.library))
        seeds = {}
        for entry in sorted(os.scandir(scratch), key=lambda e: e.name)[:16]:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_size <= 2**20:
                seeds[entry.name] = Path(entry.path).read_bytes()
        return cls(uid, gid, privileged, scratch, read_only, seeds)


def read_only_paths(library: bool = True) -> list[str]:
    """What a kernel needs to start: system folders, the interpreter, the environment (and scalelib, unless a
    kernel gets a library of its own: see :mod:`autograder.library.surface`)."""
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


def enter(cfg: SandboxConfig, plan: Plan, lifeline: int | None = None) -> None:
    """The sandbox's PID 1: build the new root in tmpfs mounts of its own mount namespace (nothing is made on the
    host), pivot into it, become the kernel's unprivileged uid (as root: drop to it; otherwise it already is,
    as root of a user namespace) and lock it all. ``lifeline``: a pipe's end that reads EOF once the parent
    has died."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # The build area: a tmpfs over /tmp (in this namespace only), holding the new root, the old root and the
    # writable tmpfs; after the first pivot the host's folders are under /oldroot, /tmp included.
    mount("tmpfs", BUILD, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0700")
    for name in ("newroot", "oldroot", "w"):
        os.mkdir(f"{BUILD}/{name}")
    check_ret(libc.syscall(SYS_PIVOT_ROOT, BUILD.encode(), f"{BUILD}/oldroot".encode()), "pivot_root")
    os.chdir("/")
    set_proc("/oldroot/proc")
    new = "/newroot"
    mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    # Everything the kernel may write, in one tmpfs: its scratch folder, /tmp and /dev/shm together.
    disk_mb = cfg.disk_mb
    mount("tmpfs", "/w", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755" + (f",size={disk_mb}m" if disk_mb else ""))
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
    bind("/w/tmp", new + "/tmp", writable=True)
    for p in plan.read_only:
        bind("/oldroot" + p, new + p, writable=False)
    library = cfg.library
    if library:  # this kernel's scalelib, where the real one would be (which is not bound at all)
        bind("/oldroot" + os.path.realpath(library), new + cfg.library_target, writable=False)
    for p in cfg.hide:  # other copies of scalelib under the bound folders
        mount("tmpfs", new + p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")
    os.makedirs(new + "/dev", exist_ok=True)
    mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        bind(f"/oldroot/dev/{name}", f"{new}/dev/{name}", writable=True)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{new}/dev/{name}")
    bind("/w/shm", new + "/dev/shm", writable=True)
    mount(None, new + "/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
    os.makedirs(new + "/proc", exist_ok=True)
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    close_ipc(new + "/proc")  # while PID 1 is still root of the namespace that owns the IPC namespace
    bind("/w/scratch", new + plan.scratch, writable=True)  # last: it may lie under /tmp
    check_ret(libc.umount2(b"/oldroot", MNT_DETACH), "umount old root")
    os.chdir(new)
    check_ret(libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    check_ret(libc.umount2(b".", MNT_DETACH), "umount build area")  # the build area goes; its mounts stay
    os.chdir("/")
    set_proc("/proc")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    if plan.privileged:  # built as root: now the kernel's uid, root of a user namespace of its own
        drop_to(plan.uid, plan.gid)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of uid clears it
        if lifeline is not None and select.select([lifeline], [], [], 0)[0]:  # its parent died before that
            os._exit(70)
        unshare(CLONE_NEWUSER | CLONE_NEWNS)
        map_ids(plan.uid, plan.gid)
    # This user namespace may hold one more (the lock below) and no other: the kernel, root of that last one,
    # can make no user namespace of its own (which needs no capability); the others need the capabilities that
    # drop_capabilities takes away.
    with contextlib.suppress(OSError):
        Path("/proc/sys/user/max_user_namespaces").write_text("1")
    for part in ("sys", "sysrq-trigger", "irq", "bus"):  # the host kernel's settings: read-only
        if os.path.exists(f"/proc/{part}"):
            read_only_bind(f"/proc/{part}")
    # Lock all of the above: a new user+mount namespace cannot undo mounts made in its parent.
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | CLONE_NEWNS)
    map_ids(uid, gid)
    drop_capabilities()
    os.chdir(plan.scratch)
