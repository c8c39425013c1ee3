"""Grading one student's notebook for one chapter, step by step.

1. :func:`screen`: is it a notebook of this chapter at all (else ``invalid notebook`` / ``wrong chapter``)?
2. :func:`read_answers`: where the student's answers are (:mod:`autograder.intake.answer_cells`; bounded, inside the
   notebook's time limit).
3. :func:`grade_group`, once per group of exercises that share a surface (what of scalelib they may use): a
   sandboxed kernel holding only that part of the library *replays* the notebook. For the instructor's set-up and
   demo cells it receives what they bound (recorded by the trusted context; no instructor cell runs in it); for
   each answer it runs the student's own cells; for each test of the group the judge runs the instructor's test in
   the grader, calling the student's functions in the kernel. A kernel that dies is replaced, without the exercise
   it died in, at most ``MAX_RESTARTS`` times. A group whose every answer cell the student left as released (the
   stub itself, :func:`autograder.intake.answer_cells.as_released`) is not run: those exercises are not answered.
4. :func:`finish`: the status and the result.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.instructor import chapter_model
from autograder.intake import answer_cells, collection
from autograder.judging.judge import Judge, Verdict
from autograder.judging.judging_errors import GraderStepFailed
from autograder.judging.trusted import TrustedContext
from autograder.kernel.kernel_errors import KernelDied, KernelStartFailed, KernelTimedOut
from autograder.kernel.pool import KernelPool
from autograder.kernel.session import KernelSession, Limits
from autograder.library.surface import Surface
from autograder.results import NOT_ANSWERED, SEVERITY, Status, StudentResult
from autograder.sandbox import watch
from autograder.sandbox.config import memory_breach

MAX_RESTARTS = 3  # a kernel that dies is replaced without the exercise it died in, at most this often per group
# The verdict of an answer cell left as released (answer_cells.as_released): the stub, which earns nothing; when every
# answer of a group is its stub, no kernel is started for the group.
NOT_RUN_STUB = f"{NOT_ANSWERED}: the answer cell is still the stub you were given"


@dataclass(frozen=True)
class Step:
    kind: str  # "bind" (demo cells first..stop-1), "answer" or "test"
    eid: str = ""
    first: int = 0
    stop: int = 0


@dataclass(frozen=True)
class Group:
    """Exercises judged in one kernel: they declare the same surface."""

    surface: Surface
    exercises: frozenset[str]
    stop: int  # the replay ends after this many steps (just after the group's last test)
    withheld: frozenset[tuple[str, str]] = frozenset()  # what its tests withhold: never sent with an object's class


def replay_steps(chapter: chapter_model.Chapter) -> list[Step]:
    """The chapter as a kernel replays it: runs of set-up/demo cells become one "bind" step each."""
    steps: list[Step] = []
    for index, (kind, _, eid) in enumerate(chapter.cells):
        if kind in ("setup", "context"):
            if steps and steps[-1].kind == "bind" and steps[-1].stop == index:
                steps[-1] = Step("bind", first=steps[-1].first, stop=index + 1)
            else:
                steps.append(Step("bind", first=index, stop=index + 1))
        else:
            steps.append(Step(kind, eid, first=index, stop=index + 1))
    return steps


def groups(chapter: chapter_model.Chapter, surfaces: dict[str, Surface], steps: list[Step]) -> list[Group]:
    """Exercises grouped by surface (``surfaces``: exercise id -> its surface), in the order of their first test."""
    by_key: dict[str, set[str]] = {}
    for eid in chapter.exercises:
        by_key.setdefault(surfaces[eid].key, set()).add(eid)
    out = []
    for members in by_key.values():
        last = max(i for i, s in enumerate(steps) if s.kind == "test" and s.eid in members)
        withheld = frozenset().union(*(chapter.exercises[e].withholds for e in members))
        out.append(Group(surfaces[next(iter(members))], frozenset(members), last + 1, withheld))
    order = {s.eid: i for i, s in enumerate(steps) if s.kind == "test"}
    return sorted(out, key=lambda g: min(order[e] for e in g.exercises))


@dataclass
class Shared:
    """What every student's grading in a run shares (built once per run)."""

    chapter: chapter_model.Chapter
    context: TrustedContext
    steps: list[Step]
    groups: list[Group]
    pool: KernelPool
    limits: Limits
    logs: Path
    open_groups: list[Group] = field(default_factory=list)  # all of scalelib: see grade(unrestricted=...)
    stubs: dict[str, str] = field(default_factory=dict)  # exercise id -> its released stub (see answer_cells)


