"""The class's exports carry the scores the instructor sees in formgrader.

An instructor may type a manual score, or extra credit, for a test cell in formgrader; the gradebook keeps it through
every re-grade (:func:`autograder.outputs.gradebook.record` sets only the automatic score). nbgrader scores a cell by
its manual score when one is set, else by its automatic one, plus its extra credit (``nbgrader.api.Grade.score``), and
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

from autograder.instructor import chapter_model
from autograder.intake import collection
from autograder.outputs import gradebook, tables
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


def write(out_dir: Path, ch: chapter_model.Chapter, graded: list[StudentResult], kept: list[KeptScore],
          mapping: collection.Mapping | None, roster: list[dict[str, str]] | None, lms: str | None,
          assignment: str | None, manifest: bytes | None = None) -> None:
    """Every whole-class file (:func:`autograder.outputs.tables.write_class`) and, for ``lms="gradescope"``,
    Gradescope's results, all with ``kept``'s scores in place of the grader's."""
    from autograder.outputs import lms_results

    scores = shown(graded, kept)
    manual = {(k.student, k.exercise): k.auto_points for k in kept}
    tables.write_class(out_dir, ch, scores, mapping, roster, lms, assignment, manifest, manual=manual)
    if lms == "gradescope":
        lms_results.write_gradescope(out_dir, scores, ch, manual=manual)
