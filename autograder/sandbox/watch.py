"""The launcher's watch over a running sandbox: processes counted, memory held (resident sets, tmpfs pages,
memory files) where no cgroup counts it, the disk's fill, and the sandbox's stderr relayed with every line marked
(:data:`KERNEL_LINE`) and its control characters escaped.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path

from autograder import safe_text
from autograder.atomic_files import atomic_write
from autograder.sandbox import cgroups
from autograder.sandbox.config import SandboxConfig, disk_breach, memory_breach
from autograder.sandbox.notes import kernel_note, kill_note, oom_note

KERNEL_LINE = "kernel stderr| "  # how the launcher marks each line the sandbox's processes write to their stderr


def namespace_members(ns: str) -> list[int]:
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


class StderrTap:
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


class Disk:
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


def watch(child: int, kernel: int, cfg: SandboxConfig, tap: StderrTap | None, group: cgroups.MemoryGroup | None = None,
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
    ``relay``: the socket of a fork server's relay (:mod:`autograder.kernel.forkserver`), which stands for this launcher
    in the grader: b"I" interrupts the sandbox's process group, b"K" or the socket's end kills the sandbox.
    """
    scratch = Path(cfg.scratch)
    max_procs = cfg.max_procs
    memory_mb = cfg.memory_mb
    memory_bytes = None if group is not None else memory_mb * 2**20 or None
    disk = Disk(kernel, os.path.realpath(scratch), cfg.disk_mb) if kernel else None
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
            print(f"sandbox: {memory_breach(memory_mb)}; the OOM killer "
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
            members = group.members() if group is not None else (namespace_members(ns) if ns else [])
            why = ""
            if len(members) > max_procs + (1 if group is not None else 0):  # the sandbox's first process
                why = f"more than {max_procs} processes"
            elif memory_bytes and held_bytes(members, disk.used_bytes() if disk else 0) > memory_bytes:
                why = memory_breach(memory_mb)
            elif disk is not None and disk.full():
                why = disk_breach(cfg.disk_mb)
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
