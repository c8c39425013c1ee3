"""Grading a class in shards (one per machine or scheduler task) and joining them again.

``grade --shard K/N`` grades the students whose id hashes to K (:func:`shard_of`: SHA-256 of the id, so every
machine computes the same split from the same export and roster) and writes ``shard.json`` in its output folder:
incomplete when it starts, complete when every result, feedback page and CSV is written. ``merge OUT...`` checks
that the shards are one class (chapter, N, solution notebook, grader version), that every K from 0 to N-1 is there
and complete (naming those that are not, and refusing unless ``allow_partial``), and writes one ``results/``, one
``feedback/``, one ``grades.csv``, one ``submissions.csv`` (identical in every shard: each shard reads the whole
export) and one nbgrader gradebook. A class graded in shards and merged gives the same bytes as one run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder import align, course, report, results, submissions
from autograder.results import StudentResult

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


@dataclass(frozen=True)
class Marker:
    chapter: str
    shard: tuple[int, int]
    grader_version: str
    solution_hash: str
    sandboxed: bool

    def owns(self, student: str) -> bool:
        k, n = self.shard
        return shard_of(student, n) == k


def write_marker(out_dir: Path, marker: Marker, students: list[str], complete: bool) -> None:
    data = {**asdict(marker), "shard": list(marker.shard), "students": students, "complete": complete}
    report.atomic_write(out_dir / MARKER, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Shard:
    folder: Path
    marker: Marker
    students: list[str]
    complete: bool


def read(folder: Path) -> Shard | str:
    """A shard's output folder, or why it cannot be used."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
        marker = Marker(data["chapter"], (int(data["shard"][0]), int(data["shard"][1])), data["grader_version"],
                        data["solution_hash"], bool(data["sandboxed"]))
        return Shard(folder, marker, list(data["students"]), bool(data["complete"]))
    except FileNotFoundError:
        return f"{folder}: no {MARKER} (not a grading output, or its grade never started)"
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{folder}: unreadable {MARKER} ({err})"


class MergeError(SystemExit):
    pass


def merge(folders: list[Path], out_dir: Path, root: Path = course.ROOT, *, allow_partial: bool = False,
          roster: Path | None = None, lms: str | None = None, lms_assignment: str | None = None,
          nbgrader_dir: Path | None = None) -> list[StudentResult]:
    """Join shard outputs into ``out_dir`` as one run would have written it; returns the class's results."""
    read_ = [read(f) for f in folders]
    problems = [r for r in read_ if isinstance(r, str)]
    shards = [r for r in read_ if isinstance(r, Shard)]
    if not shards:
        raise MergeError("nothing to merge:\n  " + "\n  ".join(problems))
    first = shards[0].marker
    for s in shards:
        same = (s.marker.chapter, s.marker.shard[1], s.marker.solution_hash, s.marker.grader_version)
        if same != (first.chapter, first.shard[1], first.solution_hash, first.grader_version):
            raise MergeError(f"{s.folder} is not a shard of the same run as {shards[0].folder} (chapter, shard count, "
                             "solution notebook or grader version differ)")
    n = first.shard[1]
    by_k: dict[int, Shard] = {}
    for s in shards:
        k = s.marker.shard[0]
        if k in by_k:
            raise MergeError(f"shard {k}/{n} given twice: {by_k[k].folder} and {s.folder}")
        by_k[k] = s
    missing = [f"{k}/{n}" for k in range(n) if k not in by_k]
    failed = [f"{s.marker.shard[0]}/{n} ({s.folder})" for s in shards if not s.complete]
    if missing or failed or problems:
        why = "".join(f"\n  missing: shard {k}" for k in missing) + "".join(
            f"\n  failed or still running: shard {f}" for f in failed) + "".join(f"\n  {p}" for p in problems)
        if not allow_partial:
            raise MergeError(f"refusing to write a partial class:{why}\nrerun those shards, or pass --allow-partial")
        print(f"writing a PARTIAL class (--allow-partial):{why}", flush=True)
    usable = sorted((s for s in by_k.values() if s.complete or allow_partial), key=lambda s: s.marker.shard[0])
    ch = align.load_chapter(root / "solutions" / f"{first.chapter}.ipynb")
    done: dict[str, StudentResult] = {}
    for sub in ("results", "feedback", "logs"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    for s in usable:
        for student in s.students:
            stem = submissions.file_stem(student)
            r = results.load(s.folder / "results" / f"{stem}.json")
            if r is None:
                if s.complete:
                    raise MergeError(f"{s.folder}: the result of {student} is missing or unreadable")
                continue
            done[student] = r
            files = (("results", f"{stem}.json"), ("feedback", f"{stem}.html"), ("logs", f"{stem}.kernel.log"))
            for sub, name in files:
                if (s.folder / sub / name).exists():
                    shutil.copyfile(s.folder / sub / name, out_dir / sub / name)
    # every shard ran the same instructor notebook: its failed cells, if any, once
    logged = [log for log in (s.folder / "logs" / report.INSTRUCTOR_LOG for s in usable) if log.exists()]
    if logged:
        shutil.copyfile(logged[0], out_dir / "logs" / report.INSTRUCTOR_LOG)
    manifests = {(s.folder / "submissions.csv").read_bytes() for s in usable if (s.folder / "submissions.csv").exists()}
    if len(manifests) > 1:
        raise MergeError("the shards read different exports (their submissions.csv differ): grade every shard from "
                         "the same zip or folder and roster")
    ordered = [done[s] for s in sorted(done)]
    rows = submissions.read_roster(roster) if roster else None
    report.write_class(out_dir, ch, ordered, None, rows, lms, lms_assignment, manifest=next(iter(manifests), None))
    from autograder import gradebook

    gradebook.write(Path(nbgrader_dir or out_dir / "nbgrader"), first.chapter, ordered, root / "solutions", rows)
    marker = Marker(first.chapter, (0, 1), first.grader_version, first.solution_hash,
                    all(s.marker.sandboxed for s in usable))
    write_marker(out_dir, marker, sorted(done), complete=not (missing or failed or problems))
    return ordered
