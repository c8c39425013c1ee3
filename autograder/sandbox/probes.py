"""What the sandbox can have on this host: whether namespaces work at all, and what student code inside one
can reach (each namespace kind tried alone, mounts, shared memory, /proc/sys, limits). ``python -m autograder
doctor`` prints these checks; ``grade`` refuses to run without the required ones.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autograder.sandbox import cgroups
from autograder.sandbox.config import SandboxConfig
from autograder.sandbox.confine import DEV_LINKS, DEVICES, kernel_ids
from autograder.sandbox.syscalls import SYS_PIVOT_ROOT


def launcher_cmd(argv: list[str]) -> list[str]:
    """The command that runs :func:`main` with ``argv`` in a process of its own (the way without a fork server)."""
    return [sys.executable, "-m", "autograder.sandbox", *argv]


def launch(code: str, settings: dict[str, Any], args: tuple[str, ...] = (), timeout_s: float = 60,
           launcher: Callable[[list[str]], list[str]] = launcher_cmd) -> tuple[str, str]:
    """Run ``python -c code`` in a sandbox of ``settings`` (:class:`SandboxConfig`'s fields; the scratch folder is a
    temporary one) started by ``launcher``'s command; (stdout, why it failed or '')."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as tmp:
        cmd = launcher([SandboxConfig(scratch=tmp, **settings).to_json(), "--", sys.executable, "-c", code, *args])
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
    out, why = launch("import os; assert not os.path.exists('/root/.bashrc-probe'); open('ok', 'w').write('1'); "
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


def confinement(launcher: Callable[[list[str]], list[str]] = launcher_cmd, memory_mb: int = PROBE_MEMORY_MB) -> dict:
    """What :data:`CONFINEMENT_PROBE` found in a sandbox like a kernel's ({'error': ...} if it did not run), started
    by ``launcher`` (``zygote.host_checks`` passes the fork server's relay). ``preloaded``: JAX was imported before
    the probe ran, i.e. the probe was forked from the server rather than run by an interpreter of its own."""
    uid, gid = kernel_ids()
    out, why = launch(CONFINEMENT_PROBE, {"memory_mb": memory_mb, "disk_mb": 16, "uid": uid, "gid": gid},
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
