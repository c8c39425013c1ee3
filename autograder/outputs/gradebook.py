"""Write grading results into an nbgrader course folder, so formgrader and ``nbgrader export`` show them.

Our grader keeps its own record (``results/*.json``, ``grades.csv``); this module mirrors it into what nbgrader's
tools read. The course folder (default ``<out>/nbgrader``) gets the chapter as an nbgrader assignment
(``source/`` and ``release/`` through ``generate_assignment``, the grade cells in ``gradebook.db``), a writable
exchange folder, and a ``nbgrader_config.py`` naming them all, so an instructor runs, inside that folder,

    nbgrader export                 # gradebook.db to grades.csv
    jupyter lab                     # formgrader: the Nbgrader menu, or /formgrader (`jupyter server` serves it too)

Per student: a ``Student`` row with the roster's name and email (roster students without a file too, so
``export`` gives them 0), and, for each submission, nbgrader's own layout: the notebook as submitted in
``submitted/<student>/<chapter>/`` and a graded copy in ``autograded/<student>/<chapter>/`` (the released
notebook, its cells' ids and nbgrader metadata as in the gradebook, each answer cell holding the student's code
and each test cell's output saying what our grader found), both with the submission's ``timestamp.txt``; then
one ``Grade`` per test cell with ``auto_score`` set to our points. Like nbgrader's own autograde, a manual score an
instructor already entered is kept and the cell is flagged for review. The reason an exercise lost its points goes
into the comment of its answer cell. Re-running updates the rows in place; nothing here runs student code. The
graded copy holds only what the student's feedback page shows: the visible part of each test, never the hidden one.
The folder's config stops nbgrader's own autograde (formgrader's Autograde button, ``nbgrader autograde``) with a
message that points to ``python -m autograder grade``: it would run student code unsandboxed and replace these
graded copies. Its ``nbgrader export`` writes nbgrader's CSV through :mod:`autograder.outputs.nbgrader_export`, quoted
and neutralised as the grader's own CSVs are. What a student's code printed or raised reaches the graded copies with
control and format characters escaped (:func:`autograder.safe_text.printable_lines`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autograder import atomic_files, safe_text
from autograder.course import SOLUTIONS, answer_id, exercise_of_answer
from autograder.instructor import chapter_model, nbgrader_course
from autograder.intake import answer_cells, file_names

if TYPE_CHECKING:
    from autograder.results import StudentResult

COURSE_ID = "scalelib-course"
CONFIG = '''# Written by `python -m autograder grade`: the nbgrader course these grades live in.
# Start formgrader here: `jupyter lab` (Nbgrader menu > Formgrader) or `jupyter server`, then open /formgrader.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.db_url = {db_url!r}
c.Exchange.root = {exchange!r}  # inside the course folder, so it exists and is writable

# nbgrader's own autograde (formgrader's Autograde button, `nbgrader autograde`) would run each student's
# notebook as you, outside the course's sandbox. It stops here, before it touches a file: its converter builds
# this exporter before it clears a single graded folder.
from nbconvert.exporters import NotebookExporter  # noqa: E402


class GradeInTheSandbox(NotebookExporter):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "This course does not let nbgrader run student code.\\n"
            "nbgrader's autograde would run it as you, outside the course's sandbox.\\n"
            "Grade with: python -m autograder grade SUBMISSIONS --chapter CHAPTER\\n"
            "(see the course README); its grades land in this folder.\\n"
            "Nothing here was changed.")


c.Autograde.exporter_class = GradeInTheSandbox

# `nbgrader export` writes its CSV with the course's exporter: nbgrader's own quotes nothing, so an id, name or
# email such as `=1+1` or `a;b,c` would be a formula or shift the columns. It is named by its import path, not
# imported here: were it missing, an import here would fail this whole file, which nbgrader then skips with a
# logged error (and with it the guard above). Named, a python that cannot import it stops the export with an
# error and writes nothing. A python without `autograder` gets the one that wrote this folder.
import importlib.util  # noqa: E402
import sys  # noqa: E402

if importlib.util.find_spec("autograder") is None:
    sys.path.append({grader_root!r})
c.ExportApp.plugin_class = "autograder.outputs.nbgrader_export.SafeCsvExportPlugin"
'''


GRADER_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds this grader's `autograder` package


def db_url(course_dir: Path) -> str:
    return f"sqlite:///{Path(course_dir).resolve() / 'gradebook.db'}"


def prepare(course_dir: Path, chapter: str, solutions: Path = SOLUTIONS) -> Path:
    """The course folder, its config and the chapter as an assignment (no student rows yet).

    Runs no student code; the grader starts it in a thread of its own while the kernels work.
    """
    nbgrader_course.alembic_head_in_process()
    course_dir = Path(course_dir).resolve()
    course_dir.mkdir(parents=True, exist_ok=True)
    (course_dir / "exchange").mkdir(exist_ok=True)
    (course_dir / "nbgrader_config.py").write_text(
        CONFIG.format(root=str(course_dir), course_id=COURSE_ID, db_url=db_url(course_dir),
                      exchange=str(course_dir / "exchange"), grader_root=str(GRADER_ROOT)),
        encoding="utf-8")
    nbgrader_course.generate(course_dir, chapter, solutions)  # the assignment and its grade cells
    return course_dir


def write(course_dir: Path, chapter: str, results: Iterable, solutions: Path = SOLUTIONS,
          roster: list[dict[str, str]] | None = None,
          submitted: Mapping[str, tuple[Path, float]] | None = None) -> Path:
    """Mirror ``results`` (``grade.StudentResult``s of one chapter) into ``course_dir``: see :func:`record`."""
    return record(prepare(course_dir, chapter, solutions), chapter, results, roster, submitted, solutions)


def split_name(name: str) -> tuple[str, str]:
    """(first, last) from a roster name: "Last, First" as Canvas writes it, else "First ... Last"."""
    name = " ".join(name.split())
    if "," in name:
        last, first = (part.strip() for part in name.split(",", 1))
        return first, last
    first, _, last = name.rpartition(" ")
    return (first, last) if first else ("", last)


# What formgrader's pages put into HTML and JavaScript as it is (its templates are not autoescaped: e.g.
# `var student_id = "{{ student_id }}";`) and what cannot be a folder name.
# Not here, on purpose: `,` `;` and a leading `=` `+` `-` `@` (a leading tab or CR is a control character, hashed
# anyway). They are harmless in formgrader's pages and in a folder name; what they broke was nbgrader's CSV export,
# fixed where it writes (the folder's exporter, autograder.outputs.nbgrader_export), which also covers the roster's
# names and emails that no id rule could reach. Hashing such ids would show formgrader `11~3f0a...` for a student who
# chose `=1+1`, and a course folder already graded under the kept id would get a second row for the same student beside
# the first (manual scores typed into the first would drop out of view).
_UNSAFE_ID = re.compile(r"[\"'`\\<>&/]")


def nbgrader_id(student: str) -> str:
    """The student's id in the nbgrader course: their own, unless it holds a character formgrader's pages would
    carry into their HTML or JavaScript unescaped (a quote, ``<``, ``>``, ``&``, a backslash, a backtick), a
    slash, a control or format character, or is ``.`` or ``..``. Such an id (chosen by a student when the file
    names give the ids) becomes :func:`autograder.intake.file_names.file_stem`'s ``<readable>~<hash>``, and so does one
    with a ``~``: a kept id never holds one and a hashed id always does, so two students never share a row.
    formgrader then shows the original id as the name. ``grades.csv`` keeps every id as it is."""
    if "~" in student or _unsafe(student):
        return file_names.file_stem(student)
    return student


def _unsafe(sid: str) -> bool:
    """Whether formgrader would carry ``sid`` into its pages unescaped, or it is no folder name of its own."""
    return bool(_UNSAFE_ID.search(sid)) or not sid.isprintable() or sid in ("", ".", "..")


def unsafe_ids(course_dir: Path) -> list[str]:
    """Student ids in the course folder's gradebook that :func:`nbgrader_id` would not keep for being unsafe: rows
    an earlier grader wrote (it used every id as it was). formgrader's pages would carry such an id into their HTML
    or JavaScript unescaped, so formgrader should not be opened while one is there (see :func:`forget`)."""
    if not (Path(course_dir) / "gradebook.db").exists():
        return []
    from nbgrader.api import Gradebook

    with Gradebook(db_url(course_dir)) as gb:
        return _unsafe_ids(gb)


def _unsafe_ids(gb: Any) -> list[str]:
    return sorted(s.id for s in gb.students if _unsafe(s.id))


def unsafe_ids_warning(course_dir: Path) -> str:
    """What to tell an instructor whose course folder holds :func:`unsafe_ids` ('' when it holds none)."""
    ids = unsafe_ids(course_dir)
    if not ids:
        return ""
    shown = ", ".join(safe_text.printable(repr(i)) for i in ids[:5])
    shown += f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return (f"WARNING: {course_dir / 'gradebook.db'} still holds {len(ids)} student rows written by an earlier grader "
            f"under ids that formgrader would put into its pages unescaped ({shown}); this grader writes those "
            "students under safe ids. Do not open formgrader on this folder until they are gone: "
            f"`python -m autograder forget-unsafe-ids {course_dir}` lists what they hold, and with --yes removes them.")


def forget(course_dir: Path, remove: bool) -> list[str]:
    """One line per :func:`unsafe_ids` row: the id (escaped), its submissions and how many manual scores they hold;
    with ``remove``, the rows and their submissions are deleted from the gradebook (nbgrader's ``remove_student``).
    Files under ``submitted/`` and ``autograded/`` stay; formgrader lists only what the gradebook holds."""
    lines: list[str] = []
    if not (Path(course_dir) / "gradebook.db").exists():
        return lines  # nothing to list; opening it would create one
    from nbgrader.api import Gradebook

    with Gradebook(db_url(course_dir)) as gb:
        for sid in _unsafe_ids(gb):
            student = gb.find_student(sid)
            held = sorted(sub.assignment.name for sub in student.submissions)
            manual = sum(g.manual_score is not None for sub in student.submissions for nb in sub.notebooks
                         for g in nb.grades)
            lines.append(f"{safe_text.printable(repr(sid))}: submissions of {', '.join(held) or 'nothing'}; "
                         f"{manual} manual scores" + ("; removed" if remove else ""))
            if remove:
                gb.remove_student(sid)
    return lines


def _student(gb: Any, student: str, row: dict[str, str] | None) -> str:
    """The student's row with what formgrader shows: the roster's name and email; a student off the roster keeps
    the name it has, else gets the id as last name (nbgrader shows a missing name as "None, None"). Names and
    email are stored as :func:`autograder.safe_text.printable` writes them (formgrader's pages show them; a
    bidirectional override or an escape sequence shows as its escape). Returns the row's id
    (:func:`nbgrader_id`)."""
    shown = safe_text.printable
    sid = nbgrader_id(student)
    if row is not None:
        first, last = split_name(row.get("name", ""))
        gb.update_or_create_student(sid, first_name=shown(first), last_name=shown(last or student),
                                    email=shown(row.get("email") or "") or None)
        return sid
    s = gb.update_or_create_student(sid)
    if s.last_name is None and s.first_name is None:
        s.first_name, s.last_name = "", shown(student)
    return sid


def timestamp_text(mtime: float) -> str:
    """A submission's time as nbgrader's timestamp.txt holds it (UTC)."""
    return datetime.fromtimestamp(mtime, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def record(course_dir: Path, chapter: str, results: Iterable, roster: list[dict[str, str]] | None = None,
           submitted: Mapping[str, tuple[Path, float]] | None = None, solutions: Path = SOLUTIONS) -> Path:
    """Student rows into a course folder :func:`prepare` made; with ``submitted`` (student -> the notebook graded
    and its time), that notebook under ``submitted/`` and a graded copy under ``autograded/``, where formgrader
    opens it."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import parse_utc

    results = list(results)
    rows = {r["student"]: r for r in roster or []}
    submitted = submitted or {}
    ch = chapter_model.load_chapter(solutions / f"{chapter}.ipynb") if submitted else None
    released = course_dir / "release" / chapter / f"{chapter}.ipynb"
    with Gradebook(db_url(course_dir)) as gb:
        assignment = gb.find_assignment(chapter)
        grade_cells = {c.name for nb in assignment.notebooks for c in nb.grade_cells}
        solution_cells = {c.name for nb in assignment.notebooks for c in nb.solution_cells}
        for r in results:
            sid = _student(gb, r.student, rows.get(r.student))
            if r.status == "missing":
                continue
            stamp = None
            if r.student in submitted and ch is not None:
                path, mtime = submitted[r.student]
                stamp = timestamp_text(mtime)
                _write_notebooks(course_dir, chapter, sid, r, ch, released, path, stamp)
            try:
                sub = gb.find_submission(chapter, sid)
            except MissingEntry:
                with gb.db.no_autoflush:  # nbgrader builds the rows before adding them (SQLAlchemy warns otherwise)
                    sub = gb.add_submission(chapter, sid)
            if stamp is not None:
                sub.timestamp = parse_utc(stamp)  # formgrader lists a submission whose times agree
            for eid, points in r.exercises.items():
                if eid not in grade_cells:
                    raise ValueError(f"exercise {eid} has no grade cell in nbgrader's copy of {chapter}; "
                                     "re-run `python -m autograder release` and grade again")
                g = gb.find_grade(eid, chapter, chapter, sid)
                g.auto_score = float(points)
                g.needs_manual_grade = g.manual_score is not None
                answer = answer_id(eid)
                if answer in solution_cells:
                    c = gb.find_comment(answer, chapter, chapter, sid)
                    # formgrader shows it as plain text, nbgrader's feedback as Markdown: nothing in it may act
                    c.auto_comment = safe_text.markdown_inert(_why(r, eid)[:2000]) or None
        gb.db.commit()
    return course_dir / "gradebook.db"


def _why(r: StudentResult, eid: str) -> str:
    why = r.messages.get(eid, "")
    if r.status not in ("graded", "partially graded"):
        why = why if why else f"{r.status}: {r.detail}"
    return why


def _write_notebooks(course_dir: Path, chapter: str, sid: str, r: StudentResult, ch: chapter_model.Chapter,
                     released: Path, path: Path, stamp: str) -> None:
    """submitted/<sid>/<chapter>/ (the file as graded) and autograded/<sid>/<chapter>/ (the graded copy); ``sid``
    (:func:`nbgrader_id`) is always one folder name of its own: never ``..``, never with a slash."""
    for kind in ("submitted", "autograded"):
        folder = course_dir / kind / sid / chapter
        folder.mkdir(parents=True, exist_ok=True)
        atomic_files.atomic_write(folder / "timestamp.txt", stamp + "\n")
    data = path.read_bytes()
    target = course_dir / "submitted" / sid / chapter / f"{chapter}.ipynb"
    target.write_bytes(data)
    atomic_files.atomic_write(course_dir / "autograded" / sid / chapter / f"{chapter}.ipynb",
                        json.dumps(graded_copy(json.loads(released.read_text(encoding="utf-8")), r, ch, data),
                                   indent=1, ensure_ascii=False) + "\n")


def graded_copy(released: dict, r: StudentResult, ch: chapter_model.Chapter, submission: bytes) -> dict:
    """The released notebook (cell ids and nbgrader metadata as the gradebook knows them) with the student's answer
    in each answer cell (their helper cells before it) and, on each test cell, what our grader found. Nothing
    runs; a submission that cannot be read leaves the stubs and says why. The student's code and what it printed
    or raised are shown with control and format characters escaped (:func:`autograder.safe_text.printable_lines`);
    the submitted/ copy keeps the file as it was."""
    nb = copy.deepcopy(released)
    try:
        cells = json.loads(submission.decode("utf-8")).get("cells", [])
        plan = answer_cells.plan(cells if isinstance(cells, list) else [], ch)
        unread = ""
    except (ValueError, UnicodeDecodeError, AttributeError, RecursionError, answer_cells.AnswersTimeout) as err:
        plan, unread = answer_cells.Plan(), f" (the notebook could not be read: {type(err).__name__})"
    detail = safe_text.markdown_literal(r.detail)  # may quote the student's kernel: formgrader renders it as HTML
    note = (f"**Graded by the course's autograder**: {r.score:g} / {r.max_score:g}, status *{r.status}*"
            f"{': ' + detail if detail else ''}{unread}. Answer cells hold the student's code as graded; each "
            "test cell's output says what the grader found (the hidden part of each test is not shown here).")
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if cell.get("cell_type") != "code":
            continue
        cell["execution_count"] = None
        cell["outputs"] = []
        eid = exercise_of_answer(gid)
        if meta.get("solution") and eid is not None:
            if eid in plan.answers:  # shown, never run: a control character in it shows as its escape
                cell["source"] = safe_text.printable_lines("\n\n".join([*plan.helpers.get(eid, []), plan.answers[eid]]))
        elif meta.get("grade") and gid in ch.exercises:
            got, points = r.exercises.get(gid, 0.0), ch.exercises[gid].points
            text = f"{got:g} / {points:g} points: "
            if got == points and points > 0:
                text += "all checks passed"
            else:
                text += _why(r, gid) or "no points"
                printed = r.outputs.get(gid, "").strip()
                if printed:
                    text += f"\n\nthe test printed:\n{printed}"
            # quotes what the student's code printed or raised: JupyterLab would act on its escape sequences
            cell["outputs"] = [{"output_type": "stream", "name": "stdout" if got == points else "stderr",
                                "text": safe_text.printable_lines(text) + "\n"}]
    nb["cells"].insert(0, {"cell_type": "markdown", "id": "scalelib-autograder-summary", "metadata": {},
                           "source": note})
    return nb
