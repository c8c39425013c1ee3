"""The class's exports carry the scores the instructor sees in formgrader.

An instructor may type a manual score, or extra credit, for a test cell in formgrader; the gradebook keeps it through
every re-grade (:func:`autograder.gradebook.record` sets only the automatic score). nbgrader scores a cell by its
manual score when one is set, else by its automatic one, plus its extra credit (``nbgrader.api.Grade.score``), and
formgrader shows that. So after the gradebook is written (``grade``, ``merge``) or whenever the instructor asks
(``python -m autograder export``), each student's cells are read back from it (:func:`formgrader_scores`), and
``grades.csv``, ``grades_long.csv``, ``canvas.csv`` and ``gradescope/`` are written with those scores: the same
columns, an exercise's points and the total as formgrader has them, and in ``grades_long.csv`` a ``scored_by``
column (``manual`` or ``autograder``) beside ``auto_points``, what the grader gave. The console lists every such
cell. ``results/`` and the feedback pages keep what the grader found: they are its own record (a shard's digests
cover them) and say why the checks gave what they gave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autograder import align, canvas, course, gradebook, report, results, shards, submissions
from autograder.results import Status, StudentResult
from autograder.safe_text import printable


@dataclass(frozen=True)
class KeptScore:
    """One test cell whose score in formgrader is not simply the grader's."""

    student: str  # the grader's id (grades.csv's), not the gradebook's (gradebook.nbgrader_id)
    exercise: str
    auto_points: float  # what the grader gave
    points: float  # what formgrader shows, and the exports carry
    manual_points: float | None  # the manual score typed in formgrader (None: only extra credit)
    extra_credit: float = 0.0

    def line(self) -> str:
        """``student, exercise: auto -> shown (how)``, the student's id escaped for the console."""
        how = [] if self.manual_points is None else [f"manual score {self.manual_points:g}"]
        how += [f"extra credit {self.extra_credit:g}"] if self.extra_credit else []
        change = f"{self.auto_points:g} -> {self.points:g}"
        return f"{printable(self.student)}, {self.exercise}: {change} ({' + '.join(how)})"


def formgrader_scores(course_dir: Path, chapter: str, graded: Iterable[StudentResult]) -> list[KeptScore]:
    """The cells of ``graded``'s students (but missing ones: no submission of theirs was recorded) that hold a manual
    score or extra credit in the gradebook of ``course_dir``, by student in the given order, then by exercise in
    the chapter's order. Reads nbgrader's own ``Grade.score`` for what formgrader shows."""
    from nbgrader.api import Gradebook, MissingEntry

    kept: list[KeptScore] = []
    with Gradebook(gradebook.db_url(course_dir)) as gb:
        for r in graded:
            if r.status == Status.MISSING:
                continue
            try:
                sub = gb.find_submission(chapter, gradebook.nbgrader_id(r.student))
            except MissingEntry:
                continue
            cells = {g.name: g for nb in sub.notebooks for g in nb.grades}
            for eid, auto in r.exercises.items():
                g = cells.get(eid)
                if g is None or (g.manual_score is None and not g.extra_credit):
                    continue
                kept.append(KeptScore(r.student, eid, float(auto), float(g.score),
                                      None if g.manual_score is None else float(g.manual_score),
                                      float(g.extra_credit or 0.0)))
    return kept


def shown(graded: list[StudentResult], kept: list[KeptScore]) -> list[StudentResult]:
    """``graded`` with each kept cell's points as formgrader shows them, and each total their sum."""
    points = {(k.student, k.exercise): k.points for k in kept}
    out = []
    for r in graded:
        mine = {e: points[(r.student, e)] for e in r.exercises if (r.student, e) in points}
        if mine:
            exercises = {**r.exercises, **mine}
            r = dataclasses.replace(r, exercises=exercises, score=sum(exercises.values()))
        out.append(r)
    return out


def console_lines(kept: list[KeptScore]) -> list[str]:
    """What the console says about ``kept``: nothing when it is empty, else a heading and one line per cell."""
    if not kept:
        return []
    n = len(kept)
    return [f"kept {n} manual score{'' if n == 1 else 's'} from formgrader (the class's CSVs and LMS files carry "
            f"{'it' if n == 1 else 'them'}; results/ and the feedback pages keep the grader's own):",
            *(f"  {k.line()}" for k in kept)]


