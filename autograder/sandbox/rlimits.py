"""The resource limits every sandboxed process starts under, with or without namespaces (step 1 of
:mod:`autograder.sandbox`): address space, file size, no core dumps, no POSIX message queues, a CPU-seconds
backstop and a bound on open descriptors.
"""

from __future__ import annotations

import resource

from autograder.sandbox.config import SandboxConfig

# Descriptors per process: each pipe or socket one holds can keep a kernel buffer that no resident set shows,
# so their number is bounded (ipykernel and JAX use well under a hundred).
MAX_OPEN_FILES = 1024


def apply_limits(cfg: SandboxConfig) -> None:
    if cfg.memory_mb:
        n = cfg.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    if cfg.cpu_s:
        # Soft and hard limit alike: at the hard limit the kernel sends SIGKILL. The soft limit's SIGXCPU would not
        # do: the kernel runs as PID 1 of its PID namespace, and Linux drops a signal whose action is the default
        # for such a process (only SIGKILL and SIGSTOP get through).
        n = cfg.cpu_s
        resource.setrlimit(resource.RLIMIT_CPU, (n, n))
    n = cfg.file_mb * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # no POSIX message queue holds memory
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, top) if soft != resource.RLIM_INFINITY else top, top))
