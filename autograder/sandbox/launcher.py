"""The launcher: ``python -m autograder.sandbox CONFIG_JSON -- CMD...`` (or a fork of the fork server) reads one
:class:`~autograder.sandbox.config.SandboxConfig`, applies the limits, makes the namespaces, starts ``CMD`` as
their PID 1 and watches it until it exits; the order of the steps is in :mod:`autograder.sandbox`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from autograder.atomic_files import atomic_write
from autograder.sandbox import cgroups
from autograder.sandbox.config import SandboxConfig
from autograder.sandbox.confine import Plan, enter
from autograder.sandbox.notes import cgroup_note, kernel_note, kill_note, remove_notes
from autograder.sandbox.rlimits import apply_limits
from autograder.sandbox.syscalls import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    PR_SET_PDEATHSIG,
    libc,
    map_ids,
    unshare,
)
from autograder.sandbox.watch import StderrTap, watch


def memory_group(cfg: SandboxConfig) -> cgroups.MemoryGroup | None:
    if not cfg.memory_mb or not cfg.cgroup:
        return None
    return cgroups.create(cfg.memory_mb * 2**20)


def run_sandbox(cfg: SandboxConfig, cmd: list[str], plan: Plan, group: cgroups.MemoryGroup | None, err_fd: int,
             pid_fd: int, become: Callable[[list[str]], None] | None = None) -> None:
    """The launcher's child: joins the memory cgroup, drops to the kernel's uid, makes the namespaces and forks
    their PID 1 (which builds the root and becomes the kernel: ``become(cmd)`` runs it in that process where it
    can, else ``cmd`` is ``exec``'d), tells the launcher its pid, and waits for it. Never returns."""
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if group is not None:
            group.join()  # the kernel and everything it starts are counted together
        flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
        if plan.privileged:  # as root: no user namespace yet (PID 1 builds the root as root, then drops)
            unshare(flags)
        else:  # a user namespace of the grader's uid; its root builds the new root
            unshare(CLONE_NEWUSER | flags)
            map_ids(plan.uid, plan.gid)
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
                enter(cfg, plan, lifeline)
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
        cpu_s = cfg.cpu_s
        used_s = usage.ru_utime + usage.ru_stime
        # Linux enforces RLIMIT_CPU on the tick-sampled CPU clock, while wait4 reports the scheduler's precise
        # runtime: on a busy machine a process can be killed at its limit with a little less counted here.
        if cpu_s and code == -signal.SIGKILL and used_s >= cpu_s - 0.5:
            with contextlib.suppress(OSError):  # the grader tells the student why (kernel.KernelSession.death)
                atomic_write(kill_note(Path(cfg.scratch)),
                             f"at the CPU limit of {cpu_s} s (it used {used_s:.1f} s of CPU time)")
        os._exit(code if code >= 0 else 128 - code)
    except BaseException as err:
        with contextlib.suppress(BaseException):
            print(f"sandbox: could not start the sandbox: {err}", file=sys.stderr, flush=True)
        os._exit(70)


def main(argv: list[str], relay: int | None = None, become: Callable[[list[str]], None] | None = None) -> int:
    """``python -m autograder.sandbox CONFIG_JSON -- CMD...``; the fork server (:mod:`autograder.kernel.forkserver`)
    calls it in a forked child with its relay's socket and a ``become`` that runs the kernel without an ``exec``."""
    cfg = SandboxConfig.from_json(argv[0])
    cmd = argv[argv.index("--") + 1:]
    scratch = Path(cfg.scratch)
    remove_notes(scratch)
    # If the grader dies (killed, out of memory), so does this launcher, and with it the kernel (PDEATHSIG too):
    # no student code outlives the run that started it.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    apply_limits(cfg)
    if not cfg.isolate:
        if relay is not None:
            raise ValueError("the fork server starts sandboxed kernels only")
        os.execvp(cmd[0], cmd)
    group = memory_group(cfg)
    if group is not None:
        # The grader removes the group if this launcher is killed before it can (the note is read with care).
        atomic_write(cgroup_note(scratch), str(group.path))
    plan = Plan.make(cfg)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts go to the kernel (same process group)
    read_end, write_end = os.pipe()
    pid_read, pid_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.close(pid_read)
        if relay is not None:
            os.close(relay)  # the relay sees its end once the launcher is gone, whoever else lives
        run_sandbox(cfg, cmd, plan, group, write_end, pid_write, become)
    os.close(write_end)
    os.close(pid_write)
    tap = StderrTap(read_end)
    with os.fdopen(pid_read, "rb") as said:
        told = said.read(32)  # the kernel's pid, or nothing if the sandbox could not be made
    kernel = int(told) if told.strip().isdigit() else 0
    status = watch(child, kernel, cfg, tap, group, relay=relay)
    tap.close()
    kernel_note(scratch).unlink(missing_ok=True)
    if group is not None:
        group.remove()
        with contextlib.suppress(OSError):
            cgroup_note(scratch).unlink()
    if status is None:
        return 0
    return os.waitstatus_to_exitcode(status) if status else 0

