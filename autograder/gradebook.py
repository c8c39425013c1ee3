"""Write grading results into an nbgrader gradebook, so formgrader and ``nbgrader export`` see them.

Our grader keeps its own record (``results/*.json``, ``grades.csv``); this module mirrors it into the
database nbgrader's tools read. The course directory (default ``<out>/nbgrader``) gets the chapter as an
nbgrader assignment (``source/`` and ``release/`` through ``generate_assignment``, the grade cells in
``gradebook.db``) and a ``nbgrader_config.py`` pointing at that database, so an instructor can run

    cd grading-output/nbgrader && nbgrader export      # or: nbgrader formgrader

Per student: a ``Student`` row (roster students without a file too, so ``export`` gives them 0), a
submission, and one ``Grade`` per test cell with ``auto_score`` set to our points. Like nbgrader's own
autograde, a manual score an instructor already entered is kept and the cell is flagged for review. The
reason an exercise lost its points goes into the comment of its answer cell. Re-running updates the rows
in place; nothing here runs student code.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from autograder import nbgrader_course
from autograder.course import SOLUTIONS

CONFIG = '''# Written by `python -m autograder grade`: the nbgrader course these grades live in.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = {db_url!r}
c.Exchange.root = {exchange!r}
'''


def db_url(course_dir: Path) -> str:
    return f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"


def _alembic_head_in_process() -> None:
    """nbgrader asks a new database's schema version from an ``alembic heads`` subprocess (~2.5 s of CPU
    for one string); read the same revision from nbgrader's migration scripts in this process instead."""
    import nbgrader.api
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    if getattr(nbgrader.api.get_alembic_version, "_in_process", False):
        return
    cfg = Config()
    cfg.set_main_option("script_location", dbutil.ALEMBIC_DIR)
    head = ScriptDirectory.from_config(cfg).get_current_head()

    def get_alembic_version() -> str | None:
        return head

    setattr(get_alembic_version, "_in_process", True)  # noqa: B010 - a marker on a function object
    nbgrader.api.get_alembic_version = get_alembic_version


def prepare(course_dir: Path, chapter: str, solutions: Path = SOLUTIONS) -> Path:
    """The course folder, its config and the chapter as an assignment (no student rows yet).

    Runs no student code; the grader starts it in a thread of its own while the kernels work.
    """
    _alembic_head_in_process()
    course_dir = Path(course_dir).resolve()
    course_dir.mkdir(parents=True, exist_ok=True)
    (course_dir / "nbgrader_config.py").write_text(
        CONFIG.format(root=str(course_dir), db_url=db_url(course_dir), exchange=str(course_dir / "exchange")),
        encoding="utf-8")
    nbgrader_course.generate(course_dir, chapter, solutions)  # the assignment and its grade cells
    return course_dir


def write(course_dir: Path, chapter: str, results: Iterable, solutions: Path = SOLUTIONS) -> Path:
    """Mirror ``results`` (``grade.StudentResult``s of one chapter) into ``course_dir/gradebook.db``."""
    return record(prepare(course_dir, chapter, solutions), chapter, results)


def record(course_dir: Path, chapter: str, results: Iterable) -> Path:
    """Student rows into a course folder :func:`prepare` made."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url(course_dir)) as gb:
        assignment = gb.find_assignment(chapter)
        grade_cells = {c.name for nb in assignment.notebooks for c in nb.grade_cells}
        solution_cells = {c.name for nb in assignment.notebooks for c in nb.solution_cells}
        for r in results:
            gb.update_or_create_student(r.student)
            if r.status == "missing":
                continue
            try:
                gb.find_submission(chapter, r.student)
            except MissingEntry:
                with gb.db.no_autoflush:  # nbgrader builds the rows before adding them (SQLAlchemy warns otherwise)
                    gb.add_submission(chapter, r.student)
            for eid, points in r.exercises.items():
                if eid not in grade_cells:
                    raise ValueError(f"exercise {eid} has no grade cell in nbgrader's copy of {chapter}; "
                                     "re-run `python -m autograder release` and grade again")
                g = gb.find_grade(eid, chapter, chapter, r.student)
                g.auto_score = float(points)
                g.needs_manual_grade = g.manual_score is not None
                answer = f"{eid}-answer"
                if answer in solution_cells:
                    c = gb.find_comment(answer, chapter, chapter, r.student)
                    why = r.messages.get(eid, "")
                    if r.status not in ("graded", "partially graded"):
                        why = why if why else f"{r.status}: {r.detail}"
                    c.auto_comment = why[:2000] or None
        gb.db.commit()
    return course_dir / "gradebook.db"
