"""One student's result for one chapter, its status, and its record on disk (``results/<student>.json``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path


class Status(str, Enum):
    """How far grading a student's notebook got (the ``status`` column of grades.csv)."""

    GRADED = "graded"
    PARTIAL = "partially graded"  # graded, but something was cut or not found: the detail says what
    TIMED_OUT = "timed out"
    CRASHED = "crashed"
    INVALID = "invalid notebook"
    WRONG_CHAPTER = "wrong chapter"
    MISSING = "missing"  # on the roster, no file

    def __str__(self) -> str:
        return self.value

    def __hash__(self) -> int:  # as its text, so that a Status and its text are one key in sets and dicts
        return str.__hash__(self)


def fingerprint(grader_version: str, solution_hash: str, content_sha256: str) -> str:
    """What a result was graded from: the grader's version, the chapter's instructor notebook (its SHA-256) and the
    submission (the SHA-256 of its bytes). A rerun regrades when it changes; ``merge`` checks it."""
    return hashlib.sha256(f"{grader_version}:{solution_hash}:{content_sha256}".encode()).hexdigest()[:32]



# How an exercise's message starts when it scored 0 through no wrong value of the student's (the feedback page heads
# the row with it): the test's own code failed (judge.TestFault), or the answer is still the stub.
TEST_FAULT = "the test itself failed, not your answer"
NOT_ANSWERED = "not answered yet"

# A kernel that died makes the notebook's status at least this bad; the later, worse one wins.
SEVERITY = {Status.GRADED: 0, Status.PARTIAL: 1, Status.CRASHED: 2, Status.TIMED_OUT: 3}


@dataclass(frozen=True)
class StudentResult:
    student: str
    status: Status
    score: float
    max_score: float
    exercises: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""
    file: str = ""
    messages: dict[str, str] = field(default_factory=dict)  # exercise -> why it failed
    outputs: dict[str, str] = field(default_factory=dict)  # exercise -> what its test printed
    fingerprint: str = ""

    def line(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        return (f"{self.student:24s} {self.score:6.1f} / {self.max_score:.1f}  {self.status}{extra}"
                f"  [{self.seconds:.1f} s]")

    def to_json(self) -> str:
        data = asdict(self)
        data["status"] = self.status.value
        return json.dumps(data, indent=1, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> StudentResult:
        data = json.loads(text)
        data["status"] = Status(data["status"])
        data.pop("in_kernel", None)  # written by grader version 3
        return cls(**data)


def load(path: Path) -> StudentResult | None:
    """A result written by :meth:`StudentResult.to_json`, or None if unreadable."""
    try:
        return StudentResult.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError):
        return None
