"""A memory limit for a whole sandbox (every process in it together), through a Linux memory cgroup.

``RLIMIT_AS`` limits each process on its own: a kernel that forks children, each under the limit, can use several
times it. A memory cgroup counts them together and the kernel's OOM killer acts inside it only. Where the grader may
create a child cgroup of its own (cgroup v2 with the memory controller delegated to it, or a writable cgroup v1
memory hierarchy, as for root in a container or a VM), :func:`create` makes one per sandbox; elsewhere it returns
None and the sandbox falls back to summing its processes' resident memory every 0.1 s (``sandbox.py``), which is
slower to react but still limits the sandbox as a whole.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


LEAF = "kernel"  # the child cgroup the sandbox's processes live in; the limit is on its parent


@dataclass(frozen=True)
class MemoryGroup:
    """A limited cgroup (``path``, it carries the limit) and, inside it, the leaf its processes join.

    The processes never sit in the cgroup that carries the limit: a sandbox that made a cgroup namespace of its
    own sees the leaf as its root, and the limit above it is out of its sight (whoever owns the leaf's files).
    """

    path: Path
    version: int  # 1 or 2
    home: Path  # the cgroup the creating process came from (it goes back there)

    @property
    def leaf(self) -> Path:
        return self.path / LEAF

    def join(self) -> None:
        """Move the calling process (and so its future children) into the group's leaf."""
        (self.leaf / "cgroup.procs").write_text(str(os.getpid()))

    def leave(self) -> None:
        (self.home / "cgroup.procs").write_text(str(os.getpid()))

    def members(self) -> list[int]:
        """The processes in the group, in the leaf and in any cgroup below it (cheaper than scanning /proc)."""
        out: list[int] = []
        for folder, _, _ in os.walk(self.path):
            with contextlib.suppress(OSError, ValueError):
                out += [int(p) for p in Path(folder, "cgroup.procs").read_text().split()]
        return out

    def oom_kills(self) -> int:
        """How many processes the OOM killer stopped in the group (the larger of the group's and its leaf's
        counters: which of the two a kernel counts a kill in has changed over versions)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        found = 0
        for folder in (self.path, self.leaf):
            with contextlib.suppress(OSError, ValueError):
                for line in (folder / name).read_text().splitlines():
                    if line.startswith("oom_kill "):
                        found = max(found, int(line.split()[1]))
        return found

    def remove(self) -> None:
        """Remove the group once its processes are gone (waits up to 2 s for them to be reaped)."""
        for _ in range(40):
            with contextlib.suppress(OSError):
                _remove_tree(self.path)
                return
            time.sleep(0.05)


def _remove_tree(path: Path) -> None:
    """rmdir a cgroup and the cgroups below it, deepest first (raises OSError while a process is in one)."""
    for folder, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
        os.rmdir(folder)


def _own_paths() -> dict[str, str]:
    """This process's cgroup per hierarchy: {'0': v2 path, 'memory': v1 memory path}."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            num, controllers, path = line.split(":", 2)
            if num == "0" and not controllers:
                out["0"] = path
            elif "memory" in controllers.split(","):
                out["memory"] = path
    return out


def _under(mount: Path, path: str) -> Path:
    """The folder for ``path`` under a cgroup mount; a container's cgroup namespace may hide the prefix."""
    inside = mount / path.lstrip("/")
    return inside if inside.is_dir() else mount


def _candidates() -> list[tuple[int, Path]]:
    own = _own_paths()
    out = []
    for v2_mount in (ROOT, ROOT / "unified"):
        if "0" in own and (v2_mount / "cgroup.controllers").exists():
            here = _under(v2_mount, own["0"])
            with contextlib.suppress(OSError):
                if "memory" in (here / "cgroup.subtree_control").read_text().split():
                    out.append((2, here))
    if "memory" in own and (ROOT / "memory" / "memory.limit_in_bytes").exists():
        out.append((1, _under(ROOT / "memory", own["memory"])))
    return out


def groups_made() -> set[Path]:
    """The memory cgroups this grader has made and not yet removed (where it makes them)."""
    return {p for _, home in _candidates() for p in home.glob("scalelib-grader-*")}


def _creator_alive(group: Path) -> bool:
    """Whether the launcher that made ``group`` (its pid is in the name) still runs; True when unsure."""
    try:
        pid = int(group.name.split("-")[2])
    except (IndexError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and only waits to be reaped. Such a launcher runs no code and will never remove its
    group, yet signal 0 still reaches it: the grader whose kernel shutdown gave up waiting (jupyter_client's "Wait for
    final termination of kernel timed out") has not reaped it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[:1] in (["Z"], ["X"])


def sweep() -> int:
    """Remove the empty groups of launchers that are gone; returns how many. A launcher killed while its sandbox's
    namespace is still being reaped (a fork bomb's hundred processes can take longer than a close waits) cannot
    remove its group, and nor can the grader until the last process is gone: the next close or run does."""
    removed = 0
    for path in groups_made():
        if _creator_alive(path):
            continue
        with contextlib.suppress(OSError):
            _remove_tree(path)  # refused while a process is still in it
            removed += 1
    return removed


def create(limit_bytes: int) -> MemoryGroup | None:
    """A new memory cgroup limited to ``limit_bytes`` (swap included where the host counts it), or None."""
    for version, home in _candidates():
        path = home / f"scalelib-grader-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            path.mkdir()
        except OSError:
            continue
        try:
            if version == 2:
                (path / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.swap.max").write_text("0")
            else:
                with contextlib.suppress(OSError):  # always 1 on kernels since 5.11; 1 makes the leaf count here
                    (path / "memory.use_hierarchy").write_text("1")
                (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            (path / LEAF).mkdir()
            group = MemoryGroup(path, version, home)
            group.join()
            group.leave()  # proves both moves are allowed before anyone relies on them
            return group
        except OSError:
            with contextlib.suppress(OSError):
                _remove_tree(path)
    return None


def available() -> str:
    """'' when :func:`create` works here, else why not."""
    group = create(64 * 2**20)
    if group is None:
        return "no memory cgroup this user may create (cgroup v2 with memory delegated, or a writable v1 hierarchy)"
    group.remove()
    return ""