@dataclass
class Outcome:
    """One student's grading so far."""

    exercises: list[str]
    status: Status = Status.GRADED
    scores: dict[str, float] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    judged: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)  # their answer or test killed a kernel: left out after that
    slow: set[str] = field(default_factory=set)  # their answer cell ran out of time: only rerun where judged

    def note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def worsen(self, status: Status) -> None:
        if SEVERITY.get(status, 0) >= SEVERITY.get(self.status, 0):
            self.status = status

    def record(self, eid: str, verdict: Verdict) -> None:
        self.judged.add(eid)
        self.scores[eid] = verdict.points
        if verdict.message:
            self.messages[eid] = verdict.message
        if verdict.output:
            self.outputs[eid] = verdict.output[-4000:]
        if verdict.instructor_error:
            self.note(f"{eid} could not be judged (the instructor's test is at fault; tell them)")




def screen(chapter_name: str, student: str, cand: collection.Candidate, max_score: float,
           exercises: list[str], fp: str) -> StudentResult | None:
    """A result straight away for a file that is not a notebook of this chapter, else None."""
    def empty(status: Status, detail: str) -> StudentResult:
        return StudentResult(student, status, 0.0, max_score, dict.fromkeys(exercises, 0.0), 0.0, detail,
                             cand.shown, fingerprint=fp)

    if cand.invalid:
        return empty(Status.INVALID, cand.invalid)
    if cand.chapter not in (None, chapter_name):
        return empty(Status.WRONG_CHAPTER, f"this is {cand.chapter} (from its {cand.chapter_from})")
    return None


def read_answers(chapter: chapter_model.Chapter, cand: collection.Candidate, deadline: float) -> answer_cells.Plan:
    """The student's answer cells (raises answer_cells.AnswersTimeout past ``deadline``)."""
    nb = json.loads(cand.path.read_bytes().decode("utf-8"))
    return answer_cells.plan(nb["cells"], chapter, deadline)


def _wait_for_context(shared: Shared, cells: int, deadline: float) -> None:
    """Wait until the trusted context has run the chapter's first ``cells`` cells."""
    if not shared.context.wait_for(cells, deadline - time.monotonic()):
        raise TimeoutError
    if shared.context.error is not None:
        raise RuntimeError(f"the instructor's notebook failed in the grader: {shared.context.error!r}")


def _close(session: KernelSession, student_log: Path) -> None:
    session.close()
    with contextlib.suppress(OSError):
        with open(student_log, "ab") as out:
            out.write(Path(session.log_path).read_bytes()[-200_000:])
        Path(session.log_path).unlink()
    shutil.rmtree(session.scratch, ignore_errors=True)


def _replay(shared: Shared, group: Group, plan: answer_cells.Plan, out: Outcome, session: KernelSession,
            deadline: float, blame: list[str | None]) -> bool:
    """Run the group's steps in ``session``; False when the notebook's time ran out. ``blame[0]`` says which
    exercise's code ran last (a kernel that dies is blamed on it)."""
    lim = shared.limits
    judge = Judge(shared.context, session, group.surface, lim.cell_timeout_s, deadline, group.withheld)
    for step in shared.steps[: group.stop]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if step.kind == "bind":
            _wait_for_context(shared, step.stop, deadline)
            payload, shipped = shared.context.bindings_for(group.surface, step.first, step.stop, group.withheld)
            judge.shipper.sent |= shipped
            path = session.put_file(payload)
            try:
                run = session.run(f"__grader__.bind({path!r})", timeout=min(lim.cell_timeout_s, remaining),
                                  silent=True)
            finally:
                session.remove_file(path)
            if not run.ok and blame[0] is None:
                # No code of the student's has run in this kernel: the grader's own step failed (a machine too
                # loaded to unpickle the set-up's values in time, say). A kernel missing those values would lose
                # the student points for nothing, so this is a grader error: grade_student is run once more.
                raise GraderStepFailed(f"binding the set-up's values in a fresh kernel failed ({run.error[:120]})")
            if not run.ok:
                out.note(f"the grader's helper failed in your kernel after {blame[0]} ran ({run.error[:120]})")
        elif step.kind == "answer":
            eid = step.eid
            if eid in out.dropped or eid not in plan.answers or (eid in out.slow and eid not in group.exercises):
                continue
            blame[0] = eid
            for cell in [*plan.helpers.get(eid, []), plan.answers[eid]]:
                run = session.run(cell, timeout=min(lim.cell_timeout_s, remaining))
                if run.timed_out:
                    out.slow.add(eid)
                    out.note(f"answer cell of {eid} timed out ({lim.cell_timeout_s:.0f} s) and was interrupted")
                if run.output_capped:
                    out.note(f"answer cell of {eid} printed more than {lim.max_output_bytes} bytes")
        elif step.eid in group.exercises and step.eid not in out.judged | out.dropped and step.eid in plan.answers:
            _wait_for_context(shared, step.first + 1, deadline)
            blame[0] = step.eid
            verdict = judge.judge(step.eid)
            if not session.alive():
                raise KernelDied(session.death())
            out.record(step.eid, verdict)
        memory_kills(session, out, blame[0], lim.memory_mb)
    return True


