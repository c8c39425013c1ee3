"""How judging one call of a student's function fails, each named for who is at fault.
"""

from __future__ import annotations


class NotPortable(Exception):
    """An argument could not be sent to the kernel: judge this test cell inside the kernel."""


class CallTimeout(Exception):
    pass


class StudentError(Exception):
    """The student's function raised; the message is theirs (type name first)."""


class TestFault(Exception):
    """The test's own code failed, not the student's function: a probe (``@ex.probe`` helper) raised in the kernel
    outside the student's code, its arguments could not be recreated there, or the test cell raised before any of
    the student's functions had answered. The message says which helper and what it raised."""


class SurfaceViolation(Exception):
    """The test sends the student's function a scalelib object outside the exercise's surface (instructor error)."""


class GraderStepFailed(RuntimeError):
    """A step of the grader's own failed in a kernel before any of the student's code ran there (not a verdict)."""
