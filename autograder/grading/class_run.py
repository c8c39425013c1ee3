"""Grade a course site's export (folder or zip of notebooks) for one chapter, in parallel and isolated.

How a submission is graded (see also README, "For instructors"):

1. **Who and what.** :mod:`autograder.intake.collection` maps files to students (file names as course sites and
   Colab write them, an optional roster) and to a chapter (the notebook's ``metadata.scalelib.chapter``);
   the latest file per student wins; every entry of the export gets a row in ``submissions.csv``.
2. **Which cells.** :mod:`autograder.intake.answer_cells` finds the student's answer cells by what they define (the
   function the released stub names), not by nbgrader metadata or cell ids, which Colab may drop. The
   student's copies of test cells never run.
3. **Where it runs.** Per student, per group of exercises that may use the same part of scalelib, a fresh kernel
   in an OS sandbox (:mod:`autograder.sandbox`: own user/mount/PID/network namespaces, a read-only root with only
   Python, the environment and *that part* of scalelib (:mod:`autograder.library.surface`), one writable scratch
   folder), with a memory limit for all its processes together, a CPU-time limit, a process cap, time limits and an
   output cap. No instructor cell runs in it: what the set-up and demo cells bound arrives as data
   (:mod:`autograder.judging.trusted`). Kernels are started ahead by a warm pool (:mod:`autograder.kernel.pool`) and
   each is used by one student only. The steps per student are in :mod:`autograder.judging.student_steps`.
4. **Who judges.** :mod:`autograder.judging.judge`: the instructor's test cells (hidden tests included) run in the
   grader process against a trusted run of the instructor's notebook; the student's functions are called in the
   kernel and only plain data come back, through a capped channel.
5. **Many at once.** ``workers`` students side by side (threads here, kernel processes there). Each result is
   written atomically to ``results/<student>.json`` as soon as it is known (a rerun skips students whose
   notebook and chapter are unchanged unless ``force``); ``grades.csv``, ``submissions.csv`` and
   ``feedback/<student>.html`` are then written from those files (:mod:`autograder.outputs.tables`).

Statuses: see :class:`autograder.results.Status`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict
from pathlib import Path

from autograder import atomic_files, course, pysource, results
from autograder.grading import shards
from autograder.grading.console import Console, export_problems, files_written
from autograder.grading.grading_errors import Unsandboxed
from autograder.instructor import chapter_model
from autograder.intake import answer_cells, collection, file_names, rosters
from autograder.judging.student_steps import Shared, grade_student, groups, replay_steps, screen
from autograder.judging.trusted import TrustedContext
from autograder.kernel import library_proof
from autograder.kernel.pool import Flavour, KernelPool
from autograder.kernel.session import Limits
from autograder.library import surface
from autograder.outputs import feedback, tables
from autograder.results import Status, StudentResult
from autograder.sandbox import probes
from scalelib import exercise

GRADER_VERSION = "6"  # 5: identity from the uploader's folder, one-to-one file stems; 6: objects keep their class


STATUSES = tuple(s.value for s in Status)


def fingerprint(solution_hash: str, path: Path) -> str:
    """Changes when the submission, the chapter's solution notebook or the grader changes."""
    return results.fingerprint(GRADER_VERSION, solution_hash, shards.sha256_file(path))


