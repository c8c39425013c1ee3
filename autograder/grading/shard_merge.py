"""Joining the shards of one ``grade --shard K/N`` run into one class (see :mod:`autograder.grading.shards` for
what each shard records): refused, with what differs and what to do, unless the shards are one run and complete.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import fields
from pathlib import Path

from autograder import course, results
from autograder.grading.grading_errors import MergeError
from autograder.grading.shards import (
    MARKER,
    Marker,
    Shard,
    read,
    result_digest,
    sha256_file,
    shard_of,
    student_files,
    write_marker,
)
from autograder.instructor import chapter_model
from autograder.intake import file_names, rosters
from autograder.outputs import tables
from autograder.results import Status, StudentResult
from autograder.safe_text import printable

_LIST_AT_MOST = 10


def _listed(lines: list[str]) -> list[str]:
    more = len(lines) - _LIST_AT_MOST
    return lines[:_LIST_AT_MOST] + ([f"... and {more} more"] if more > 0 else [])


def _short(text: object) -> str:
    return f"{str(text)[:16]}..." if isinstance(text, str) and len(text) == 64 else repr(text)


def run_differences(a: Shard, b: Shard) -> list[str]:
    """How ``b`` is not a shard of the same run as ``a`` (empty when it is), one line per difference."""
    ma, mb = a.marker, b.marker
    out: list[str] = []
    if ma.chapter != mb.chapter:
        out.append(f"chapter: {ma.chapter} vs {mb.chapter}")
    if ma.shard[1] != mb.shard[1]:
        out.append(f"number of shards: {ma.shard[1]} vs {mb.shard[1]}")
    if ma.solution_hash != mb.solution_hash:
        out.append(f"instructor notebook solutions/{ma.chapter}.ipynb: SHA-256 {_short(ma.solution_hash)} vs "
                   f"{_short(mb.solution_hash)}")
    if ma.grader_version != mb.grader_version:
        out.append(f"grader version: {ma.grader_version} vs {mb.grader_version}")
    for key in sorted(set(ma.code) | set(mb.code)):
        if ma.code.get(key) != mb.code.get(key):
            what = "grader and library source (autograder/, scalelib/)" if key == "source_sha256" else key
            out.append(f"{what}: {_short(ma.code.get(key))} vs {_short(mb.code.get(key))}")
    for key in sorted(set(ma.limits) | set(mb.limits)):
        if ma.limits.get(key) != mb.limits.get(key):
            out.append(f"limit {key}: {ma.limits.get(key)!r} vs {mb.limits.get(key)!r}")
    if ma.sandboxed != mb.sandboxed:
        out.append(f"sandboxed: {ma.sandboxed} vs {mb.sandboxed}")
    if ma.roster_hash != mb.roster_hash:
        out.append(f"roster: SHA-256 {_short(ma.roster_hash) if ma.roster_hash else 'none'} vs "
                   f"{_short(mb.roster_hash) if mb.roster_hash else 'none'}")
    files = []
    for name in sorted(set(ma.export) | set(mb.export)):
        x, y = ma.export.get(name), mb.export.get(name)
        if x != y:
            files.append(f"export file {name!r}: " + (f"content SHA-256 {_short(x)} vs {_short(y)}" if x and y else
                                                       ("only in the first" if x else "only in the second")))
    out += _listed(files)
    chosen = [f"student {s!r} graded from {ma.graded.get(s)!r} vs {mb.graded.get(s)!r}"
              for s in sorted(set(ma.graded) | set(mb.graded)) if ma.graded.get(s) != mb.graded.get(s)]
    out += _listed(chosen)
    if ma.class_students != mb.class_students:
        in_a, in_b = set(ma.class_students), set(mb.class_students)
        only_a, only_b = in_a - in_b, in_b - in_a
        out.append(f"the class's students: only in the first {sorted(only_a)}, only in the second {sorted(only_b)}")
    if a.complete and b.complete and a.manifest_sha256 != b.manifest_sha256:
        out.append(f"submissions.csv: SHA-256 {_short(a.manifest_sha256)} vs {_short(b.manifest_sha256)}")
    return out


def _result_problems(r: StudentResult, student: str, marker: Marker, ch: chapter_model.Chapter) -> list[str]:
    """Why a result cannot be this student's result of this run (empty when it can)."""
    out = []
    if r.student != student:
        out.append(f"is the result of {r.student!r}, not of {student!r}")
    file = marker.graded.get(student)
    if file is None:
        if r.status != Status.MISSING:
            out.append(f"says {r.status} but the shard found no file for the student")
    elif file not in marker.export:
        out.append(f"grades {file!r}, which the shard's export does not list")
    else:
        expected = results.fingerprint(marker.grader_version, marker.solution_hash, marker.export[file])
        grader_error = r.status == Status.CRASHED and r.detail.startswith("grader error")
        if r.fingerprint != expected and not (grader_error and not r.fingerprint):
            out.append(f"was not graded from {file!r} as the shard read it (fingerprint {r.fingerprint!r}, "
                       f"expected {expected!r})")
        if r.file != file:
            out.append(f"names the file {r.file!r}, but the shard graded {file!r}")
    if set(r.exercises) != set(ch.exercises):
        out.append(f"has exercises {sorted(r.exercises)}, the chapter {sorted(ch.exercises)}")
    for eid, points in r.exercises.items():
        top = ch.exercises[eid].points if eid in ch.exercises else 0.0
        if not (isinstance(points, (int, float)) and 0 <= points <= top):
            out.append(f"gives {points!r} points for {eid} (0 to {top:g})")
    if not math.isclose(r.score, sum(r.exercises.values()), abs_tol=1e-9):
        out.append(f"has score {r.score:g}, but its exercises add up to {sum(r.exercises.values()):g}")
    if r.max_score != ch.max_score:
        out.append(f"has max_score {r.max_score:g}, the chapter {ch.max_score:g}")
    return out


