"""Run one JAX program as N local processes of M CPU devices each: a pod on one machine.

    python -m scalelib.launch --processes 2 --local-devices 4 [--timeout 600] [--port P] [--all] [--] SCRIPT [ARGS]
    python -m scalelib.launch --processes 2 --local-devices 4 -m scalelib.parallel.selfcheck

Each process runs the script under ``python -m scalelib.distributed`` with its rank, the process
count, its device count and process 0's address (a free local port) in environment variables;
``scalelib.distributed.initialize()`` in the script reads them and joins ``jax.distributed``. On a
real cluster the same script runs unchanged: its scheduler starts the processes and JAX reads the
cluster's own environment (see the README, "Beyond one process").

Output lines carry the rank (``[0] ...``); only process 0's are shown unless ``--all``. A process's
Python ``sys.stdout`` and its file descriptor 1 (C++ code, child processes) come through separate
pipes, so each line arrives whole; lines from the two may reach the terminal in a different order. The exit
status is the first non-zero one. When a process fails (non-zero status or a signal) the others are
stopped at once; when the timeout passes, every process still running prints its Python stack and
is stopped. Each process leads its own process group, which is stopped with SIGTERM, then SIGKILL
after a grace period; on Linux each process also asks the kernel to kill it if the launcher dies
(PDEATHSIG, set by ``scalelib.distributed``), so nothing outlives an interrupted or killed launcher.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from scalelib import distributed
from scalelib.validate import positive_int

GRACE_S = 2.0  # from SIGTERM to SIGKILL
STACK_WAIT_S = 1.0  # for hung processes to print their stacks
TAIL_LINES = 25  # lines of a failed process's output repeated in the failure report
TIMEOUT_STATUS, INTERRUPT_STATUS = 124, 130  # as timeout(1) and a shell's Ctrl-C
# gloo's per-communicator "connected" line on jax 0.10.2 (see compat.py), on descriptor 1's own pipe (Python's
# prints, on another pipe, cannot land inside it: distributed.native_stdout_apart). Its C++ writes it piece by piece
# ("[Gloo] Rank ", the rank, " is connected to ", the count, " peer ranks. ", "Expected number ... is : ", the count,
# end of line), and the threads that build communicators at the same moment interleave their pieces, so one
# output line can hold the tail of one message, the whole of another and the head of a third. A line made only
# of such pieces is dropped, and so is an empty line or one of unmarked pieces (" 7", "5 is connected to 7") right
# after one (the last pieces of a message whose line another thread ended); pieces after a line's own text
# ("0 sum [Gloo] Rank 0 ...") are cut.
_GLOO_MARK = r"\[Gloo\] Rank|peer ranks\.|Expected number of connected peer ranks is :"
_GLOO_PIECE = rf"{_GLOO_MARK}|is connected to|\d+"
_GLOO_ONLY = re.compile(rf"(?:\s*(?:{_GLOO_PIECE}))+\s*")
_GLOO_TAIL = re.compile(rf"(?:{_GLOO_MARK})(?:\s*(?:{_GLOO_PIECE}))*\s*$")


def drop_gloo_chatter(line: str, after_chatter: bool = False) -> str | None:
    """``line`` without gloo's connection chatter, or None if the line was nothing else.

    ``after_chatter``: the line before it (from the same stream) held some of the chatter."""
    if re.search(_GLOO_MARK, line) is None:
        return None if after_chatter and (not line.strip() or _GLOO_ONLY.fullmatch(line)) else line
    if _GLOO_ONLY.fullmatch(line):
        return None
    return _GLOO_TAIL.sub("", line)


def without_gloo_chatter(lines: Iterable[str]) -> Iterator[str]:
    """The lines of one stream (newlines stripped) without gloo's chatter, each judged with the line before it."""
    after_chatter = False
    for line in lines:
        text = drop_gloo_chatter(line, after_chatter)
        after_chatter = text != line
        if text is not None:
            yield text


# A process's first collective over a new group of devices waits at most 30 s (fixed in JAX's gloo
# set-up) for every member to arrive, then fails with this text.
COLLECTIVE_TIMEOUT = re.compile(r"Gloo context initialization failed|gloo.*(timed out|DEADLINE_EXCEEDED)",
                                re.IGNORECASE)
COLLECTIVE_HINT = (": a collective timed out (gloo waits 30 s for every process to join a new group of devices). "
                   "The usual cause is another rank that never reached that collective, or reached a different "
                   "one; the last lines of every rank (with the Python stack of each one still running) are above. "
                   "Stopped the others")


class LaunchError(ValueError):
    """The launch cannot start as asked (bad count, busy port, missing script)."""