def prepare(chapter: chapter_model.Chapter, work: Path, logs: Path, limits: Limits, workers: int,
            unrestricted: bool = False, stubs: dict[str, str] | None = None) -> Shared:
    """Everything per chapter, once per run: the trusted context (started in a thread), each surface's library,
    the replay steps, the exercise groups and a warm pool of kernels. (``unrestricted``: also a group with all
    of scalelib, for tests that prove a delegating answer would pass if it could reach the library; ``stubs``: the
    released answer cells, :func:`answer_cells.released_stubs`.)"""
    # IPython is imported whole before the threads below start: the trusted context's set-up cell and the threads
    # that start kernels or judge students could import it for the first time at once, and one of them would find it
    # half-initialized ("cannot import name 'locate_profile' from partially initialized module").
    with contextlib.suppress(ImportError):
        import IPython
        import IPython.core.history
        import IPython.display  # noqa: F401
    by_declaration: dict[frozenset[surface.Item], surface.Surface] = {}
    surfaces = {}
    for eid, ex in chapter.exercises.items():
        if ex.allows not in by_declaration:
            by_declaration[ex.allows] = surface.closure(ex.allows)
        surfaces[eid] = by_declaration[ex.allows]
    flavours = {}
    for s in by_declaration.values():
        if s.key not in flavours:
            library = s.write(work / "lib" / s.key) if limits.sandbox else None
            flavours[s.key] = Flavour(s.key, library, s.describe(), chapter.devices)
    everything = surface.Surface.everything()
    if unrestricted:
        flavours[everything.key] = Flavour(everything.key, None, everything.describe(), chapter.devices)
    # Every kind of kernel imports the very code the grader judges with, or nothing is graded.
    kinds: dict[str, Path | None] = {"kernels (no sandbox)": None}
    if limits.sandbox:
        kinds = {f"kernels with {f.allowed}": f.library for f in flavours.values()}
    library_proof.verify(kinds, limits.sandbox)
    context = TrustedContext(chapter)
    threading.Thread(target=context.build, daemon=True, name="trusted-context").start()
    steps = replay_steps(chapter)
    pool = KernelPool(limits, work / "scratch", logs, flavours, ahead=workers)
    open_groups = groups(chapter, dict.fromkeys(chapter.exercises, everything), steps)
    return Shared(chapter, context, steps, groups(chapter, surfaces, steps), pool, limits, logs, open_groups,
                  stubs or {})


