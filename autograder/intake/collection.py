"""Which file is whose: a course site's export (zip or folder) and an optional roster, mapped to students.

File names as course sites and Colab make them are understood: ``lastname_1234_5678_01_rooflines.ipynb``
(name, user id, submission id, original name), ``Copy of 01_rooflines.ipynb``, resubmissions ``-1`` and
`` (1)``, ``alice.ipynb``, ``alice/01_rooflines.ipynb`` and deeper nesting (the nearest folder that is not a
generic one names the student). The chapter comes from the notebook's content (its lines against each chapter's
released notebook) when that is clear, else from the notebook's ``metadata.scalelib.chapter``, else from the
file name.

**Who a file belongs to** is decided by what the student cannot choose: the uploader's folder (a course site's
``name_uid_sid/`` folder, or a per-student folder of the export), else the course site's own prefix of a flat
file name (``name_uid_sid_…``: the site writes it in front of whatever the student named the file). The
uploader's folder is the first non-generic folder below the export's wrapper (leading folders every notebook of
the export shares, such as ``Chapter 1 submissions/``; see :func:`export_wrapper`). Whatever
lies inside that folder (file names, sub-folders, even ones written as another student's course-site name) was
uploaded by that student and counts as theirs: a name inside a folder cannot claim another identity. With a
roster (CSV with a ``student`` column and optionally ``name``, ``id``, ``email``, ``aliases`` separated by
``;``), a file belongs to the roster row that one of those identity keys matches; files matching no row (or
several) are *unmatched* and listed, never dropped.

When a student has several files for the chapter, the latest wins: the newest modification time (the
zip entry's timestamp inside a zip, the file's mtime in a folder), then the higher resubmission number,
then the later path in sorted order. Files for another chapter only count when the student has none for
this one (status ``wrong chapter``). Every superseded file is listed in ``submissions.csv``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from autograder.intake.archives import NotRegular, TooLarge, UnpackLimits, read_capped, unpack, why_unreadable
from autograder.intake.chapter_match import RELEASED, chapter_signatures, parse_notebook
from autograder.intake.file_names import export_wrapper, fold, parse_name, student_id
from autograder.intake.rosters import CANVAS_TEST_STUDENT, roster_keys, roster_match, roster_rows
from autograder.safe_text import printable


@dataclass
class Candidate:
    path: Path  # the grader's own copy of the bytes (unpacked from the zip, or copied capped out of the folder)
    shown: str  # the name as it appeared in the export (control characters escaped: safe_text.printable)
    mtime: float
    resubmission: int
    keys: list[str]  # name fragments and ids, normalised
    student: str  # best guess without a roster
    chapter: str | None = None  # from its content, else its metadata, else its name
    chapter_from: str = ""  # "content", "notebook" or "file name"
    invalid: str = ""


@dataclass
class Mapping:
    chosen: dict[str, Candidate] = field(default_factory=dict)  # student -> file
    superseded: list[tuple[Candidate, str]] = field(default_factory=list)  # (file, student it lost to)
    unmatched: list[tuple[str, str]] = field(default_factory=list)  # (file, why)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (entry, why it was not unpacked or read)
    missing: list[str] = field(default_factory=list)  # roster students without a file


def _is_notebook(path: Path, folder: Path) -> bool:
    """A file :func:`collect` reads as a submission (not a link, hidden or system file, or other kind of file)."""
    rel = path.relative_to(folder)
    return (not path.is_symlink() and path.suffix.lower() == ".ipynb" and path.is_file()
            and not any(part.startswith(".") or part == "__MACOSX" for part in rel.parts))


def _listing(folder: Path, problems: list[tuple[str, str]]) -> list[Path]:
    """Every entry under ``folder`` but its folders (links to folders included, not followed), in sorted order; a
    folder that cannot be listed is a row of ``problems``."""
    def failed(err: OSError) -> None:
        where = os.path.relpath(err.filename, folder) if isinstance(err.filename, str) else "."
        problems.append((printable(where), f"a folder that could not be listed: {why_unreadable(err)}"))

    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=failed):
        base = Path(dirpath)
        for name in dirnames:
            with contextlib.suppress(OSError):
                if (base / name).is_symlink():
                    found.append(base / name)
        found += [base / name for name in filenames]
    return sorted(found)


@dataclass
class _Intake:
    """What :func:`collect` carries from one entry to the next."""

    folder: Path
    owned: bool  # the folder is the grader's own (an unpacked zip), else notebooks are copied out of it
    copies: Path
    limits: UnpackLimits
    chapters: list[str]
    signatures: dict[str, frozenset[str]]
    times: dict[str, float]
    wrapper: int = 0  # leading folders that wrap the whole export (see export_wrapper)
    copied_bytes: int = 0


def _examine(path: Path, n: int, intake: _Intake) -> Candidate | tuple[str, str]:
    """One entry of the export: its candidate, or ('unmatched' or 'skipped', why). Reads at most the file limit;
    a notebook from someone else's folder is copied into the grader's own first, and only that copy is read again
    (it cannot grow or change while it is graded)."""
    rel = path.relative_to(intake.folder)
    shown = printable(str(rel))
    if path.is_symlink():
        return "skipped", "a symbolic link, not followed"
    if any(part.startswith(".") or part == "__MACOSX" for part in rel.parts):
        return "unmatched", "hidden or system file, ignored"
    if path.suffix.lower() != ".ipynb":
        return "unmatched", "not a notebook (.ipynb), ignored"
    if not stat.S_ISREG(path.lstat().st_mode):
        return "skipped", "not a regular file (a pipe, socket or device), not read"
    limits = intake.limits
    invalid, own_chapter, from_content = "", None, None
    try:
        data, st = read_capped(path, limits.max_file_bytes)
    except NotRegular as err:
        return "skipped", str(err)
    except TooLarge as err:
        data, st, invalid = b"", path.lstat(), str(err)
    copy = path
    if not intake.owned:
        if intake.copied_bytes + len(data) > limits.max_total_bytes:
            return "skipped", f"too large: the export's notebooks add up to more than {limits.max_total_bytes} bytes"
        copy = intake.copies / f"{n}.ipynb"
        copy.write_bytes(data)
        intake.copied_bytes += len(data)
    if not invalid:
        own_chapter, invalid, from_content = parse_notebook(data, intake.signatures)
    student, keys, resub, name_chapter = parse_name(rel, intake.chapters, intake.wrapper)
    chapter, chapter_from = ((from_content, "content") if from_content else (own_chapter, "notebook") if own_chapter
                             else (name_chapter, "file name") if name_chapter else (None, ""))
    return Candidate(copy, shown, intake.times.get(str(rel), st.st_mtime), resub, keys, student, chapter,
                     chapter_from, invalid)


def collect(source: Path, chapter: str, chapters: list[str], workdir: Path, roster: Path | None = None,
            limits: UnpackLimits | None = None, released: Path | None = None) -> Mapping:
    """Who each file of ``source`` belongs to and which one of theirs is graded (see the module).

    Every entry of the export ends as a row (chosen, superseded, unmatched or skipped), whatever went wrong with it:
    an entry never stops the others. The chapter of a notebook comes from its content (its cells against each
    chapter's released notebook in ``released``, default the course's ``chapters/``) when that is clear, else from
    its metadata, else from its name."""
    limits = limits or UnpackLimits()
    unpacked = unpack(source, workdir, limits)
    rows, test_students = roster_rows(roster) if roster else (None, [])
    exact = roster_keys(rows) if rows else {}
    folded = roster_keys(rows, fold) if rows else {}
    by_id = [{k: v for k, v in r.items() if k != "name"} for r in test_students]  # "Student" is no key of theirs
    test_exact, test_folded = roster_keys(by_id), roster_keys(by_id, fold)
    out = Mapping(skipped=[(printable(name), why) for name, why in unpacked.skipped])
    per_student: dict[str, list[Candidate]] = {}
    copies = workdir / "notebooks"
    copies.mkdir(parents=True, exist_ok=True)
    intake = _Intake(unpacked.folder, unpacked.owned, copies, limits, chapters,
                     chapter_signatures(Path(released or RELEASED), tuple(chapters)), unpacked.times)
    listing = _listing(unpacked.folder, out.skipped)
    intake.wrapper = export_wrapper([p.relative_to(unpacked.folder) for p in listing
                                     if _is_notebook(p, unpacked.folder)], chapters)
    for n, path in enumerate(listing):
        shown = printable(os.path.relpath(path, unpacked.folder))
        try:
            found = _examine(path, n, intake)
            if isinstance(found, tuple):
                (out.unmatched if found[0] == "unmatched" else out.skipped).append((shown, found[1]))
                continue
            cand = found
            if rows is not None:
                hits = roster_match(cand.keys, exact, folded)
                if len(hits) != 1:
                    why = "matches no roster student" if not hits else f"matches several: {', '.join(hits)}"
                    if not hits and roster_match(cand.keys, test_exact, test_folded):
                        why = CANVAS_TEST_STUDENT
                    out.unmatched.append((shown, why))
                    continue
                sid = hits[0]
            else:
                sid = student_id(cand.student)
                if not sid:
                    out.unmatched.append((shown, "no student name in the file or folder name"))
                    continue
        except Exception as err:  # whatever went wrong, it is this entry's row, not the end of the batch
            out.skipped.append((shown, f"could not be read: {why_unreadable(err)}"))
            continue
        per_student.setdefault(sid, []).append(cand)

    def rank(c: Candidate) -> tuple[bool, float, int, str]:
        return (c.chapter in (None, chapter), c.mtime, c.resubmission, c.shown)

    for sid, cands in per_student.items():
        cands.sort(key=rank)
        out.chosen[sid] = cands[-1]
        out.superseded += [(c, sid) for c in cands[:-1]]
    if rows is not None:
        out.missing = [r["student"] for r in rows if r["student"] not in out.chosen]
    return out