@dataclass(frozen=True)
class RankResult:
    rank: int
    returncode: int | None  # None: still running when the run ended, so the launcher stopped it
    reason: str  # e.g. "exited with status 1", "killed by SIGSEGV", "stopped after rank 1 failed"


@dataclass(frozen=True)
class LaunchResult:
    returncode: int  # 0, the first failing rank's status, 124 (timeout) or 130 (interrupted)
    ranks: tuple[RankResult, ...]
    failed_ranks: tuple[int, ...]  # the rank that failed first, or every rank still running at a timeout
    message: str  # "" when every rank exited 0
    elapsed_s: float
    stop_s: float  # from noticing the failure (or the timeout) until every process had ended; 0 if none
    launch_id: str  # in every started process's environment as SCALELIB_LAUNCH_ID


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def check_loopback(timeout_s: float = 2.0) -> None:
    """The processes find each other over TCP on this host: refuse at once where that cannot work
    (a sandbox without network, where ``jax.distributed`` would instead wait for its timeout)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=timeout_s):
                pass
    except OSError as err:
        raise LaunchError(f"this host cannot open a TCP connection to itself ({err}), and the processes find "
                          "each other that way; run where the loopback network is up (not in a sandbox "
                          "without network)") from None


def describe_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def shell_status(code: int) -> int:
    """A child's return code as a process exit status (a signal N becomes 128 + N)."""
    return 128 - code if code < 0 else code


