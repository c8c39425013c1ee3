"""Grade a course site's export (folder or zip of notebooks) for one chapter, in parallel and isolated.

How a submission is graded (see also README, "For instructors"):

1. **Who and what.** :mod:`autograder.submissions` maps files to students (file names as course sites and
   Colab write them, an optional roster) and to a chapter (the notebook's ``metadata.scalelib.chapter``);
   the latest file per student wins; unmatched files are listed.
2. **Which cells.** :mod:`autograder.align` finds the student's answer cells by what they define (the
   function the released stub names), not by nbgrader metadata or cell ids, which Colab may drop. The
   graded run is built by the grader: the instructor's set-up and demo cells, the student's answer cells
   (and their own helper cells), never the student's copies of test cells.
3. **Where it runs.** Each student gets a fresh kernel in an OS sandbox (:mod:`autograder.sandbox`: its
   own user/mount/PID/network namespaces, a root file system with only Python, the environment and
   scalelib, read-only, and one writable scratch folder) with a memory limit (RLIMIT_AS), a CPU-time
   limit, a cap on processes (a fork bomb is killed), per-cell and per-notebook time limits and an
   output cap (:mod:`autograder.kernel`). The submission's saved outputs are never used (only cell
   sources are sent). A kernel that dies (crash, or killed after ignoring an interrupt) is restarted
   without the exercise it died in, at most ``MAX_RESTARTS`` times; the status then says so.
4. **Who judges.** :mod:`autograder.judge`: the instructor's test cells (hidden tests included) run in
   the grader process against a trusted run of the instructor's notebook; the student's functions are
   called in the kernel and only plain JSON values come back. Patching numpy, scalelib, builtins or
   ``ex.check_close`` in the kernel, or returning an object that equals anything, cannot make a wrong
   answer pass.
5. **Many at once.** ``workers`` kernels run side by side (threads here, one kernel process each). Each
   student's result is written atomically to ``results/<student>.json`` as soon as it is known (a rerun
   skips students whose notebook and chapter are unchanged unless ``force``); ``grades.csv``,
   ``submissions.csv`` and ``feedback/<student>.html`` are then written from those files.

Statuses: graded, partially graded (with the reason), timed out, crashed, invalid notebook, wrong chapter,
missing (a roster student without a file).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autograder import align, course, inkernel, sandbox, submissions
from autograder.kernel import KernelDied, KernelSession, KernelTimedOut, Limits
from autograder.report import atomic_write, write_csv, write_feedback, write_manifest
from scalelib import exercise

GRADER_VERSION = "3"
MAX_RESTARTS = 3  # a kernel that dies is restarted without the exercise it died in, at most this often
INSTRUCTOR_CELL_TIMEOUT_S = 120.0  # the least time a set-up or demo cell of the instructor gets
STATUSES = ("graded", "partially graded", "timed out", "crashed", "invalid notebook", "wrong chapter", "missing")


@dataclass(frozen=True)
class StudentResult:
    student: str
    status: str  # one of STATUSES
    score: float
    max_score: float
    exercises: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    detail: str = ""
    file: str = ""
    messages: dict[str, str] = field(default_factory=dict)  # exercise -> why it failed
    outputs: dict[str, str] = field(default_factory=dict)  # exercise -> what its test printed
    in_kernel: tuple[str, ...] = ()  # exercises that had to be judged inside the kernel
    fingerprint: str = ""

    def line(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.student:24s} {self.score:6.1f} / {self.max_score:.1f}  {self.status}{extra}  [{self.seconds:.1f} s]"


def _safe(student: str) -> str:
    return submissions.file_stem(student)


class Grader:
    def __init__(self, chapter_name: str, root: Path, out_dir: Path, limits: Limits, workers: int, force: bool,
                 quiet: bool = False):
        self.chapter = align.load_chapter(root / "solutions" / f"{chapter_name}.ipynb")
        self.chapter_name = chapter_name
        self.out_dir, self.limits, self.workers, self.force, self.quiet = out_dir, limits, workers, force, quiet
        self.solution_hash = hashlib.sha256((root / "solutions" / f"{chapter_name}.ipynb").read_bytes()).hexdigest()
        self._context = None
        self._context_lock = threading.Lock()
        self._print_lock = threading.Lock()
        self.done = 0
        self.total = 0

    # -- trusted context: built once, in a thread of its own (grade() starts it with the first kernels) --
    def context(self):
        from autograder.judge import TrustedContext

        with self._context_lock:
            if self._context is None:
                self._context = TrustedContext(self.chapter)
                threading.Thread(target=self._context.build, daemon=True, name="trusted-context").start()
        return self._context

    def say(self, text: str) -> None:
        if not self.quiet:
            with self._print_lock:
                print(text, flush=True)

    def fingerprint(self, path: Path) -> str:
        h = hashlib.sha256(path.read_bytes()).hexdigest()
        return hashlib.sha256(f"{GRADER_VERSION}:{self.solution_hash}:{h}".encode()).hexdigest()[:32]

    def empty(self, student: str, status: str, detail: str, file: str = "", fp: str = "") -> StudentResult:
        return StudentResult(student, status, 0.0, self.chapter.max_score, {e: 0.0 for e in self.chapter.exercises},
                             0.0, detail, file, fingerprint=fp)

    def grade_one(self, student: str, cand: submissions.Candidate, scratch: Path, logs: Path) -> StudentResult:
        from autograder.judge import Judge

        start = time.perf_counter()
        deadline = time.monotonic() + self.limits.notebook_timeout_s  # reading the notebook counts too
        fp = self.fingerprint(cand.path)
        if cand.invalid:
            return self.empty(student, "invalid notebook", cand.invalid, cand.shown, fp)
        if cand.chapter not in (None, self.chapter_name):
            return self.empty(student, "wrong chapter", f"this is {cand.chapter} (from its {cand.chapter_from})",
                              cand.shown, fp)
        nb = json.loads(cand.path.read_bytes().decode("utf-8"))
        try:
            plan = align.plan(nb["cells"], self.chapter, deadline)
        except align.AlignTimeout as err:
            return StudentResult(student, "timed out", 0.0, self.chapter.max_score,
                                 {e: 0.0 for e in self.chapter.exercises}, time.perf_counter() - start, str(err),
                                 cand.shown, fingerprint=fp)
        if not (set(plan.answers) & set(self.chapter.exercises)) and cand.chapter is None:
            return self.empty(student, "wrong chapter", "none of this chapter's answers are in it", cand.shown, fp)
        lim = self.limits
        scores = {e: 0.0 for e in self.chapter.exercises}
        messages = {e: "answer not found in the notebook" for e in plan.not_found}
        outputs: dict[str, str] = {}
        in_kernel: list[str] = []
        problems: list[str] = list(plan.problems)
        status = "graded"
        judged: set[str] = set()
        dropped: set[str] = set()  # exercises whose answer or test killed the kernel: left out after a restart
        for attempt in range(MAX_RESTARTS + 1):
            current = None  # the exercise being run or judged: blamed if the kernel dies
            session = None
            try:
                session = KernelSession(scratch / f"k{attempt}", lim, logs / f"{_safe(student)}.kernel.log")
                helper = session.run(inkernel.program(lim.max_reply_bytes), timeout=60, silent=True)
                if not helper.ok:
                    problems.append(f"grader helper: {helper.error}")
                judge = None
                for kind, src, eid in self.chapter.cells:
                    current = eid if kind in ("answer", "test") else None
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        status = "timed out"
                        problems.append(f"notebook time limit ({lim.notebook_timeout_s:.0f} s) reached")
                        break
                    if kind in ("setup", "context"):
                        # the instructor's own cells (imports, demos, a roofline measurement) get at least
                        # INSTRUCTOR_CELL_TIMEOUT_S: a short per-cell limit meant for student code must not
                        # cut them on a loaded machine; the notebook's limit still bounds them
                        limit = max(lim.cell_timeout_s, INSTRUCTOR_CELL_TIMEOUT_S)
                        run = session.run(src, timeout=min(limit, remaining))
                        if run.timed_out and attempt == 0:
                            problems.append(f"a set-up/demo cell timed out ({limit:.0f} s)")
                        continue
                    if eid in dropped or eid not in plan.answers:
                        continue
                    if kind == "answer":
                        for cell in plan.helpers.get(eid, []) + [plan.answers[eid]]:
                            run = session.run(cell, timeout=min(lim.cell_timeout_s, remaining))
                            if attempt == 0 and run.timed_out:
                                problems.append(f"answer cell of {eid} timed out ({lim.cell_timeout_s:.0f} s) and was interrupted")
                            if attempt == 0 and run.output_capped:
                                problems.append(f"answer cell of {eid} printed more than {lim.max_output_bytes} bytes")
                        continue
                    if eid in judged:
                        continue
                    # a test cell: judge it in the grader
                    ctx = self.context()
                    if not ctx.ready.wait(timeout=max(remaining, 0)):
                        status = "timed out"
                        break
                    if ctx.error is not None:
                        raise RuntimeError(f"the instructor's notebook failed in the grader: {ctx.error!r}")
                    if judge is None:
                        judge = Judge(ctx, session, lim.cell_timeout_s, deadline)
                    verdict = judge.judge(eid)
                    if not session.alive():
                        raise KernelDied("the kernel died")
                    judged.add(eid)
                    scores[eid] = verdict.points
                    if verdict.message:
                        messages[eid] = verdict.message
                    if verdict.output:
                        outputs[eid] = verdict.output[-4000:]
                    if verdict.in_kernel:
                        in_kernel.append(eid)
                break  # the whole notebook ran
            except KernelDied as err:  # KernelTimedOut too: a cell that ignored the interrupt was killed
                timed_out = isinstance(err, KernelTimedOut)
                if status == "graded" or (status == "crashed" and timed_out):
                    status = "timed out" if timed_out else "crashed"
                tail = session.log_tail() if session else ""
                where = f"in {current}" if current else "in a set-up cell"
                problems.append(f"kernel {'killed' if timed_out else 'crashed'} {where}: {err}"
                                + (f" [{tail[-160:]}]" if tail and "sandbox" in tail else ""))
                if current is None or current in dropped:
                    break  # nothing to leave out: a restart would die the same way
                dropped.add(current)
                messages[current] = f"{'killed: over the time limit' if timed_out else 'crashed the kernel'} ({err})"
                if attempt < MAX_RESTARTS and deadline - time.monotonic() > 0:
                    problems.append(f"restarted without {current}")
            finally:
                if session is not None:
                    if session.output_bytes > lim.max_output_bytes and not any("printed" in p for p in problems):
                        problems.append(f"output over {lim.max_output_bytes} bytes was cut")
                    session.close()
        shutil.rmtree(scratch, ignore_errors=True)
        if status == "graded" and (plan.not_found or problems):
            status = "partially graded"
        if plan.not_found:
            problems.insert(0, f"no answer found for {', '.join(plan.not_found)}")
        for e in self.chapter.exercises:
            if status in ("timed out", "crashed") and e not in messages and scores[e] == 0:
                messages[e] = f"not graded: {status}"
        return StudentResult(student, status, sum(scores.values()), self.chapter.max_score, scores,
                             time.perf_counter() - start, "; ".join(problems)[:400], cand.shown, messages, outputs,
                             tuple(in_kernel), fp)


class Unsandboxed(SystemExit):
    """No OS sandbox on this host, and the instructor did not allow grading without one."""

    def __init__(self, why: str) -> None:
        fixes = "".join(f"\n  - {h}" for h in sandbox.hints())
        super().__init__(
            f"refusing to grade: student code cannot be sandboxed here ({why}).{fixes}\n"
            "Run `python -m autograder doctor` for what the sandbox needs. To grade anyway, with student code able to "
            "read and write anything this user can, pass --allow-unsandboxed.")
        self.why = why


def _load_result(path: Path) -> StudentResult | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["in_kernel"] = tuple(data.get("in_kernel", ()))
        return StudentResult(**data)
    except (OSError, ValueError, TypeError):
        return None


def grade(source: Path, chapter: str, out_dir: Path, root: Path = course.ROOT, *, roster: Path | None = None,
          workers: int | None = None, force: bool = False, cell_timeout_s: float | None = None,
          notebook_timeout_s: float | None = None, memory_mb: int | None = None,
          max_output_bytes: int | None = None, quiet: bool = False,
          nbgrader_dir: Path | None = None, allow_unsandboxed: bool = False) -> list[StudentResult]:
    """Grade every submission in ``source`` (folder or .zip) for ``chapter``; returns one result per student.

    The results also go into the nbgrader gradebook of ``nbgrader_dir`` (default ``out_dir/nbgrader``;
    see :mod:`autograder.gradebook`).
    """
    settings = course.settings(root)
    # Test cells run here: an exercise that still raises its stub fails its visible checks too.
    os.environ[exercise.STRICT_ENV] = "1"
    why_not = sandbox.available()
    if why_not and not allow_unsandboxed:
        raise Unsandboxed(why_not)
    if why_not:
        print("\n" + "!" * 78 + f"\n!! NOT SANDBOXED (--allow-unsandboxed): {why_not}\n"
              "!! Student code can read and write anything this user can.\n" + "!" * 78 + "\n",
              file=sys.stderr, flush=True)
    limits = Limits(cell_timeout_s=cell_timeout_s or settings.cell_timeout_s,
                    notebook_timeout_s=notebook_timeout_s or settings.notebook_timeout_s,
                    memory_mb=memory_mb if memory_mb is not None else settings.memory_mb,
                    max_output_bytes=max_output_bytes or settings.max_output_bytes,
                    sandbox=not why_not)
    workers = max(1, workers or os.cpu_count() or 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "feedback").mkdir(exist_ok=True)
    (out_dir / "results").mkdir(exist_ok=True)
    (out_dir / "logs").mkdir(exist_ok=True)
    grader = Grader(chapter, root, out_dir, limits, workers, force, quiet)
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        work = Path(tmp)
        mapping = submissions.collect(source, chapter, course.chapter_names(root), work, roster)
        if mapping.skipped:
            grader.say(f"{len(mapping.skipped)} entries of the export not unpacked (see submissions.csv):")
            for name, why in mapping.skipped[:20]:
                grader.say(f"  {name}: {why}")
        if not mapping.chosen and not mapping.missing:
            raise SystemExit(f"no notebooks found in {source}" +
                             (f" ({len(mapping.unmatched)} unmatched files)" if mapping.unmatched else ""))
        # nbgrader's course folder is made while the kernels run (it needs no results)
        from autograder import gradebook

        book_dir, book_error = Path(nbgrader_dir or out_dir / "nbgrader"), []

        def prepare_gradebook():
            try:
                gradebook.prepare(book_dir, chapter, root / "solutions")
            except Exception as err:  # noqa: BLE001 - reported after grading; results are on disk first
                book_error.append(err)

        book_thread = threading.Thread(target=prepare_gradebook, name="gradebook", daemon=True)
        book_thread.start()
        results: dict[str, StudentResult] = {}
        todo = []
        for student, cand in sorted(mapping.chosen.items()):
            previous = _load_result(out_dir / "results" / f"{_safe(student)}.json")
            if previous and not force and previous.fingerprint == grader.fingerprint(cand.path):
                results[student] = previous
                grader.say(f"{previous.line()}  (already graded; --force to redo)")
            else:
                todo.append((student, cand))
        grader.total = len(todo)
        if todo:
            grader.context()  # the instructor's run starts now, while the first kernels start
        start = time.perf_counter()
        if todo:
            grader.say(f"grading {len(todo)} notebooks of {chapter} with {min(workers, len(todo))} workers"
                       f" ({'sandboxed' if limits.sandbox else 'NOT sandboxed'}; limits: {limits.cell_timeout_s:.0f} s/cell,"
                       f" {limits.notebook_timeout_s:.0f} s/notebook, {limits.memory_mb} MB, {limits.max_output_bytes} B output)")
        with ThreadPoolExecutor(max_workers=min(workers, max(1, len(todo)))) as pool:
            futures = {pool.submit(grader.grade_one, s, c, work / "scratch" / f"s{i:04d}", out_dir / "logs"): s
                       for i, (s, c) in enumerate(todo)}
            for fut in as_completed(futures):
                student = futures[fut]
                try:
                    res = fut.result()
                except Exception as err:  # noqa: BLE001 - a grader bug for one student stops no one else
                    res = grader.empty(student, "crashed", f"grader error: {type(err).__name__}: {err}"[:300],
                                       mapping.chosen[student].shown)
                    res = StudentResult(**{**asdict(res), "fingerprint": ""})
                results[student] = res
                atomic_write(out_dir / "results" / f"{_safe(student)}.json", json.dumps(asdict(res), indent=1))
                write_feedback(out_dir / "feedback" / f"{_safe(student)}.html", chapter, res, grader.chapter)
                grader.done += 1
                elapsed = time.perf_counter() - start
                grader.say(f"[{grader.done:>3}/{grader.total}  {elapsed:6.0f} s] {res.line()}")
        for student in mapping.missing:
            results[student] = grader.empty(student, "missing", "no submission")
        for student, res in results.items():
            fb = out_dir / "feedback" / f"{_safe(student)}.html"
            if not fb.exists():
                write_feedback(fb, chapter, res, grader.chapter)
        ordered = [results[s] for s in sorted(results)]
        write_csv(out_dir / "grades.csv", chapter, ordered, list(grader.chapter.exercises))
        write_manifest(out_dir / "submissions.csv", mapping)
        book_thread.join()
        if book_error:
            raise RuntimeError(f"could not prepare the nbgrader gradebook in {book_dir}: {book_error[0]}") from book_error[0]
        db = gradebook.record(book_dir.resolve(), chapter, ordered)
        grader.say(f"nbgrader gradebook: {db} (`nbgrader export` / `nbgrader formgrader` in {db.parent})")
        if mapping.unmatched:
            grader.say(f"{len(mapping.unmatched)} files not graded (see submissions.csv):")
            for name, why in mapping.unmatched:
                grader.say(f"  {name}: {why}")
        if todo:
            secs = time.perf_counter() - start
            grader.say(f"{len(todo)} notebooks in {secs:.0f} s ({60 * len(todo) / max(secs, 1e-9):.1f} per minute)")
    return ordered
