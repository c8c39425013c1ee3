"""How a student's kernel fails, as the grader sees it: each a :class:`KernelDied`.
"""

from __future__ import annotations


class KernelDied(RuntimeError):
    pass


class KernelStartFailed(KernelDied):
    """The kernel (or its sandbox) could not be started: the grader's or the host's fault, not the student's."""


class KernelTimedOut(KernelDied):
    """The kernel ignored an interrupt after a time limit and was killed."""


class ChannelBroken(KernelDied):
    """The kernel sent a message over the size cap (the channel is closed on it) or closed its channel."""