def _launcher_lines(log_tail: str) -> str:
    """What the sandbox's launcher itself said at the end of a kernel's log: its lines start with ``sandbox:``;
    every line the kernel's processes wrote is marked :data:`watch.KERNEL_LINE` by the launcher, so
    student text never passes for the sandbox's verdict (the log keeps it, marked as the kernel's)."""
    return "; ".join(line.strip() for line in log_tail.splitlines() if line.startswith("sandbox:"))


def _kernel_last_line(log_tail: str) -> str:
    """The last non-empty line the kernel's own processes wrote to their stderr (student text: the row quotes it
    as such, e.g. a 'Fatal Python error' before a crash)."""
    mine = [line[len(watch.KERNEL_LINE):].strip() for line in log_tail.splitlines()
            if line.startswith(watch.KERNEL_LINE) and line[len(watch.KERNEL_LINE):].strip()]
    return mine[-1] if mine else ""


def memory_kills(session: KernelSession, out: Outcome, culprit: str | None, memory_mb: int) -> None:
    """Say in the row when the memory cgroup's OOM killer stopped a process of the kernel's (a child the student
    started: the kernel itself goes on, the child's work is lost)."""
    n = session.new_oom_kills()
    if n:
        what = f"{n} process{'es' if n > 1 else ''}" + (f" started in {culprit}" if culprit else "")
        out.note(f"{what} stopped: {memory_breach(memory_mb)}")


def grade_group(shared: Shared, group: Group, plan: answer_cells.Plan, out: Outcome, deadline: float,
                student_log: Path) -> None:
    """Judge the exercises of ``group`` in a kernel of their own, replacing it when it dies."""
    start_failures = 0
    for attempt in range(MAX_RESTARTS + 1):
        session = None
        blame: list[str | None] = [None]
        try:
            session = shared.pool.take(group.surface.key)
            if not _replay(shared, group, plan, out, session, deadline, blame):
                out.worsen(Status.TIMED_OUT)
                out.note(f"notebook time limit ({shared.limits.notebook_timeout_s:.0f} s) reached")
            return
        except TimeoutError:
            out.worsen(Status.TIMED_OUT)
            out.note(f"notebook time limit ({shared.limits.notebook_timeout_s:.0f} s) reached")
            return
        except KernelStartFailed as err:  # from take: no kernel, nothing of the student's ran
            with contextlib.suppress(OSError), open(student_log, "a") as log:
                log.write(f"grader: could not start a kernel for {', '.join(sorted(group.exercises))}: {err}\n")
            start_failures += 1
            if start_failures < 2 and deadline > time.monotonic():
                continue  # once more: a kernel that failed to start says nothing about this student
            out.worsen(Status.CRASHED)
            out.note(f"the grader could not start a kernel (not your code; tell your instructor): {err}"[:300])
            return
        except KernelDied as err:
            timed_out = isinstance(err, KernelTimedOut)
            culprit = blame[0]
            out.worsen(Status.TIMED_OUT if timed_out else Status.CRASHED)
            tail = session.log_tail() if session else ""
            where = f"in {culprit}" if culprit else "before any of your code ran"
            said, theirs = _launcher_lines(tail), _kernel_last_line(tail)
            out.note(f"kernel {'killed' if timed_out else 'crashed'} {where}: {err}"
                     + (f" [{said[-160:]}]" if said and said not in str(err) else "")
                     + (f" [last line your kernel wrote to its stderr: {theirs[-160:]}]" if theirs else ""))
            if culprit is None or culprit in out.dropped:
                return  # nothing to leave out: another kernel would die the same way
            out.dropped.add(culprit)
            out.messages[culprit] = f"{'killed: over the time limit' if timed_out else 'crashed the kernel'} ({err})"
            if attempt < MAX_RESTARTS and deadline > time.monotonic():
                out.note(f"restarted without {culprit}")
        finally:
            if session is not None:
                cap = shared.limits.max_output_bytes
                if session.output_bytes > cap and not any("printed" in p for p in out.problems):
                    out.note(f"output over {cap} bytes was cut")
                _close(session, student_log)


