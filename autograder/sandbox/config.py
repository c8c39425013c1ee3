"""One sandbox's configuration: every limit a typed field with its unit, one schema for every way in.

The grader builds a :class:`SandboxConfig` (a kernel's from :meth:`autograder.kernel.session.Limits.sandbox_config`,
the library proof's and the host probes' directly), writes it once as JSON (:meth:`SandboxConfig.to_json`) on the
launcher's command line or the fork server's socket, and the launcher reads it once (:meth:`SandboxConfig.from_json`).
A key the schema does not know, or a value of the wrong type, is refused there with its name: a typo in a limit
never silently means "no limit". The words for a breached limit live here too, so that the launcher's kill note,
the grader's row and the student's message say it the same way.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any

from autograder.sandbox.sandbox_errors import SandboxConfigError


@dataclass(frozen=True)
class SandboxConfig:
    """What one sandbox may use. ``0`` means "no limit" for a size or a time; every path is a host path."""

    scratch: str  # the kernel's working folder on the host (its notes lie beside it); bound at the same path inside
    isolate: bool = True  # False: resource limits only, no namespaces (only when the instructor allowed it)
    memory_mb: int = 0  # every process of the sandbox together, with its files in memory (MiB); 0: none
    disk_mb: int = 0  # one tmpfs holds the scratch folder, /tmp and /dev/shm (MiB); 0: the tmpfs default, half the RAM
    file_mb: int = 256  # the largest file one process may write (RLIMIT_FSIZE, MiB)
    cpu_s: int = 0  # CPU seconds each process may use, soft limit = hard limit (RLIMIT_CPU); 0: none
    max_procs: int = 128  # processes in the sandbox at once; one more and the whole sandbox is killed
    cgroup: bool = True  # count memory in a memory cgroup where the host allows one (else poll what is held)
    uid: int | None = None  # as root: the host uid the kernel runs as (None: a fresh one, sandbox.confine.kernel_ids)
    gid: int | None = None  # as root: its gid (None: the uid's number)
    read_only: tuple[str, ...] = ()  # folders bound read-only (empty: sandbox.confine.read_only_paths)
    library: str | None = None  # a scalelib folder bound in place of the real one (see autograder.library.surface)
    library_target: str = ""  # where that folder appears inside: the real scalelib's path
    hide: tuple[str, ...] = ()  # other copies of scalelib under the bound folders, each covered by an empty tmpfs

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, getattr(self, f.name), _HINTS[f.name])
        for name in ("memory_mb", "disk_mb", "file_mb", "cpu_s", "max_procs"):
            if getattr(self, name) < 0:
                raise SandboxConfigError(f"sandbox setting {name} is {getattr(self, name)}: use 0 for no limit, "
                                         "or a positive number")
        if self.library is not None and not self.library_target:
            raise SandboxConfigError("sandbox setting library needs library_target (where scalelib is inside)")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SandboxConfig:
        try:
            raw = json.loads(text)
        except ValueError as err:
            raise SandboxConfigError(f"the sandbox's configuration is not JSON ({err}); pass "
                                     "SandboxConfig.to_json()'s text") from None
        if not isinstance(raw, dict):
            raise SandboxConfigError("the sandbox's configuration must be a JSON object of SandboxConfig's fields")
        unknown = sorted(set(raw) - set(_HINTS))
        if unknown:
            raise SandboxConfigError(f"unknown sandbox setting {', '.join(map(repr, unknown))}; the settings are "
                                     f"{', '.join(_HINTS)}")
        if "scratch" not in raw:
            raise SandboxConfigError("the sandbox's configuration has no scratch folder (setting 'scratch')")
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
        return cls(**fields)


_HINTS = typing.get_type_hints(SandboxConfig)


def _check_type(name: str, value: object, hint: object) -> None:
    """Refuse a value that is not of the field's type (bool is not an int here: ``memory_mb: true`` is a typo)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return
        origin = typing.get_origin(option)
        if origin is tuple and isinstance(value, tuple) and all(isinstance(v, str) for v in value):
            return
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return
        if option in (str, bool) and type(value) is option:
            return
    raise SandboxConfigError(f"sandbox setting {name} is {value!r} ({type(value).__name__}); it takes {hint}")


def memory_breach(memory_mb: int) -> str:
    """The one wording of a breached memory limit (kill note, console line, the student's row)."""
    return f"over the memory limit of {memory_mb} MB (all its processes together)"


def disk_breach(disk_mb: int) -> str:
    return f"over the disk limit of {disk_mb} MB (all its files together)"