def _check_target(target: Sequence[str]) -> None:
    if not target:
        raise LaunchError("nothing to run: give a script (and its arguments) or -m MODULE")
    if target[0] == "-m":
        if len(target) < 2:
            raise LaunchError("-m needs a module name, e.g. -m scalelib.parallel.selfcheck")
        import importlib.util

        try:
            found = importlib.util.find_spec(target[1]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise LaunchError(f"no module named {target[1]!r} can be imported here; check the name and that "
                              "its package is installed in this Python")
    elif not os.path.isfile(target[0]):
        raise LaunchError(f"script {target[0]!r} does not exist (relative to {os.getcwd()})")


class _Rank:
    """One process: its Popen, the threads forwarding its output, the tail kept for reports."""

    def __init__(self, rank: int, cmd: list[str], env: dict[str, str]) -> None:
        self.rank = rank
        self.stopped = False  # still running when the launcher began stopping processes
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        native_read, native_write = os.pipe()  # the process's descriptor 1; Python's stdout stays on stdout
        try:
            self.proc = subprocess.Popen(cmd, env={**env, distributed.ENV_NATIVE_STDOUT_FD: str(native_write)},
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         pass_fds=(native_write,), start_new_session=True, text=True,
                                         errors="replace")
        except BaseException:
            os.close(native_read)
            raise
        finally:
            os.close(native_write)
        self.native = open(native_read, errors="replace")  # noqa: SIM115 (closed by its pump at EOF)
        self.threads: list[threading.Thread] = []

    def forward(self, show: bool, out: TextIO, err: TextIO, lock: threading.Lock) -> None:
        """One thread per pipe. Only Python's stdout is forwarded as it is: gloo's chatter is written to
        descriptor 1 (the native pipe), and a Python line cannot land inside it (``native_stdout_apart``)."""
        for pipe, sink, chatter in ((self.proc.stdout, out, False), (self.native, out, True),
                                    (self.proc.stderr, err, True)):
            t = threading.Thread(target=self._pump, args=(pipe, sink if show else None, lock, chatter), daemon=True)
            t.start()
            self.threads.append(t)

    def _pump(self, pipe: TextIO, sink: TextIO | None, lock: threading.Lock, chatter: bool) -> None:
        with pipe:  # closed at EOF, when the process (and anything it started) has ended
            self._forward_lines(pipe, sink, lock, chatter)

    def _forward_lines(self, pipe: TextIO, sink: TextIO | None, lock: threading.Lock, chatter: bool) -> None:
        lines = (line.rstrip("\n") for line in pipe)
        for text in without_gloo_chatter(lines) if chatter else lines:
            with lock:
                self.tail.append(text)
                if sink is not None:
                    sink.write(f"[{self.rank}] {text}\n")
                    sink.flush()

    def join(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the output threads to read everything the process wrote."""
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)  # the child leads its own group (start_new_session)

    def running(self) -> bool:
        return self.proc.poll() is None


def _stop(ranks: list[_Rank], dump_stacks: bool) -> None:
    alive = [r for r in ranks if r.running()]
    for r in alive:
        r.stopped = True
    if dump_stacks and alive:
        for r in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.proc.pid, distributed.STACK_SIGNAL)  # faulthandler prints the Python stack
        _wait(alive, STACK_WAIT_S)
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        alive = [r for r in ranks if r.running()]
        for r in alive:
            r.signal_group(sig)
        _wait(alive, wait_s)



def _kill_leftovers(launch_id: str) -> None:
    """SIGKILL anything still carrying this launch's id (a process a rank started and left behind)."""
    kill_marked(distributed.ENV_LAUNCH_ID, launch_id)


def kill_marked(name: str, value: str) -> None:
    """SIGKILL every process (but this one) whose environment holds ``name=value``.

    Read from /proc (Linux); elsewhere nothing is done (a launcher then stops only its ranks' process groups).
    """
    marker = f"{name}={value}".encode()
    if not os.path.isdir("/proc"):
        return
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:  # gone meanwhile, or not ours to read
            continue


def _wait(ranks: list[_Rank], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(r.running() for r in ranks):
        time.sleep(0.02)


def launch(target: Sequence[str], processes: int, local_devices: int, *, timeout_s: float = 600.0,
           port: int | None = None, show_all: bool = False, out: TextIO | None = None,
           err: TextIO | None = None) -> LaunchResult:
    """Run ``target`` (``[SCRIPT, ARGS...]`` or ``['-m', MODULE, ARGS...]``) as ``processes`` processes.

    Returns when every process has exited, or, after the first failure, the timeout or an interrupt
    (SIGINT / SIGTERM / SIGHUP to the launcher), once every process has been stopped.
    """
    out, err = out or sys.stdout, err or sys.stderr
    for name, value in (("processes", processes), ("local_devices", local_devices)):
        try:
            positive_int(name, value)
        except ValueError as bad:
            raise LaunchError(str(bad)) from None
    if not timeout_s > 0:
        raise LaunchError(f"timeout must be a positive number of seconds, got {timeout_s!r}")
    _check_target(target)
    check_loopback()
    if port is None:
        port = free_port()
    elif not distributed.port_is_free(port):
        raise LaunchError(f"port {port} is already in use on this host (an earlier run still alive?); pick "
                          "another with --port, or leave --port out to get a free one")
    try:
        for name in distributed.TIMEOUT_DEFAULTS_S:
            distributed.timeout_setting(name)  # refused here, before any process starts
    except distributed.DistributedSetupError as bad:
        raise LaunchError(str(bad)) from None
    launch_id = uuid.uuid4().hex
    # a launcher's own variables are not inherited from an outer launch; the waits a user set are passed on
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCALELIB_") or k in distributed.TIMEOUT_DEFAULTS_S}
    base.update({"JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1", distributed.ENV_LAUNCH_ID: launch_id,
                 distributed.ENV_LAUNCHER_PID: str(os.getpid()),
                 distributed.ENV_COORDINATOR: f"localhost:{port}", distributed.ENV_NUM_PROCESSES: str(processes),
                 distributed.ENV_LOCAL_DEVICES: str(local_devices)})
    cmd = [sys.executable, "-u", "-m", "scalelib.distributed", *target]
    lock = threading.Lock()
    interrupted: list[int] = []
    previous = _catch_interrupts(interrupted)
    start = time.monotonic()
    ranks: list[_Rank] = []
    try:
        for rank in range(processes):
            ranks.append(_Rank(rank, cmd, {**base, distributed.ENV_PROCESS_ID: str(rank)}))
        for r in ranks:
            r.forward(show_all or r.rank == 0, out, err, lock)
        failed, message, status = _supervise(ranks, start, timeout_s, interrupted)
        noticed = time.monotonic()
        report = [] if status == INTERRUPT_STATUS else list(failed)
        dump = status == TIMEOUT_STATUS
        if failed and not dump and status != INTERRUPT_STATUS and ranks[failed[0]].proc.returncode != -signal.SIGKILL:
            cause = _timed_out_rank(ranks, failed[0])  # (SIGKILL comes from outside: the killed rank is the cause)
            if cause is not None:
                failed, status = [cause.rank], shell_status(cause.proc.returncode)
                message = f"rank {cause.rank} {describe_status(cause.proc.returncode)}{COLLECTIVE_HINT}"
                dump, report = True, [r.rank for r in ranks]  # the one that never arrived may already be gone
        _stop(ranks, dump_stacks=dump)
        stop_s = time.monotonic() - noticed if status else 0.0
    finally:
        _stop(ranks, dump_stacks=False)
        _kill_leftovers(launch_id)
        _restore(previous)
    _join_all(ranks, 1.0)
    if failed:
        _report(ranks, report, message, show_all, err, lock)
    return LaunchResult(status, tuple(_rank_result(r) for r in ranks), tuple(failed), message,
                        time.monotonic() - start, stop_s, launch_id)


def _join_all(ranks: list[_Rank], timeout_s: float) -> None:
    """Let every rank's output threads read what is left, all within one ``timeout_s`` (not one per rank)."""
    deadline = time.monotonic() + timeout_s
    for r in ranks:
        r.join(max(0.0, deadline - time.monotonic()))


def _supervise(ranks: list[_Rank], start: float, timeout_s: float,
               interrupted: list[int]) -> tuple[list[int], str, int]:
    """(failed ranks, message, exit status) once all exit 0 or something goes wrong."""
    while True:
        for r in ranks:
            code = r.proc.poll()
            if code not in (None, 0):
                return [r.rank], f"rank {r.rank} {describe_status(code)}; stopped the others", shell_status(code)
        running = [r.rank for r in ranks if r.running()]
        if not running:
            return [], "", 0
        if interrupted:
            name = signal.Signals(interrupted[0]).name
            return running, f"interrupted by {name}; stopped ranks {_names(running)}", INTERRUPT_STATUS
        if time.monotonic() - start > timeout_s:
            done = [r.rank for r in ranks if not r.running()]
            finished = f" (ranks {_names(done)} had finished)" if done else ""
            return running, (f"timed out after {timeout_s:g} s: ranks {_names(running)} still running{finished}. "
                             "A collective waits for every process, so one rank stuck elsewhere (or never "
                             "reaching the collective) stalls the others; their Python stacks are printed above"), \
                TIMEOUT_STATUS
        time.sleep(0.02)


def _timed_out_rank(ranks: list[_Rank], first: int) -> _Rank | None:
    """The rank whose own output shows a collective timeout, once it has exited non-zero; else None.

    Usually that is ``first``, the rank that failed first. But the rank that timed out may still be
    exiting when a peer it brought down is noticed (on jax 0.7.2 the coordinator lives in rank 0, and
    a rank waiting for it dies as rank 0 shuts down): the timeout is then blamed on the rank that
    reported it, given a second to finish exiting, not on the one that died of it.
    """
    ranks[first].join(1.0)  # its last lines, to read why it failed
    for r in sorted(ranks, key=lambda r: r.rank != first):  # the failed rank first
        if not COLLECTIVE_TIMEOUT.search("\n".join(r.tail)):
            continue
        if r.rank != first:
            r.join(1.0)
        try:
            if r.proc.wait(timeout=1.0) != 0:
                return r
        except subprocess.TimeoutExpired:
            continue
    return None


def _names(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _rank_result(r: _Rank) -> RankResult:
    code = r.proc.returncode
    if r.stopped:
        return RankResult(r.rank, None, f"stopped by the launcher ({describe_status(code)})")
    return RankResult(r.rank, code, describe_status(code))


def _report(ranks: list[_Rank], report: list[int], message: str, show_all: bool, err: TextIO,
            lock: threading.Lock) -> None:
    """The last lines of each rank in ``report`` whose output was not shown, then the message."""
    with lock:
        for r in ranks:
            if r.rank in report and r.tail and not (show_all or r.rank == 0):
                err.write(f"--- last {len(r.tail)} lines of rank {r.rank} ---\n")
                err.writelines(f"[{r.rank}] {line}\n" for line in r.tail)
        err.write(f"scalelib.launch: {message}\n")
        err.flush()


def _catch_interrupts(interrupted: list[int]) -> dict:
    """Turn SIGINT / SIGTERM / SIGHUP into a flag the supervisor reads (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, lambda s, _frame: interrupted.append(s))
    return previous


def _restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """(launcher options, target): everything from the script (or module) name on belongs to the program."""
    parser = argparse.ArgumentParser(prog="python -m scalelib.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", "-n", type=int, required=True, help="number of processes")
    parser.add_argument("--local-devices", type=int, required=True, help="CPU devices per process")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the run is stopped (600)")
    parser.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    parser.add_argument("--all", action="store_true", help="show every process's output, not only process 0's")
    parser.add_argument("-m", dest="module", action="store_true", help="TARGET is a module, run as python -m does")
    parser.add_argument("target", help="the script (or, with -m, the module) every process runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    args = parser.parse_args(list(argv))
    return args, (["-m"] if args.module else []) + [args.target, *args.args]


def main(argv: Sequence[str] | None = None) -> int:
    args, target = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        result = launch(target, args.processes, args.local_devices, timeout_s=args.timeout, port=args.port,
                        show_all=args.all)
    except LaunchError as bad:
        print(f"scalelib.launch: {bad}", file=sys.stderr)
        return 2
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