def finish(student: str, cand: collection.Candidate, plan: answer_cells.Plan, out: Outcome, max_score: float,
           seconds: float, fp: str) -> StudentResult:
    status = out.status
    problems = list(out.problems)
    if plan.not_found:
        problems.insert(0, f"no answer found for {', '.join(plan.not_found)}")
    if status is Status.GRADED and problems:
        status = Status.PARTIAL
    scores = {e: out.scores.get(e, 0.0) for e in out.exercises}
    messages = dict(out.messages)
    for e in plan.not_found:
        messages.setdefault(e, "answer not found in the notebook")
    for e in out.exercises:
        if status in (Status.TIMED_OUT, Status.CRASHED) and e not in messages and scores[e] == 0:
            messages[e] = f"not graded: {status}"
    return StudentResult(student, status, sum(scores.values()), max_score, scores, seconds, "; ".join(problems)[:400],
                         cand.shown, messages, out.outputs, fp)


def grade_student(shared: Shared, student: str, cand: collection.Candidate, fp: str, log: Path,
                  unrestricted: bool = False) -> StudentResult:
    """All steps for one student.

    grade.py told the pool that each group of each student would take a kernel (``pool.expect``): a group that
    does not (an invalid notebook, none of the group's answers in it, the time limit reached first) is
    forgotten, so the pool does not start a kernel that no one takes."""
    start = time.perf_counter()
    deadline = time.monotonic() + shared.limits.notebook_timeout_s  # reading the notebook counts too
    chapter = shared.chapter
    exercises = list(chapter.exercises)
    groups = shared.open_groups if unrestricted else shared.groups
    asked = 0  # groups looked at: each took its kernel, or was forgotten
    try:
        early = screen(chapter.name, student, cand, chapter.max_score, exercises, fp)
        if early is not None:
            return early
        try:
            plan = read_answers(chapter, cand, deadline)
        except answer_cells.AnswersTimeout as err:
            return StudentResult(student, Status.TIMED_OUT, 0.0, chapter.max_score, dict.fromkeys(exercises, 0.0),
                                 time.perf_counter() - start, str(err), cand.shown, fingerprint=fp)
        if not (set(plan.answers) & set(chapter.exercises)) and cand.chapter is None:
            return StudentResult(student, Status.WRONG_CHAPTER, 0.0, chapter.max_score,
                                 dict.fromkeys(exercises, 0.0), 0.0, "none of this chapter's answers are in it",
                                 cand.shown, fingerprint=fp)
        out = Outcome(exercises, problems=list(plan.problems))
        for group in groups:
            if time.monotonic() >= deadline:
                out.worsen(Status.TIMED_OUT)
                out.note(f"notebook time limit ({shared.limits.notebook_timeout_s:.0f} s) reached")
                break
            asked += 1
            answered = group.exercises & set(plan.answers)
            if answered and not all(answer_cells.as_released(eid, plan, shared.stubs) for eid in answered):
                grade_group(shared, group, plan, out, deadline, log)
                continue
            # nothing of the student's to run (every answer is its stub, or none is in the notebook): no kernel
            for eid in sorted(answered):
                out.record(eid, Verdict(0.0, chapter.exercises[eid].points, False, NOT_RUN_STUB))
            shared.pool.forget(group.surface.key)
        return finish(student, cand, plan, out, chapter.max_score, time.perf_counter() - start, fp)
    finally:
        for group in groups[asked:]:
            shared.pool.forget(group.surface.key)
