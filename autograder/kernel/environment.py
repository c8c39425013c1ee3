"""What a sandboxed kernel's process sees: its sandbox (:func:`kernel_sandbox`, the one place a kernel's
:class:`~autograder.sandbox.config.SandboxConfig` is made) and its environment (:func:`kernel_env`: a fixed, minimal
set of variables, nothing of the grader's, the chapter's number of simulated devices, the grader's own XLA flags).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from autograder.sandbox import confine
from autograder.sandbox.config import SandboxConfig

KERNEL_FILE_MB = 64  # the largest file one process of a kernel's sandbox may write


def kernel_sandbox(scratch: Path, *, isolate: bool, memory_mb: int = 0, disk_mb: int = 0, cpu_s: int = 0,
                   library: Path | None = None) -> SandboxConfig:
    """The sandbox of a kernel whose scratch folder is ``scratch``: a host uid of its own when the grader is root,
    and ``library`` (a surface's folder) bound where scalelib is, every other copy of scalelib hidden."""
    uid = gid = None
    if isolate and os.geteuid() == 0:
        uid, gid = confine.kernel_ids()
    cfg = SandboxConfig(scratch=str(scratch), isolate=isolate, memory_mb=memory_mb, disk_mb=disk_mb,
                        file_mb=KERNEL_FILE_MB, cpu_s=cpu_s, uid=uid, gid=gid)
    if library is None or not isolate:
        return cfg
    from autograder.library import surface  # only where a surface is bound (the fork server never needs it)

    target = str(surface.library_root())
    return dataclasses.replace(cfg, library=str(library), library_target=target,
                               hide=tuple(confine.stray_libraries(target)))


_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def kernel_env(scratch: Path, devices: int = 8) -> dict[str, str]:
    """A minimal environment: nothing of the grader's (tokens, paths) leaks into the kernel. JAX gets the
    chapter's number of simulated devices whenever it starts (no instructor set-up cell runs in the kernel).

    XLA gets the grader's own flags besides: the trusted context compiles the instructor's programs under them, so a
    kernel must compile the student's the same way. A flag that changes the optimized HLO (how ops are fused, say)
    would otherwise change a compiled program's cost analysis between the two, and a right answer would lose its
    points. (XLA_FLAGS is the instructor's setting, and the sandbox bounds what any flag can write.)"""
    s = str(scratch)
    grader_flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_COUNT_FLAG)]
    return {
        "XLA_FLAGS": " ".join([*grader_flags, f"{_DEVICE_COUNT_FLAG}={int(devices)}"]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": s, "IPYTHONDIR": f"{s}/.ipython", "MPLCONFIGDIR": f"{s}/.mpl", "XDG_CACHE_HOME": f"{s}/.cache",
        "JUPYTER_RUNTIME_DIR": f"{s}/.runtime", "JUPYTER_PLATFORM_DIRS": "1", "PYTHONNOUSERSITE": "1",
        "LANG": "C.UTF-8", "JAX_PLATFORMS": "cpu", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "TMPDIR": "/tmp",
        "MPLBACKEND": "Agg",  # figures are never shown to the grader: do not render them (see inside.install)
        "OPENBLAS_NUM_THREADS": "1",  # kernels run side by side; and the fork server must fork with one thread
    }
