"""``python -m autograder export``: the class's CSVs and LMS files written again from the gradebook, so that
the scores an instructor typed in formgrader reach what they upload.
"""

from __future__ import annotations

from pathlib import Path

from autograder import course, results
from autograder.grading import shards
from autograder.instructor import chapter_model
from autograder.intake import canvas_columns, rosters
from autograder.outputs.kept_scores import KeptScore, formgrader_scores, write


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
    ch = chapter_model.load_chapter(solution)
    assignment = lms_assignment
    if lms == "canvas" and roster is not None:
        choice = choose_assignment(roster, chapter, root, lms_assignment)
        assignment = choice.column
        if choice.note:
            print(choice.note)
    kept = formgrader_scores(course_dir, chapter, graded)
    write(out_dir, ch, graded, kept, None, rosters.read_roster(roster) if roster else None, lms, assignment)
    return kept


def choose_assignment(roster: Path, chapter: str, root: Path, given: str | None) -> canvas_columns.Choice:
    """canvas.csv's column for ``chapter`` (:func:`autograder.intake.canvas_columns.choose`, the title from its
    notebook)."""
    title = canvas_columns.chapter_title(root / "solutions" / f"{chapter}.ipynb")
    return canvas_columns.choose(roster, chapter, title, given)
