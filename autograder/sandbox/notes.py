"""The notes a launcher leaves beside a kernel's scratch folder (out of the sandbox's sight) for the grader:
the kernel's pid, why it was killed, its OOM kills, its memory cgroup. Each is written atomically.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from autograder.sandbox import cgroups


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
