"""One student's kernel: started in the sandbox with resource limits, driven cell by cell.

Runs code with a time limit (interrupt, then kill), keeps at most ``max_output_bytes`` of text output
(a cell that floods past the cap is interrupted), and talks over Unix sockets in the scratch folder.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
from jupyter_client.manager import KernelManager

from autograder import course
from autograder.kernel import forkserver, inside
from autograder.kernel.environment import kernel_env, kernel_sandbox
from autograder.kernel.kernel_errors import ChannelBroken, KernelDied, KernelStartFailed, KernelTimedOut
from autograder.sandbox import cgroups, notes
from autograder.sandbox.config import SandboxConfig, memory_breach

SANDBOX_TEARDOWN_S = 30.0  # how long closing waits for a launcher to reap a namespace its sandbox killed


@dataclass
class Limits:
    cell_timeout_s: float = 600.0
    notebook_timeout_s: float = 3600.0
    memory_mb: int = course.MEMORY_MB
    disk_mb: int = 1024  # all the kernel's files together (scratch, /tmp, /dev/shm: one tmpfs); 0: half the RAM
    max_output_bytes: int = 1_000_000
    max_reply_bytes: int = 16 * 2**20  # one message from the kernel (an answer, a probe's data); larger is refused
    sandbox: bool = True  # False only when the instructor allowed grading without one
    cpu_s: float | None = None  # RLIMIT_CPU of the kernel; None: notebook_timeout_s x cores (see cpu_limit_s)

    def cpu_limit_s(self) -> int:
        """CPU seconds the kernel may use in all: the wall-clock budget on every core (threads add up).

        A process of the sandbox past it is killed (SIGKILL at the hard limit, equal to the soft one); when it is
        the kernel, the student reads "at the CPU limit". This catches CPU burnt where the wall clock does not
        look, such as a fork that outlives its cell.
        """
        if self.cpu_s:
            return int(self.cpu_s)
        return int(self.notebook_timeout_s * (os.cpu_count() or 1)) + 60


@dataclass
class CellRun:
    ok: bool
    error: str = ""  # 'ename: evalue'
    timed_out: bool = False
    output_capped: bool = False
    expressions: dict = field(default_factory=dict)


# What ``python -m ipykernel_launcher`` runs, with debugpy marked absent first: ipykernel imports it at start for its
# debugger, about 0.2 CPU-s of every kernel's start (0.98 -> 0.78 CPU-s of the machine per sandboxed start, median of
# 8, measured side by side), and no one debugs a grading kernel. ipykernel reads the failed import as "no debugger".
_KERNEL_MAIN = ("import sys\n"
                "sys.modules['debugpy'] = None\n"
                "if sys.path[0] == '':\n"
                "    del sys.path[0]\n"
                "from ipykernel import kernelapp\n"
                "kernelapp.launch_new_instance()\n")


class _SandboxedKernelManager(KernelManager):
    def __init__(self, sandbox_cfg: SandboxConfig, **kw: Any) -> None:
        super().__init__(**kw)
        self._sandbox_cfg = sandbox_cfg

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        if cmd[1:3] == ["-m", "ipykernel_launcher"]:  # the python3 kernel spec's own command
            cmd = [cmd[0], "-c", _KERNEL_MAIN, *cmd[3:]]
            # started by the fork server where it can (same sandbox, without importing ipykernel and JAX again)
            if self._sandbox_cfg.isolate and cmd[0] == sys.executable and (server := forkserver.address()):
                return forkserver.relay_cmd(server, [self._sandbox_cfg.to_json(), "--", *cmd])
        return [sys.executable, "-m", "autograder.sandbox", self._sandbox_cfg.to_json(), "--", *cmd]


class KernelSession:
    """One sandboxed kernel with the grader's helper installed (``__grader__``).

    ``library``: the scalelib folder this kernel gets instead of the real one (:meth:`surface.Surface.write`);
    ``allowed`` says in words what it holds (for error messages inside the kernel).
    """

    def __init__(self, scratch: Path, limits: Limits, log_path: Path, library: Path | None = None,
                 allowed: str = "", devices: int = 8) -> None:
        self.scratch, self.limits, self.log_path = scratch, limits, log_path
        self.output_bytes = 0
        self.output: list[str] = []
        self.started = time.monotonic()
        scratch.mkdir(parents=True, exist_ok=True)
        cfg = kernel_sandbox(scratch, isolate=limits.sandbox, memory_mb=limits.memory_mb, disk_mb=limits.disk_mb,
                             cpu_s=limits.cpu_limit_s(), library=library)
        self.km = _SandboxedKernelManager(cfg, kernel_name="python3", transport="ipc", ip=str(scratch / "k"),
                                          connection_file=str(scratch / "kernel.json"))
        self._log = open(log_path, "ab")  # a restarted kernel adds to the log  # noqa: SIM115 - closed in close()
        self._root: int | None = None  # the kernel's scratch folder, in its sandbox (see _channel)
        self._ooms = 0
        # Output written to the process's own stdout/stderr (fd 1 and 2) is not forwarded as cell output: ipykernel
        # forwards it from a thread, late, under whatever cell runs *then*, so a flood would be blamed on the next
        # cell. The sandbox keeps the first part of it for the log and drops the rest.
        self.km.start_kernel(cwd=str(scratch), env=kernel_env(scratch, devices), stdout=subprocess.DEVNULL,
                             stderr=self._log,
                             extra_arguments=["--IPKernelApp.capture_fd_output=False"])
        ctx = zmq.Context()
        # What crosses the channel is capped: a message over max_reply_bytes is refused by zmq before it is read
        # (the connection is dropped; the monitor below sees it), and few messages wait unread.
        ctx.setsockopt(zmq.MAXMSGSIZE, int(limits.max_reply_bytes))
        ctx.setsockopt(zmq.RCVHWM, 16)
        self._ctx = ctx
        try:
            ip = self._channel() if limits.sandbox else str(scratch / "k")
        except KernelStartFailed as err:
            tail = self.log_tail()
            self.close()
            raise KernelStartFailed(f"kernel did not start: {err}{'; ' + tail if tail else ''}") from None
        self.kc = self.km.client(context=ctx, ip=ip)
        self.kc.start_channels()
        self._monitors = [ch.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
                          for ch in (self.kc.shell_channel, self.kc.iopub_channel) if ch.socket is not None]
        try:
            self.kc.wait_for_ready(timeout=120)
            helper = self.run(inside.program(limits.max_reply_bytes, allowed), timeout=60, silent=True)
        except (RuntimeError, KernelDied) as err:
            tail = self.log_tail()  # before close, which closes the log
            self.close()
            raise KernelStartFailed(f"kernel did not start: {err}{'; ' + tail if tail else ''}") from None
        if not helper.ok:
            self.close()
            raise KernelStartFailed(f"the grader's helper did not start in the kernel: {helper.error}")

    def _channel(self, wait_s: float = 120.0) -> str:
        """Where the grader reaches the kernel's sockets: in the kernel's own tmpfs, through the root of its
        sandbox (``/proc/PID/root``; the launcher notes the pid once that root is built). The folder is opened
        once, and the sockets named through this process's descriptor of it: a short path that always means
        this kernel's folder (a link the student leaves there resolves inside its own root, never the host's)."""
        note = notes.kernel_note(self.scratch)
        end = time.monotonic() + wait_s
        while not note.exists():
            if not self.km.is_alive():
                code = getattr(getattr(self.km.provisioner, "process", None), "returncode", None)
                raise KernelStartFailed(f"its sandbox exited (code {code}) before the kernel started")
            if time.monotonic() > end:
                self.km.shutdown_kernel(now=True)
                raise KernelStartFailed(f"its sandbox was not ready after {wait_s:.0f} s")
            time.sleep(0.01)
        try:
            pid = int(note.read_text())
        except (OSError, ValueError) as err:
            raise KernelStartFailed(f"its sandbox's note is unreadable: {err}") from None
        path = f"/proc/{pid}/root{os.path.realpath(self.scratch)}"
        for _ in range(50):
            try:
                self._root = os.open(path, os.O_PATH | os.O_DIRECTORY)
                return f"/proc/self/fd/{self._root}/k"
            except OSError as err:
                failed = err
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.02)
        time.sleep(0.5)  # what the sandbox said on its way out reaches the log
        code = getattr(getattr(self.km.provisioner, "process", None), "returncode", None)
        gone = "its sandbox has exited" if code is not None else "its PID 1 is gone" if not Path(
            f"/proc/{pid}").exists() else "its PID 1 runs"
        raise KernelStartFailed(f"its scratch folder cannot be reached ({gone}): {failed}")

    def put_file(self, data: bytes) -> str:
        """Write ``data`` to a new file in the kernel's scratch folder and return its path as the kernel sees it.

        For what is too big to send as the text of a cell (a set-up array of 30 MB costs the kernel some 10 s to
        parse as a literal; read from a file, a fraction of a second). The file is made through the folder's own
        descriptor with ``O_EXCL | O_NOFOLLOW`` under a fresh random name: whatever the student left in the
        folder, the grader writes only this new file, inside the kernel's sandbox. :meth:`remove_file` removes it.
        """
        name = f".grader-{secrets.token_hex(8)}"
        with self._scratch_fd() as folder:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=folder)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        return os.path.join(os.path.realpath(self.scratch), name)

    def remove_file(self, path: str) -> None:
        with contextlib.suppress(OSError), self._scratch_fd() as folder:
            os.unlink(os.path.basename(path), dir_fd=folder)

    @contextlib.contextmanager
    def _scratch_fd(self):  # noqa: ANN202 - a context manager yielding a descriptor
        if self._root is not None:  # sandboxed: the folder inside the kernel's own root (see _channel)
            yield self._root
            return
        fd = os.open(self.scratch, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)

    def log_tail(self) -> str:
        """The end of the kernel's log (also once the session is closed)."""
        with contextlib.suppress(OSError, ValueError):
            self._log.flush()
        try:
            return Path(self.log_path).read_text(errors="replace")[-300:].strip()
        except OSError:
            return ""

    def alive(self) -> bool:
        """The kernel runs and its sandbox has not killed it (a killed namespace may linger a while)."""
        return self.km.is_alive() and not notes.kill_note(self.scratch).exists()

    def death(self) -> str:
        """Why the kernel died, from what the grader saw: its sandbox's note (a limit it enforced), the OOM
        killer's count, else how its process ended (exit status or signal)."""
        try:
            why = notes.kill_note(self.scratch).read_text()[:300]
        except OSError:
            why = ""
        if not why and self.oom_kills() > self._ooms:
            why = f"{memory_breach(self.limits.memory_mb)}: the OOM killer stopped it"
        if why:
            return f"the kernel died: stopped by its sandbox, {why}"
        ended = self._ended()
        return f"the kernel died ({ended})" if ended else "the kernel died"

    def _ended(self) -> str:
        """How the kernel's process ended ('' while it runs or if unknown): its launcher's exit status, which is
        128 + N for a kernel ended by signal N."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        code = None
        with contextlib.suppress(Exception):
            for _ in range(20):  # a process whose channels closed is reaped within a moment
                code = process.poll() if process is not None else None
                if code is not None:
                    break
                time.sleep(0.05)
        if code is None:
            return ""
        number = code - 128 if code > 128 else -code if code < 0 else 0
        if number:
            with contextlib.suppress(ValueError):
                return f"ended by signal {number}, {signal.Signals(number).name}"
        return f"exit status {code}"

    def oom_kills(self) -> int:
        """How many of the sandbox's processes the OOM killer stopped so far (memory cgroup only)."""
        try:
            return int(notes.oom_note(self.scratch).read_text()[:20])
        except (OSError, ValueError):
            return 0

    def new_oom_kills(self) -> int:
        """OOM kills since the last call (a child killed while the kernel went on)."""
        seen, self._ooms = self._ooms, max(self._ooms, self.oom_kills())
        return self._ooms - seen

    def _check_channels(self) -> None:
        for mon in self._monitors:
            if mon.poll(0):
                # A kernel that died closes its channels too: say that instead. Its namespace can take seconds to
                # end (the OOM killer's victim first), so its launcher's notes are read as well.
                for _ in range(40):
                    if not self.alive() or self.oom_kills() > self._ooms:
                        raise KernelDied(self.death())
                    time.sleep(0.05)
                self.kill()
                raise ChannelBroken(f"the kernel sent more than {self.limits.max_reply_bytes} bytes in one message "
                                    "(printed output or a reply), or closed its channel; stopped")

    def settle(self) -> None:
        """After an interrupt: make sure it was spent in the cell it was meant for, not in the next one."""
        for _ in range(3):
            if self.run("pass", timeout=10, silent=True, _settling=True).ok:
                return

    def run(self, code: str, timeout: float, silent: bool = False, user_expressions: dict | None = None,
            _settling: bool = False) -> CellRun:
        if not self.alive():
            raise KernelDied(self.death())
        self._check_channels()
        msg_id = self.kc.execute(code, silent=silent, store_history=False, allow_stdin=False,
                                 user_expressions=user_expressions or {}, stop_on_error=False)
        deadline = time.monotonic() + timeout
        result = CellRun(ok=True)
        interrupted_at = None
        last_msg = 0.0
        reply = None
        idle = False
        while not idle:
            now = time.monotonic()
            if now > deadline and interrupted_at is None and reply is None:
                result.timed_out, result.ok = True, False
                interrupted_at = now
                self.km.interrupt_kernel()
            # after an interrupt: 5 s to answer, counted from the last message still being drained, at most 60 s
            if interrupted_at is not None and reply is None and (
                    now - max(interrupted_at, last_msg) > 5 or now - interrupted_at > 60):
                self.kill()
                raise KernelTimedOut("over the time limit and did not stop when interrupted; killed")
            if reply is None:  # the execute_reply on the shell channel says the cell is done
                try:
                    msg = self.kc.get_shell_msg(timeout=0)
                    if msg.get("parent_header", {}).get("msg_id") == msg_id:
                        reply, reply_at = msg, time.monotonic()
                except queue.Empty:
                    pass
            elif time.monotonic() - reply_at > 2:
                break  # outputs lost (a message over the size cap is dropped): the reply is enough
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05 if reply is None else 0.2)
                last_msg = time.monotonic()
            except queue.Empty:
                if reply is None and not self.alive():
                    raise KernelDied(self.death()) from None
                self._check_channels()
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                idle = True
                if reply is not None:
                    break
                continue
            text = ""
            if kind == "stream":
                text = str(content.get("text", ""))
            elif kind in ("execute_result", "display_data"):
                text = str(content.get("data", {}).get("text/plain", ""))
            elif kind == "error":
                result.ok = False
                result.error = f"{content.get('ename', '')}: {content.get('evalue', '')}"[:2000]
                text = result.error + "\n"
            if text:
                self.output_bytes += len(text)
                if self.output_bytes <= self.limits.max_output_bytes:
                    self.output.append(text)
                elif not result.output_capped:
                    result.output_capped, result.ok = True, False
                    cap = self.limits.max_output_bytes
                    result.error = result.error or f"OutputLimit: more than {cap} bytes of output"
                    if interrupted_at is None and reply is None:
                        interrupted_at = time.monotonic()
                        self.km.interrupt_kernel()
        while reply is None:  # idle came first: the reply follows
            try:
                msg = self.kc.get_shell_msg(timeout=5)
            except queue.Empty:
                if not self.alive():
                    raise KernelDied(self.death()) from None
                self._check_channels()
                self.kill()
                raise KernelDied("no reply from the kernel") from None
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                reply = msg
        content = reply["content"]
        if content.get("status") != "ok":
            result.ok = False
            if not result.error:
                result.error = f"{content.get('ename', '')}: {content.get('evalue', '')}"[:2000]
        result.expressions = content.get("user_expressions", {}) or {}
        if interrupted_at is not None and not _settling:
            self.settle()
        return result

    def kill(self) -> None:
        with contextlib.suppress(Exception):  # already gone
            self.km.shutdown_kernel(now=True)

    def close(self) -> None:
        for mon in getattr(self, "_monitors", []):
            mon.close(linger=0)
        with contextlib.suppress(Exception):
            self.kc.stop_channels()
        if self._root is not None:
            os.close(self._root)
            self._root = None
        note = notes.kill_note(self.scratch)
        if note.exists():  # its launcher is reaping the namespace; left to finish, it removes its memory cgroup
            end = time.monotonic() + SANDBOX_TEARDOWN_S
            while self.km.is_alive() and time.monotonic() < end:
                time.sleep(0.1)
        self.kill()
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()
        notes.remove_left_cgroup(self.scratch)
        cgroups.sweep()  # groups that earlier closes had to leave while their processes were still dying
        notes.remove_notes(self.scratch)
        self._log.close()
        self._ctx.destroy(linger=0)