def _check_shard(s: Shard, ch: chapter_model.Chapter,
                 listed_by: dict[str, list[Shard]]) -> tuple[list[str], dict[str, StudentResult]]:
    """(problems, student -> result) of one shard: its students are the ones its K owns, its files are the ones it
    recorded, its results are of its students and of the files it read."""
    m = s.marker
    n = m.shard[1]
    problems: list[str] = []
    everyone = set(m.class_students)
    for student in s.students:
        if student not in everyone:
            problems.append(f"{s.label} lists {student!r}, who is not in the class it read (no file, not on the "
                            "roster)")
        elif not m.owns(student):
            problems.append(f"{s.label} lists {student!r}, who belongs to shard {shard_of(student, n)}/{n}")
        if len(listed_by[student]) > 1 and s is listed_by[student][0]:
            problems.append(f"student {student!r} is listed by " + " and ".join(x.label for x in listed_by[student]))
    left_out = sorted(x for x in everyone - set(s.students) if m.owns(x))
    problems += [f"{s.label} leaves out {x!r}, whom its K owns (it has no result for them)" for x in left_out]
    if s.complete:
        manifest = s.folder / "submissions.csv"
        got = sha256_file(manifest) if manifest.is_file() else "(no file)"
        if got != s.manifest_sha256:
            problems.append(f"{s.label}: submissions.csv is not the one the shard wrote (SHA-256 {_short(got)}, "
                            f"recorded {_short(s.manifest_sha256)})")
        expected = {f for student in s.students for f in student_files(student)}
        for name in sorted(set(s.files) - expected):
            problems.append(f"{s.label}: {MARKER} records {name}, which is not a file of its students")
        absent = sorted(name for name in expected if not (s.folder / name).is_file())
        if absent:
            copied = " (its shard.json describes none of the files beside it: copied from another shard?)" if len(
                absent) == len(expected) else ""
            problems.append(f"{s.label}: {', '.join(absent[:4])}{' ...' if len(absent) > 4 else ''} "
                            f"{'is' if len(absent) == 1 else 'are'} missing "
                            f"({len(absent)} of its students' {len(expected)} result and feedback files){copied}")
        for name in sorted(set(expected) - set(absent)):
            path = s.folder / name
            if name not in s.files:
                problems.append(f"{s.label}: {name} is not recorded in its {MARKER}")
            else:
                got = result_digest(path) if name.startswith("results/") else sha256_file(path)
                if got != s.files[name]:
                    problems.append(f"{s.label}: {name} was changed after grading (SHA-256 {_short(got)}, "
                                    f"recorded {_short(s.files[name])})")
    done: dict[str, StudentResult] = {}
    for student in s.students:
        name = student_files(student)[0]
        r = results.load(s.folder / name)
        if r is None:
            if s.complete and (s.folder / name).is_file():
                problems.append(f"{s.label}: {name} (the result of {student!r}) is unreadable")
            continue
        problems += [f"{s.label}: {name} {why}" for why in _result_problems(r, student, m, ch)]
        done[student] = r
    return problems, done


_WHAT_TO_DO = ("merge only the output folders of one `grade --shard K/N` run: the same export, roster, chapter, "
               "grader and options on every shard; grade again any shard named above (into an empty --out), then "
               "merge")


