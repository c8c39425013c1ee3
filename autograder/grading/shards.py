"""Grading a class in shards (one per machine or scheduler task) and joining them again.

``grade --shard K/N`` grades the students whose id hashes to K (:func:`shard_of`: SHA-256 of the id, so every
machine computes the same split from the same export and roster) and writes ``shard.json`` in its output folder:
incomplete when it starts, complete when every result, feedback page and CSV is written.

A shard's ``shard.json`` says what it graded and how, so that its output can be checked rather than trusted:

* **which run**: the chapter, K and N, the grader's version and a SHA-256 over the grader's and the library's
  source (:func:`code_identity`, with the Python, JAX and NumPy versions), the SHA-256 of the chapter's instructor
  notebook, the limits it graded under, the SHA-256 of the roster;
* **what it read**: every notebook of the export with the SHA-256 of its content, which file was graded for
  which student, every student of the class (all shards) and its own students;
* **what it wrote** (once complete): the SHA-256 of ``submissions.csv`` and of each of its students' result
  (its content apart from how many seconds grading took) and feedback page.

``merge OUT...`` joins shards only when they are one run (all of the above but K and the own students are the
same), every K from 0 to N-1 is there and complete (naming those that are not, and refusing unless
``allow_partial``), each shard lists exactly the students its K owns, and every file is the one its shard
recorded, every result matches the submission it claims to grade and adds up. Anything else is refused with
what differs, where, and what to do, before anything is written. It then writes one ``results/``, one
``feedback/``, one ``grades.csv``, one ``submissions.csv`` (identical in every shard: each shard reads the whole
export) and one nbgrader gradebook. A class graded in shards and merged gives the same bytes as one run.

The digests catch edits, mix-ups and copies made after grading; they are not signatures: someone who may write a
shard's folder could rewrite its ``shard.json`` to match. Keep shard outputs where only the grading jobs write.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autograder import atomic_files
from autograder.intake import file_names

MARKER = "shard.json"


def shard_of(student: str, n: int) -> int:
    """Which of ``n`` shards grades ``student`` (the same on every machine)."""
    return int.from_bytes(hashlib.sha256(student.encode("utf-8")).digest()[:8], "big") % n


def parse(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), with 0 <= K < N."""
    try:
        k, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard takes K/N (for example 0/4), got {text!r}") from None
    if not 0 <= k < n:
        raise SystemExit(f"--shard {text}: K must be 0 to N-1 (SLURM's array index, Kubernetes' completion index)")
    return k, n


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@functools.cache
def code_identity() -> dict[str, str]:
    """What grades: a SHA-256 over the source of ``autograder`` and ``scalelib`` (path and bytes of every file but
    caches), and the versions of Python, JAX, jaxlib and NumPy."""
    import autograder
    import scalelib

    h = hashlib.sha256()
    for package in (autograder, scalelib):
        top = Path(str(package.__file__)).resolve().parent
        for path in sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            rel = f"{top.name}/{path.relative_to(top).as_posix()}"
            h.update(f"{rel}\0{len(path.read_bytes())}\0".encode())
            h.update(path.read_bytes())
    ident = {"source_sha256": h.hexdigest(), "python": platform.python_version()}
    for dist in ("jax", "jaxlib", "numpy"):
        try:
            ident[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            ident[dist] = "absent"
    return ident


@dataclass(frozen=True)
class Marker:
    """What a shard is: the run it belongs to (every field but ``shard``'s K is the same in all shards of a run)."""

    chapter: str
    shard: tuple[int, int]
    grader_version: str
    solution_hash: str  # SHA-256 of the chapter's instructor notebook
    sandboxed: bool
    code: dict[str, str] = field(default_factory=dict)  # code_identity()
    limits: dict[str, Any] = field(default_factory=dict)  # the kernel limits, as configured
    roster_hash: str = ""  # SHA-256 of the roster file, '' without one
    export: dict[str, str] = field(default_factory=dict)  # every notebook read from the export -> its SHA-256
    graded: dict[str, str] = field(default_factory=dict)  # student -> the file graded for them (absent: missing)
    class_students: list[str] = field(default_factory=list)  # every student of the class, in all shards

    def owns(self, student: str) -> bool:
        k, n = self.shard
        return shard_of(student, n) == k


def result_digest(path: Path) -> str:
    """SHA-256 of a result file's content apart from how long grading took (``seconds``, which differs from one
    run to the next); of its bytes when it is not a result."""
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError
        data["seconds"] = 0.0
        raw = json.dumps(data, sort_keys=True, ensure_ascii=False).encode()
    except (ValueError, UnicodeDecodeError, RecursionError):
        raw = b"not a result:" + raw
    return hashlib.sha256(raw).hexdigest()


def student_files(student: str) -> tuple[str, str]:
    """The files a shard writes for ``student`` and records in its marker: result and feedback page."""
    stem = file_names.file_stem(student)
    return f"results/{stem}.json", f"feedback/{stem}.html"


def files_digest(out_dir: Path, students: list[str]) -> dict[str, str]:
    """SHA-256 of each student's result (see :func:`result_digest`) and feedback page in ``out_dir``."""
    digests = {}
    for student in students:
        result, page = student_files(student)
        if (out_dir / result).is_file():
            digests[result] = result_digest(out_dir / result)
        if (out_dir / page).is_file():
            digests[page] = sha256_file(out_dir / page)
    return digests


def write_marker(out_dir: Path, marker: Marker, students: list[str], complete: bool) -> None:
    """``shard.json``; once ``complete``, with the digests of submissions.csv and of every student's files."""
    data: dict[str, Any] = {**asdict(marker), "shard": list(marker.shard), "students": students, "complete": complete}
    if complete:
        manifest = out_dir / "submissions.csv"
        data["manifest_sha256"] = sha256_file(manifest) if manifest.is_file() else ""
        data["files"] = files_digest(out_dir, students)
    atomic_files.atomic_write(out_dir / MARKER, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Shard:
    folder: Path
    marker: Marker
    students: list[str]
    complete: bool
    manifest_sha256: str = ""
    files: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        k, n = self.marker.shard
        return f"shard {k}/{n} ({self.folder})"


def _str_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError("expected a map of text to text")
    return dict(value)


def _str_list(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of text")
    return list(value)


def read(folder: Path) -> Shard | str:
    """A shard's output folder, or why it cannot be used."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        limits = data["limits"]
        if not isinstance(limits, dict):
            raise TypeError("limits: expected a map")
        marker = Marker(str(data["chapter"]), (int(data["shard"][0]), int(data["shard"][1])),
                        str(data["grader_version"]), str(data["solution_hash"]), bool(data["sandboxed"]),
                        _str_map(data["code"]), limits, str(data["roster_hash"]), _str_map(data["export"]),
                        _str_map(data["graded"]), _str_list(data["class_students"]))
        complete = data["complete"] is True
        return Shard(folder, marker, _str_list(data["students"]), complete,
                     str(data["manifest_sha256"]) if complete else "",
                     _str_map(data["files"]) if complete else {})
    except FileNotFoundError:
        return f"{folder}: no {MARKER} (not a grading output, or its grade never started)"
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return (f"{folder}: unreadable {MARKER} ({type(err).__name__}: {err}); it was written by another grader "
                "version or edited: grade that shard again")