def write(out_dir: Path, ch: align.Chapter, graded: list[StudentResult], kept: list[KeptScore],
          mapping: submissions.Mapping | None, roster: list[dict[str, str]] | None, lms: str | None,
          assignment: str | None, manifest: bytes | None = None) -> None:
    """Every whole-class file (:func:`autograder.report.write_class`) and, for ``lms="gradescope"``, Gradescope's
    results, all with ``kept``'s scores in place of the grader's."""
    from autograder import lms as platforms

    scores = shown(graded, kept)
    manual = {(k.student, k.exercise): k.auto_points for k in kept}
    report.write_class(out_dir, ch, scores, mapping, roster, lms, assignment, manifest, manual=manual)
    if lms == "gradescope":
        platforms.write_gradescope(out_dir, scores, ch, manual=manual)


def rewrite(out_dir: Path, root: Path = course.ROOT, *, roster: Path | None = None, lms: str | None = None,
            lms_assignment: str | None = None, nbgrader_dir: Path | None = None) -> list[KeptScore]:
    """``python -m autograder export``: the class files of a finished ``grade`` or ``merge`` in ``out_dir`` written
    again from its ``results/`` and the gradebook's scores as they are now (a score typed in formgrader after
    grading), without running any student code. Refuses (SystemExit) a folder that is no finished class, a roster
    other than the one it was graded with, and a chapter whose instructor notebook changed since."""
    marker = shards.read(out_dir)
    if isinstance(marker, str):
        raise SystemExit(f"nothing to export: {marker}; give the --out of a `grade` or `merge` run")
    k, n = marker.marker.shard
    if n > 1:
        raise SystemExit(f"{out_dir} is shard {k}/{n} of a class, which has no gradebook: run `python -m autograder "
                         "merge`, then export its --out")
    if not marker.complete:
        raise SystemExit(f"{out_dir}: its grade or merge did not finish (or merged a partial class): run it again "
                         "(it writes formgrader's scores too)")
    chapter = marker.marker.chapter
    solution = root / "solutions" / f"{chapter}.ipynb"
    if shards.sha256_file(solution) != marker.marker.solution_hash:
        raise SystemExit(f"{solution} changed since {out_dir} was graded: grade the class again")
    used = marker.marker.roster_hash
    if (shards.sha256_file(roster) if roster else "") != used:
        how = "without a roster: pass none" if not used else (
            "with a roster: pass it (--roster)" if roster is None else "with another roster: pass that one")
        raise SystemExit(f"{out_dir} was graded {how}; the roster decides who is in the class")
    if lms == "canvas" and roster is None:
        raise SystemExit("--lms canvas needs --roster (the one the class was graded with)")
    course_dir = Path(nbgrader_dir or out_dir / "nbgrader")
    if not (course_dir / "gradebook.db").is_file():
        raise SystemExit(f"no gradebook.db in {course_dir}: give the nbgrader course folder the class was graded "
                         "into (--nbgrader-course)")
    graded = []
    for student in marker.students:
        path = out_dir / shards.student_files(student)[0]
        r = results.load(path)
        if r is None:
            raise SystemExit(f"{path} (the result of {student!r}) is missing or unreadable: grade the class again")
        graded.append(r)
    ch = align.load_chapter(solution)
    assignment = lms_assignment
    if lms == "canvas" and roster is not None:
        choice = choose_assignment(roster, chapter, root, lms_assignment)
        assignment = choice.column
        if choice.note:
            print(choice.note)
    kept = formgrader_scores(course_dir, chapter, graded)
    write(out_dir, ch, graded, kept, None, submissions.read_roster(roster) if roster else None, lms, assignment)
    return kept


def choose_assignment(roster: Path, chapter: str, root: Path, given: str | None) -> canvas.Choice:
    """canvas.csv's column for ``chapter`` (:func:`autograder.canvas.choose`, the title from its notebook)."""
    return canvas.choose(roster, chapter, canvas.chapter_title(root / "solutions" / f"{chapter}.ipynb"), given)
