"""Why a grading run stops before it grades (each a ``SystemExit`` with its message and exit status).
"""

from __future__ import annotations

from autograder.sandbox import probes


class Unsandboxed(SystemExit):
    """No OS sandbox on this host, and the instructor did not allow grading without one."""

    def __init__(self, why: str) -> None:
        fixes = "".join(f"\n  - {h}" for h in probes.hints())
        super().__init__(
            f"refusing to grade: student code cannot be sandboxed here ({why}).{fixes}\n"
            "Run `python -m autograder doctor` for what the sandbox needs. To grade anyway, with student code able to "
            "read and write anything this user can, pass --allow-unsandboxed.")
        self.why = why


class MergeError(SystemExit):
    pass