def grade(source: Path, chapter: str, out_dir: Path, root: Path = course.ROOT, *, roster: Path | None = None,
          workers: int | None = None, force: bool = False, cell_timeout_s: float | None = None,
          notebook_timeout_s: float | None = None, memory_mb: int | None = None, disk_mb: int | None = None,
          max_output_bytes: int | None = None, quiet: bool = False,
          nbgrader_dir: Path | None = None, allow_unsandboxed: bool = False, shard: tuple[int, int] | None = None,
          lms: str | None = None, lms_assignment: str | None = None,
          unrestricted: frozenset[str] = frozenset()) -> list[StudentResult]:
    """Grade every submission in ``source`` (folder or .zip) for ``chapter``; returns one result per student.

    The results also go into the nbgrader gradebook of ``nbgrader_dir`` (default ``out_dir/nbgrader``;
    see :mod:`autograder.outputs.gradebook`), except in a shard: ``shard=(K, N)`` grades only the students whose id
    hashes to K of N (:func:`autograder.grading.shards.shard_of`) and leaves the gradebook to ``merge``.
    ``lms="canvas"``: also a CSV for Canvas's gradebook import (needs ``roster``; see tables.write_canvas_csv);
    ``lms="gradescope"``: also Gradescope's results.json per submission (:mod:`autograder.outputs.lms_results`).
    ``unrestricted``: students whose kernels get all of scalelib; only for tests that prove a delegating answer
    would pass if it could reach the library (never for a class).
    """
    # Every path is absolute before anything else happens: the grader's threads then never depend on the process's
    # working directory (nothing in this process changes it while they run: see nbgrader_course._generate_assignment).
    source, out_dir, root = Path(source).resolve(), Path(out_dir).resolve(), Path(root).resolve()
    roster = Path(roster).resolve() if roster is not None else None
    nbgrader_dir = Path(nbgrader_dir).resolve() if nbgrader_dir is not None else None
    settings = course.settings(root)
    pysource.guard()  # threads below parse: no AST conversion may race another (CPython gh-106905)
    # Test cells run here: an exercise that still raises its stub fails its visible checks too.
    os.environ[exercise.STRICT_ENV] = "1"
    if lms not in (None, "canvas", "gradescope"):
        raise SystemExit(f"--lms takes 'canvas' or 'gradescope', got {lms!r} (grades_long.csv is written for any "
                         "other system)")
    if lms == "canvas" and roster is None:
        raise SystemExit("--lms canvas needs --roster: Canvas matches rows by its user id or SIS ids, which only the "
                         "roster has (columns id, sis_id, login; see README)")
    say = Console(quiet)
    if roster is not None:
        from autograder.grading import re_export
        from autograder.intake import canvas_columns
        from autograder.outputs import kept_scores

        if lms == "canvas":  # the column canvas.csv fills, before any kernel starts: a refusal costs nothing
            choice = re_export.choose_assignment(roster, chapter, root, lms_assignment)
            lms_assignment = choice.column
            say.notes += [choice.note] if choice.note else []
        say.notes += [note] if (note := canvas_columns.student_view_note(roster)) else []
    for name, value in (("--memory-mb", memory_mb), ("--disk-mb", disk_mb)):
        if value is not None and value < 0:
            raise SystemExit(f"{name} must be 0 or more (MB; 0: no limit of its own), got {value}")
    why_not = probes.available()
    if why_not and not allow_unsandboxed:
        raise Unsandboxed(why_not)
    if why_not:
        print("\n" + "!" * 78 + f"\n!! NOT SANDBOXED (--allow-unsandboxed): {why_not}\n"
              "!! Student code can read and write anything this user can, and every answer can reach all of\n"
              "!! scalelib (ex.allow restricts it only inside a sandbox).\n" + "!" * 78 + "\n",
              file=sys.stderr, flush=True)
    limits = Limits(cell_timeout_s=cell_timeout_s or settings.cell_timeout_s,
                    notebook_timeout_s=notebook_timeout_s or settings.notebook_timeout_s,
                    memory_mb=memory_mb if memory_mb is not None else settings.memory_mb,
                    disk_mb=disk_mb if disk_mb is not None else settings.disk_mb,
                    max_output_bytes=max_output_bytes or settings.max_output_bytes,
                    sandbox=not why_not)
    workers = max(1, workers or os.cpu_count() or 1)
    if why_not:
        say.problem(f"NOT SANDBOXED (--allow-unsandboxed): {why_not}; student code could read and write anything "
                    "this user can")
    solution = root / "solutions" / f"{chapter}.ipynb"
    solution_hash = hashlib.sha256(solution.read_bytes()).hexdigest()
    for sub in ("feedback", "results", "logs"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    ch = chapter_model.load_chapter(solution)
    with say.stopped_runs_say_their_problems(), tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        work = Path(tmp)
        mapping = collection.collect(source, chapter, course.chapter_names(root), work, roster,
                                      released=root / "chapters")
        marker = _marker(chapter, shard or (0, 1), solution_hash, limits, roster, mapping)
        export_problems(mapping, say)
        if not mapping.chosen and not mapping.missing:
            # the class's files still say what became of every entry
            tables.write_class(out_dir, ch, [], mapping, rosters.read_roster(roster) if roster else None,
                               lms, lms_assignment)
            say.end(out_dir, ["submissions.csv, and grades.csv and grades_long.csv without rows"])
            raise SystemExit(f"no notebooks found in {source}" +
                             (f" ({len(mapping.unmatched)} unmatched files)" if mapping.unmatched else "") +
                             (f" ({len(mapping.skipped)} entries not read)" if mapping.skipped else "") +
                             f"; see {out_dir / 'submissions.csv'}")
        mine = sorted(s for s in set(mapping.chosen) | set(mapping.missing) if marker.owns(s))
        shards.write_marker(out_dir, marker, mine, complete=False)
        book = None if shard else _Gradebook(Path(nbgrader_dir or out_dir / "nbgrader"), chapter, root / "solutions")
        done: dict[str, StudentResult] = {}
        todo = []
        for student in mine:
            cand = mapping.chosen.get(student)
            if cand is None:
                done[student] = StudentResult(student, Status.MISSING, 0.0, ch.max_score,
                                              dict.fromkeys(ch.exercises, 0.0), 0.0, "no submission")
                continue
            try:
                fp = fingerprint(solution_hash, cand.path)
            except OSError as err:  # the grader's own copy: not expected, but one student's problem if it happens
                done[student] = StudentResult(student, Status.CRASHED, 0.0, ch.max_score,
                                              dict.fromkeys(ch.exercises, 0.0), 0.0,
                                              f"grader error: could not read the notebook ({err.strerror})", cand.shown)
                continue
            stem = file_names.file_stem(student)
            previous = results.load(out_dir / "results" / f"{stem}.json")
            if previous and not force and previous.fingerprint == fp and previous.file == cand.shown:
                done[student] = previous
                say(f"{previous.line()}  (already graded; --force to redo)")
                continue
            early = screen(ch.name, student, cand, ch.max_score, list(ch.exercises), fp)
            if early is not None:  # not a notebook of this chapter: no kernel needed
                done[student] = early
                atomic_files.atomic_write(out_dir / "results" / f"{stem}.json", early.to_json())
                feedback.write_feedback(out_dir / "feedback" / f"{stem}.html", ch.name, early, ch)
                say(early.line())
                continue
            todo.append((student, cand, fp))
        if todo:
            stubs = answer_cells.released_stubs(root / "chapters" / f"{chapter}.ipynb")
            _grade_all(ch, todo, work, out_dir, limits, workers, done, say, unrestricted, stubs)
        ordered = [done[s] for s in sorted(done)]
        for r in ordered:
            stem = file_names.file_stem(r.student)
            atomic_files.atomic_write(out_dir / "results" / f"{stem}.json", r.to_json())
            page = out_dir / "feedback" / f"{stem}.html"
            if not page.exists():
                feedback.write_feedback(page, chapter, r, ch)
        rows = rosters.read_roster(roster) if roster else None
        from autograder.grading import re_export
        from autograder.outputs import kept_scores

        kept_scores.write(out_dir, ch, ordered, [], mapping, rows, lms, lms_assignment)  # also if the gradebook fails
        written = None
        if book is not None:
            graded = {s: (c.path, c.mtime) for s, c in mapping.chosen.items() if s in done}
            written = book.finish(ordered, rows, graded, say)
            kept = kept_scores.formgrader_scores(written.parent, chapter, ordered)
            if kept:  # what formgrader shows, in every export, and said
                kept_scores.write(out_dir, ch, ordered, kept, mapping, rows, lms, lms_assignment)
                say.notes += kept_scores.console_lines(kept)
            from autograder.outputs import gradebook

            warning = gradebook.unsafe_ids_warning(book.folder)
            if warning:
                say.problem(warning)
        shards.write_marker(out_dir, marker, mine, complete=True)
    counts = {s: sum(r.status == s for r in ordered) for s in STATUSES}
    say(f"{len(ordered)} students: {', '.join(f'{n} {s}' for s, n in counts.items() if n) or 'none'}")
    say.end(out_dir, files_written(lms, written, shard))
    return ordered


def _marker(chapter: str, shard: tuple[int, int], solution_hash: str, limits: Limits, roster: Path | None,
            mapping: collection.Mapping) -> shards.Marker:
    """What this run is and what it read (see :mod:`autograder.grading.shards`): ``merge`` checks shards against it."""
    export = {c.shown: shards.sha256_file(c.path)
              for c in [*mapping.chosen.values(), *(c for c, _ in mapping.superseded)]}
    return shards.Marker(chapter, shard, GRADER_VERSION, solution_hash, limits.sandbox, shards.code_identity(),
                         asdict(limits), shards.sha256_file(roster) if roster else "", dict(sorted(export.items())),
                         {s: c.shown for s, c in sorted(mapping.chosen.items())},
                         sorted(set(mapping.chosen) | set(mapping.missing)))


class _Gradebook:
    """nbgrader's course folder, made in a thread while the kernels run (it needs no results), then filled."""

    def __init__(self, folder: Path, chapter: str, solutions: Path) -> None:
        from autograder.outputs import gradebook

        self.folder, self.chapter, self.solutions, self.errors = folder, chapter, solutions, list[BaseException]()
        self._gradebook = gradebook
        self._thread = threading.Thread(target=self._prepare, name="gradebook", daemon=True)
        self._thread.start()

    def _prepare(self) -> None:
        try:
            self._gradebook.prepare(self.folder, self.chapter, self.solutions)
        except Exception as err:
            self.errors.append(err)

    def finish(self, ordered: list[StudentResult], roster: list[dict[str, str]] | None,
               submitted: dict[str, tuple[Path, float]], say: Console) -> Path:
        """Fill the gradebook; a failure (of the preparation or of the filling) is retried once from the start."""
        self._thread.join()
        for attempt in (1, 2):
            try:
                if self.errors:
                    raise self.errors[-1]
                return self._gradebook.record(self.folder.resolve(), self.chapter, ordered, roster, submitted,
                                              self.solutions)
            except Exception as err:
                if attempt == 2:
                    raise RuntimeError(f"could not write the nbgrader gradebook in {self.folder} (tried twice): "
                                       f"{type(err).__name__}: {err}") from err
                say.problem(f"nbgrader gradebook: {type(err).__name__}: {err}; written again"[:300])
                self.errors.clear()
                self._prepare()
        raise AssertionError("unreachable")


def _grade_twice(shared: Shared, student: str, cand: collection.Candidate, fp: str, log: Path, unrestricted: bool,
                 say: Console) -> StudentResult:
    """:func:`grade_student`, run again once when the grader itself fails (an error of the grader's, not a verdict on
    the student: e.g. an interpreter fault); the second failure is the one reported."""
    try:
        return grade_student(shared, student, cand, fp, log, unrestricted)
    except Exception as err:
        note = f"grader error while grading {student} ({type(err).__name__}: {err}); grading again"
        say.problem(f"grader error while grading {student} ({type(err).__name__}: {err})"[:300]
                    + f"; graded again (see {log})")
        with contextlib.suppress(OSError), open(log, "a", encoding="utf-8") as f:
            f.write(f"\n[grader] {note}\n{traceback.format_exc()}\n")
    return grade_student(shared, student, cand, fp, log, unrestricted)


def _grade_all(ch: chapter_model.Chapter, todo: list[tuple[str, collection.Candidate, str]], work: Path, out_dir: Path,
               limits: Limits, workers: int, done: dict[str, StudentResult], say: Console,
               unrestricted: frozenset[str] = frozenset(), stubs: dict[str, str] | None = None) -> None:
    start = time.perf_counter()
    say(f"grading {len(todo)} notebooks of {ch.name} with {min(workers, len(todo))} workers"
        f" ({'sandboxed' if limits.sandbox else 'NOT sandboxed'}; limits: {limits.cell_timeout_s:.0f} s/cell,"
        f" {limits.notebook_timeout_s:.0f} s/notebook, {limits.memory_mb} MB, {limits.disk_mb} MB disk,"
        f" {limits.max_output_bytes} B output)")
    shared = prepare(ch, work, out_dir / "logs", limits, min(workers, len(todo)), bool(unrestricted), stubs)
    try:
        shared.pool.expect([g.surface.key for s, _, _ in todo
                            for g in (shared.open_groups if s in unrestricted else shared.groups)])
        with ThreadPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            futures = {pool.submit(_grade_twice, shared, s, c, fp,
                                   out_dir / "logs" / f"{file_names.file_stem(s)}.kernel.log",
                                   s in unrestricted, say): (s, c)
                       for s, c, fp in todo}
            for n, fut in enumerate(as_completed(futures), 1):
                student, cand = futures[fut]
                try:
                    res = fut.result()
                except Exception as err:
                    res = StudentResult(student, Status.CRASHED, 0.0, ch.max_score, dict.fromkeys(ch.exercises, 0.0),
                                        0.0, f"grader error (twice): {type(err).__name__}: {err}"[:300], cand.shown)
                done[student] = res
                stem = file_names.file_stem(student)
                atomic_files.atomic_write(out_dir / "results" / f"{stem}.json", res.to_json())
                feedback.write_feedback(out_dir / "feedback" / f"{stem}.html", ch.name, res, ch)
                say(f"[{n:>3}/{len(todo)}  {time.perf_counter() - start:6.0f} s] {res.line()}")
    finally:
        shared.pool.close()
        shared.context.ready.wait(timeout=limits.notebook_timeout_s)  # no instructor code left running at exit
        faults = [f"test of {eid} failed for {r.student} (not the student's fault): {msg}"[:400]
                  for r in (done[s] for s, _, _ in todo if s in done)
                  for eid, msg in r.messages.items() if msg.startswith(results.TEST_FAULT)]
        _report_instructor_problems(shared.context, out_dir / "logs" / tables.INSTRUCTOR_LOG, say, faults)
    secs = time.perf_counter() - start
    say(f"{len(todo)} notebooks in {secs:.0f} s ({60 * len(todo) / max(secs, 1e-9):.1f} per minute)")


def _report_instructor_problems(context: TrustedContext, log: Path, say: Console,
                                faults: list[str] | None = None) -> None:
    """Cells of the instructor's notebook that raised in the grader's own run: a demo value they bind is missing
    and a test cell among them cannot judge anyone, so the instructor hears of it (and ``logs/`` keeps it). So do
    ``faults``: tests whose own code failed while judging a student (judge.TestFault)."""
    problems = list(context.problems) + list(faults or [])
    if context.error is not None:
        problems.append(f"the run stopped: {type(context.error).__name__}: {context.error}"[:300])
    if not problems:
        log.unlink(missing_ok=True)
        return
    atomic_files.atomic_write(log, "\n".join(problems) + "\n")
    more = [f"... and {len(problems) - 5} more"] if len(problems) > 5 else []
    say.problem(f"{len(problems)} problem(s) of the instructor's notebook or tests in the grader's run (see {log}):",
                problems[:5] + more)


__all__ = ["GRADER_VERSION", "STATUSES", "Status", "StudentResult", "Unsandboxed", "grade"]