def merge(folders: list[Path], out_dir: Path, root: Path = course.ROOT, *, allow_partial: bool = False,
          roster: Path | None = None, lms: str | None = None, lms_assignment: str | None = None,
          nbgrader_dir: Path | None = None) -> list[StudentResult]:
    """Join shard outputs into ``out_dir`` as one run would have written it; returns the class's results.

    Every check runs before anything is written: a refusal (:class:`MergeError`) leaves ``out_dir`` as it was.
    """
    read_ = [read(f) for f in folders]
    problems = [r for r in read_ if isinstance(r, str)]
    shards = [r for r in read_ if isinstance(r, Shard)]
    if not shards:
        raise MergeError("nothing to merge:\n  " + "\n  ".join(problems))
    first = shards[0]
    for s in shards[1:]:
        diffs = run_differences(first, s)
        if diffs:
            raise MergeError(f"refusing to merge: {s.label} is not a shard of the same run as {first.label}:\n  "
                             + "\n  ".join(diffs) + f"\n{_WHAT_TO_DO}")
    n = first.marker.shard[1]
    ch = chapter_model.load_chapter(root / "solutions" / f"{first.marker.chapter}.ipynb")
    solution_hash = sha256_file(root / "solutions" / f"{first.marker.chapter}.ipynb")
    if solution_hash != first.marker.solution_hash:
        raise MergeError(f"refusing to merge: the shards were graded with another solutions/{first.marker.chapter}"
                         f".ipynb than the one in {root} (SHA-256 {_short(first.marker.solution_hash)} vs "
                         f"{_short(solution_hash)}): merge with the repository the shards graded with")
    listed_by: dict[str, list[Shard]] = {}
    for s in shards:
        for student in s.students:
            listed_by.setdefault(student, []).append(s)
    bad: list[str] = []
    by_k: dict[int, Shard] = {}
    for s in shards:
        k = s.marker.shard[0]
        if k in by_k:
            bad.append(f"shard {k}/{n} given twice: {by_k[k].folder} and {s.folder} (one of them is another shard's "
                       "output or a copy)")
        by_k.setdefault(k, s)
    done: dict[str, StudentResult] = {}
    for s in shards:
        found, got = _check_shard(s, ch, listed_by)
        bad += found
        if s.complete or allow_partial:
            done.update(got)
    if bad:
        raise MergeError("refusing to merge: the shards' outputs are not consistent:\n  " + "\n  ".join(_listed(bad))
                         + f"\n{_WHAT_TO_DO}")
    missing = [f"{k}/{n}" for k in range(n) if k not in by_k]
    failed = [f"{s.marker.shard[0]}/{n} ({s.folder})" for s in shards if not s.complete]
    if missing or failed or problems:
        why = "".join(f"\n  missing: shard {k}" for k in missing) + "".join(
            f"\n  failed or still running: shard {f}" for f in failed) + "".join(f"\n  {p}" for p in problems)
        if not allow_partial:
            raise MergeError(f"refusing to write a partial class:{why}\nrerun those shards, or pass --allow-partial")
        print(f"writing a PARTIAL class (--allow-partial):{why}", flush=True)
    usable = sorted((s for s in by_k.values() if s.complete or allow_partial), key=lambda s: s.marker.shard[0])
    manifests = {(s.folder / "submissions.csv").read_bytes() for s in usable if (s.folder / "submissions.csv").exists()}
    if len(manifests) > 1:
        raise MergeError("refusing to merge: the shards read different exports (their submissions.csv differ): "
                         "grade every shard from the same zip or folder and roster")
    roster_rows = rosters.read_roster(roster) if roster else None
    if roster is not None and sha256_file(roster) != first.marker.roster_hash:
        raise MergeError(f"refusing to merge: {roster} is not the roster the shards graded with: pass that one")
    from autograder.grading import re_export
    from autograder.intake import canvas_columns
    from autograder.outputs import kept_scores

    notes = []
    if lms == "canvas" and roster is not None:  # refused here, if it is, before anything is written
        choice = re_export.choose_assignment(roster, first.marker.chapter, root, lms_assignment)
        lms_assignment = choice.column
        notes += [choice.note] if choice.note else []
    if roster is not None:
        notes += [note] if (note := canvas_columns.student_view_note(roster)) else []
    # nothing was written so far; from here on, only what the checks above let through
    for sub in ("results", "feedback", "logs"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    for s in usable:
        for student in s.students:
            if student not in done:
                continue
            stem = file_names.file_stem(student)
            files = (("results", f"{stem}.json"), ("feedback", f"{stem}.html"), ("logs", f"{stem}.kernel.log"))
            for sub, name in files:
                if (s.folder / sub / name).exists():
                    shutil.copyfile(s.folder / sub / name, out_dir / sub / name)
    # every shard ran the same instructor notebook: its failed cells, if any, once
    logged = [log for log in (s.folder / "logs" / tables.INSTRUCTOR_LOG for s in usable) if log.exists()]
    if logged:
        shutil.copyfile(logged[0], out_dir / "logs" / tables.INSTRUCTOR_LOG)
    ordered = [done[s] for s in sorted(done)]
    manifest = next(iter(manifests), None)
    kept_scores.write(out_dir, ch, ordered, [], None, roster_rows, lms, lms_assignment, manifest)
    from autograder.outputs import gradebook

    book = gradebook.write(Path(nbgrader_dir or out_dir / "nbgrader"), first.marker.chapter, ordered,
                           root / "solutions", roster_rows)
    kept = kept_scores.formgrader_scores(book.parent, first.marker.chapter, ordered)
    if kept:  # a merge into a class folder graded before keeps what was typed into its formgrader
        kept_scores.write(out_dir, ch, ordered, kept, None, roster_rows, lms, lms_assignment, manifest)
    for line in notes + kept_scores.console_lines(kept):
        print(printable(line), flush=True)
    merged = Marker(**{f.name: getattr(first.marker, f.name) for f in fields(Marker) if f.name != "shard"},
                    shard=(0, 1))
    write_marker(out_dir, merged, sorted(done), complete=not (missing or failed or problems))
    return ordered
