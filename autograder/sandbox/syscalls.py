"""The Linux calls the sandbox makes (unshare, mount, pivot_root, id maps, capabilities), each raising
``OSError`` with the call's name when it fails. Nothing here decides what to isolate: see :mod:`.confine`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

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


libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


_PROC = "/proc"  # where this process's /proc is while the sandbox is built (under the old root, then)


def set_proc(path: str) -> None:
    """Say where this process's /proc is now (the sandbox's PID 1 moves it while it builds the new root)."""
    global _PROC
    _PROC = path


def check_ret(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    check_ret(libc.unshare(ctypes.c_int(flags)), "unshare")


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = _enc
    check_ret(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def map_ids(uid: int, gid: int) -> None:
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


def bind(src: str, target: str, writable: bool) -> None:
    """Bind ``src`` (a folder or a file, with everything mounted under it) at ``target``; read-only unless
    ``writable``."""
    if os.path.isdir(src):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    mount(src, target, None, MS_BIND | MS_REC)  # a user namespace may only bind whole trees
    if not writable:  # the top and every submount under it (/dev/shm, /etc/hosts, ...) read-only
        for point in [target] + _submounts(target):
            try:
                mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _locked_flags(point))
            except OSError:
                if point == target:
                    raise


def read_only_bind(path: str) -> None:
    mount(path, path, None, MS_BIND | MS_REC)
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_to(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` with no supplementary groups (from root; a no-op for the grader's own ids)."""
    if os.geteuid() == 0:
        if uid == 0 or gid == 0:
            raise OSError(1, "refusing to run a kernel as root")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_DUMPABLE, 1)  # its own /proc files stay its own (to write its user namespace's maps)
    if os.geteuid() == 0 or os.getuid() == 0:
        raise OSError(1, "could not drop root")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Leave the kernel no capability in any namespace, now or after an ``exec``: the bounding and ambient sets
    emptied, root's exec-time capabilities switched off (securebits, locked), the three sets cleared, and
    ``no_new_privs`` set. Without CAP_SYS_ADMIN in its own user namespace the kernel can make no mount, PID,
    network, IPC, UTS or cgroup namespace and mount nothing; a new user namespace (which needs no capability) is
    refused by the namespace count its parent allows (``max_user_namespaces``)."""
    check_ret(libc.prctl(PR_SET_SECUREBITS, ctypes.c_ulong(SECUREBITS_LOCKED_DOWN), 0, 0, 0), "securebits")
    last = int(Path(_PROC, "sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        check_ret(libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0), f"drop capability {cap}")
    check_ret(libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0), "clear ambient")
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    check_ret(libc.capset(ctypes.byref(header), data), "capset")
    check_ret(libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0), "no_new_privs")


def close_ipc(proc: str) -> None:
    """Set the sandbox's own IPC namespace's limits (under ``proc``, its /proc) to no shared memory segment and
    no message queue; an error if the host's kernel keeps these settings for its first namespace only."""
    for name in IPC_NONE:
        Path(proc, "sys", name).write_text("0")
