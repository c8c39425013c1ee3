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
import csv
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import unicodedata
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from autograder.safe_text import printable

_COPY_OF = re.compile(r"^(?:copy\s+of\s+)+", re.IGNORECASE)
_RESUB = re.compile(r"(?:-(\d+)|\s*\((\d+)\))$")
_COURSE_SITE = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)_(?P<rest>.*)$", re.IGNORECASE)
_COURSE_SITE_DIR = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)$", re.IGNORECASE)
_RELEASED = Path(__file__).resolve().parent.parent / "chapters"  # the released notebooks (course.CHAPTERS)
_GENERIC_DIRS = {"", "submissions", "submission", "notebooks", "files", "unzipped", "__macosx"}


@dataclass(frozen=True)
class UnpackLimits:
    """What a zip may unpack to: bytes per file, bytes in all, and how far one entry may inflate."""

    max_file_bytes: int = 64 * 2**20
    max_total_bytes: int = 2 * 2**30
    max_ratio: float = 200.0  # uncompressed / compressed, for entries over 1 MiB


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


def norm(text: str) -> str:
    """A matching key: letters and digits only (accents kept: 'Zoë' and 'Zoé' stay apart), case-folded."""
    return "".join(c for c in unicodedata.normalize("NFC", text).casefold() if c.isalnum())


def fold(text: str) -> str:
    """:func:`norm` without accents ('zoë' -> 'zoe'): a second chance when a site wrote names in ASCII."""
    return "".join(c for c in unicodedata.normalize("NFKD", norm(text)) if c.isascii() and c.isalnum())


def student_id(name: str) -> str:
    """An id from a name in a file or folder name: distinct names stay distinct, accents included.

    The name as written (NFC, so one name typed two ways is one id), runs of white space as one space, without
    control characters or path separators. Use :func:`file_stem` for the id as a file name.
    """
    text = unicodedata.normalize("NFC", name)
    text = "".join("_" if c in "/\\" else c for c in text if unicodedata.category(c)[0] != "C")
    return " ".join(text.split()).strip(" .")


_PLAIN_STEM = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")
# names Windows reserves for devices, whatever the extension: never a plain stem (a share may be read from Windows)
_RESERVED_STEMS = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def file_stem(student: str) -> str:
    """``student`` as a file name (``results/<stem>.json``, ``feedback/<stem>.html``), one-to-one by construction.

    * A *plain* id (lower-case ASCII letters and digits, then also ``._-``, at most 100 characters, not a name
      Windows reserves) is its own stem.
    * Any other id becomes ``<readable>~<hash>``: a readable part (its letters and digits without accents,
      at most 40) and the first 32 hex digits (128 bits) of the SHA-256 of the id's exact UTF-8 bytes.

    Why two distinct ids never share a file: plain stems never contain ``~`` and hashed ones always do, so no
    plain stem equals a hashed one (whatever an id is chosen to look like); plain stems are the ids themselves;
    two hashed stems are equal only if their 128-bit hashes are (the readable part holds no ``~``, so the hash is
    what follows the one ``~``), i.e. only for a SHA-256 collision. On a case-insensitive file system (macOS,
    Windows) names that differ only in case are one file: every stem is made of ``[a-z0-9._~-]`` only, so
    case-folding changes none of them and distinct stems stay distinct; nor does Unicode normalisation (macOS)
    change ASCII. A stem never starts with ``.`` (no ``.``, ``..`` or hidden file) and is at most 100 characters.
    """
    if _PLAIN_STEM.fullmatch(student) and student.split(".")[0] not in _RESERVED_STEMS:
        return student
    readable = re.sub(r"[^a-z0-9]+", "", fold(student))[:40] or "student"
    digest = hashlib.sha256(student.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{readable}~{digest}"


def _strip_name(stem: str) -> tuple[str, int]:
    stem = _COPY_OF.sub("", stem.strip())
    resub = 0
    m = _RESUB.search(stem)
    if m:
        resub = int(m.group(1) or m.group(2))
        stem = stem[: m.start()].strip()
    return _COPY_OF.sub("", stem), resub


def _chapter_in(text: str, chapters: list[str]) -> str | None:
    low = text.lower()
    for ch in chapters:
        if ch.lower() in low:
            return ch
    for ch in chapters:
        num, word = ch.split("_", 1)
        if re.search(rf"(?:^|[^0-9]){num}(?:[^0-9]|$)", low) and word.lower() in low:
            return ch
    return None


def parse_name(rel: Path, chapters: list[str], wrapper: int = 0) -> tuple[str, list[str], int, str | None]:
    """(student guess, match keys, resubmission number, chapter from the name).

    ``wrapper``: how many leading folders of ``rel`` are the export's own wrapper (see :func:`export_wrapper`).
    The identity (guess and keys) comes from the uploader's folder when there is one, the first non-generic
    folder below the wrapper, and only otherwise from the file name: a student names their files and the folders
    inside their own, never the folder the export puts them in. The file name still gives the resubmission number
    and the chapter.
    """
    stem, resub = _strip_name(rel.stem)
    m = _COURSE_SITE.match(stem)
    if m:  # the site's prefix: 'name_uid_sid_' in front of what the student named the file
        rest, r2 = _strip_name(m["rest"])
        resub = max(resub, r2)
        chapter = _chapter_in(rest, chapters) or _chapter_in(stem, chapters)
        student, keys = m["name"], [norm(m["name"]), m["uid"], m["sid"]]
    else:
        chapter = _chapter_in(stem, chapters)
        own = stem
        if chapter:
            own = re.sub(re.escape(chapter), "", own, flags=re.IGNORECASE)
        own = own.strip(" _-.")
        student, keys = own, [norm(own)]
    folders = [d for d in rel.parts[wrapper:-1] if d.lower() not in _GENERIC_DIRS]
    if folders:  # the uploader's folder decides; nothing inside it can claim another identity
        site = _COURSE_SITE_DIR.match(folders[0])
        if site:  # a course site's per-student folder: 'patel_1006_5006/Copy of 04_transformers.ipynb'
            student, keys = site["name"], [norm(site["name"]), site["uid"], site["sid"]]
        else:
            student, keys = folders[0], [norm(folders[0])]
    return student, [k for k in keys if k], resub, chapter


class _TooLarge(Exception):
    pass


class _NotRegular(Exception):
    pass


def read_capped(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (not followed if a link) and its status, never more than ``cap``
    bytes read or held: the size is checked before reading, and the read stops past ``cap`` whatever the size said
    (a file can grow between the two). Raises _TooLarge or _NotRegular, or OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular("not a regular file (a pipe, socket or device), not read")
        if st.st_size > cap:
            raise _TooLarge(f"too large: {st.st_size} bytes (the limit is {cap})")
        chunks, held = [], 0
        while held <= cap:
            chunk = f.read(min(1 << 20, cap + 1 - held))
            if not chunk:
                break
            chunks.append(chunk)
            held += len(chunk)
        if held > cap:
            raise _TooLarge(f"too large: more than {cap} bytes (it grew while being read; the limit is {cap})")
        return b"".join(chunks), st


_MAX_SIGNATURE_CELLS = 2000  # cells of a submission compared with the released chapters
_MAX_SIGNATURE_CHARS = 100_000  # characters of one cell compared
_MIN_SIGNATURE_LINES = 3  # a chapter is recognised by at least this many of its own lines...
_SIGNATURE_MARGIN = 2  # ...and this many times as many as any other chapter


def _signature_lines(sources: Iterable[str]) -> set[str]:
    """Lines worth comparing: white space collapsed, case folded, at least 12 characters."""
    lines = set()
    for src in sources:
        for line in src[:_MAX_SIGNATURE_CHARS].splitlines():
            text = " ".join(line.split()).casefold()
            if len(text) >= 12:
                lines.add(text)
    return lines


def _cell_sources(nb: dict) -> list[str]:
    out = []
    for cell in nb.get("cells", [])[:_MAX_SIGNATURE_CELLS]:
        src = cell.get("source", "") if isinstance(cell, dict) else ""
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if isinstance(src, str):
            out.append(src)
    return out


@functools.lru_cache(maxsize=4)
def chapter_signatures(released: Path, chapters: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """Per chapter, the lines of its released notebook (markdown and code: headings, text, exercise ids, the
    stubs' ``def`` lines) that no other chapter's notebook has. Chapters without a released notebook have none."""
    own: dict[str, set[str]] = {}
    for ch in chapters:
        path = released / f"{ch}.ipynb"
        if path.is_file():
            own[ch] = _signature_lines(_cell_sources(json.loads(path.read_text(encoding="utf-8"))))
    seen: dict[str, int] = {}
    for lines in own.values():
        for line in lines:
            seen[line] = seen.get(line, 0) + 1
    return {ch: frozenset(line for line in lines if seen[line] == 1) for ch, lines in own.items()}


def content_chapter(nb: dict, signatures: dict[str, frozenset[str]]) -> str | None:
    """The chapter whose released notebook the submission's cells clearly come from, or None when the content does
    not say (too few of any chapter's own lines, or two chapters close)."""
    if not signatures:
        return None
    lines = _signature_lines(_cell_sources(nb))
    counts = sorted(((len(sig & lines), ch) for ch, sig in signatures.items()), reverse=True)
    best, chapter = counts[0]
    runner_up = counts[1][0] if len(counts) > 1 else 0
    if best >= _MIN_SIGNATURE_LINES and best >= _SIGNATURE_MARGIN * runner_up:
        return chapter
    return None


def export_wrapper(rels: list[Path], chapters: list[str] | None = None) -> int:
    """How many leading folders are the export's wrapper (``Chapter 1 submissions/``) rather than a student's.

    The folders every notebook's path starts with, never a course site's per-student folder (``name_uid_sid``),
    and never a file's last folder while the files are not all in one folder (``w/alice/x``, ``w/alice/sub/y``:
    ``alice`` stays). When every notebook is in the same folder, it is a wrapper of flat files only if their names
    show at least two students (``w/adams_1_2_….ipynb``, ``w/brown_3_4_….ipynb``); otherwise it is one student's
    folder, and its outermost folder is the uploader's. (An export holding one student's folder alone cannot
    show which of its folders is the student's: the outermost is taken, so no name inside can claim another.)
    """
    dirs = [rel.parts[:-1] for rel in rels]
    if not dirs:
        return 0
    depth = 0
    while (all(len(d) > depth for d in dirs) and len({d[depth] for d in dirs}) == 1
           and not _COURSE_SITE_DIR.match(dirs[0][depth])):
        depth += 1
    if len(set(dirs)) == 1:
        if depth < len(dirs[0]):  # stopped at a course site's per-student folder
            return depth
        owners = {norm(parse_name(Path(rel.name), chapters or [])[0]) for rel in rels} - {""}
        return depth if len(owners) >= 2 else 0
    return max(0, min(depth, min(len(d) for d in dirs) - 1))


def notebook_chapter(path: Path, max_bytes: int = UnpackLimits.max_file_bytes,
                     signatures: dict[str, frozenset[str]] | None = None) -> tuple[str | None, str, str | None]:
    """(chapter from the notebook's own metadata, or None; '' or why the file is not a notebook; chapter from
    its content (:func:`content_chapter`), or None). Reads at most ``max_bytes``."""
    try:
        data, _ = read_capped(path, max_bytes)
    except (_TooLarge, _NotRegular) as err:
        return None, str(err), None
    return parse_notebook(data, signatures or {})


def parse_notebook(data: bytes, signatures: dict[str, frozenset[str]]) -> tuple[str | None, str, str | None]:
    """:func:`notebook_chapter` for bytes already read."""
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        return None, f"not a notebook: {str(err)[:80]}", None
    if type(nb) is not dict or type(nb.get("cells")) is not list:
        return None, "not a notebook: no cells", None
    meta = nb.get("metadata")
    own = meta.get("scalelib") if isinstance(meta, dict) else None
    chapter = own.get("chapter") if isinstance(own, dict) else None
    return (chapter if type(chapter) is str else None), "", content_chapter(nb, signatures)


@dataclass
class Unpacked:
    folder: Path  # what to scan
    owned: bool = False  # the grader's own folder (an unpacked zip), not the instructor's
    times: dict[str, float] = field(default_factory=dict)  # zip entry name -> its timestamp
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (entry, why), one per entry not unpacked


def _copy_capped(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, cap: int, max_ratio: float) -> int:
    """Write the entry to ``dest``, reading at most ``cap`` bytes whatever its header says (and, past 1 MiB, no
    more than ``max_ratio`` times its compressed size); bytes written."""
    inflated = max(2**20, int(max_ratio * max(info.compress_size, 1)))
    written = 0
    with zf.open(info) as src, open(dest, "wb") as out:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                return written
            written += len(chunk)
            if written > cap:
                raise _TooLarge(f"too large: more than {cap} bytes when unpacked")
            if written > inflated:
                raise _TooLarge(f"too large: inflates more than {max_ratio:.0f}x (more than its header said)")
            out.write(chunk)


def _why(err: BaseException) -> str:
    """An exception as a short reason (an OSError by its strerror, without the long file name it may carry)."""
    why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return f"{type(err).__name__}: {why[:120]}"


def _unpack_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path, limits: UnpackLimits,
                  room: int) -> tuple[int, str]:
    """Unpack one entry: (bytes written, '') or (0, why it was not unpacked). Raises on anything unforeseen."""
    shown = info.filename
    name = Path(shown)
    if info.is_dir():
        return 0, "a folder entry: nothing to grade in itself"
    if name.is_absolute() or ".." in name.parts or "\x00" in shown:
        return 0, "unsafe path (absolute or with '..'), not unpacked"
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > limits.max_file_bytes:
        return 0, f"too large: {info.file_size} bytes (the limit is {limits.max_file_bytes})"
    if info.file_size > 2**20 and ratio > limits.max_ratio:
        return 0, f"too large: inflates {ratio:.0f}x (the limit is {limits.max_ratio:.0f}x)"
    if info.file_size > room:
        return 0, f"too large: the export would unpack to more than {limits.max_total_bytes} bytes"
    dest = target / name
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_dir():
            raise IsADirectoryError(f"a folder of the same name exists: {shown}")
        return _copy_capped(zf, info, dest, min(limits.max_file_bytes, room), limits.max_ratio), ""
    except BaseException as err:
        with contextlib.suppress(OSError, ValueError):  # the clean-up must not fail in its turn (a name too long)
            if dest.is_file() and not dest.is_symlink():
                dest.unlink()
        if isinstance(err, _TooLarge):
            return 0, str(err)
        if isinstance(err, (FileExistsError, NotADirectoryError, IsADirectoryError)):
            return 0, f"clashes with another entry ({name.parts[0]} is both a file and a folder), not unpacked"
        if isinstance(err, (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
                            NotImplementedError)):
            return 0, f"bad zip entry, not unpacked: {_why(err)}"
        raise


def _unpack_zip(source: Path, target: Path, limits: UnpackLimits) -> Unpacked:
    out = Unpacked(target, owned=True)
    total = 0
    target.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as err:
        # the zip's table of contents itself (not one entry's bytes) is unreadable: nothing can be listed
        raise SystemExit(f"{source}: not a readable zip ({_why(err)}); unpack it with another tool and grade "
                         "the folder") from None
    with zf:
        infos = zf.infolist()
        last = {info.filename: i for i, info in enumerate(infos)}
        for i, info in enumerate(infos):
            shown = info.filename
            if last[shown] != i:
                out.skipped.append((shown, "a later entry of the same name replaces it"))
                continue
            try:
                written, why = _unpack_entry(zf, info, target, limits, limits.max_total_bytes - total)
            except Exception as err:  # whatever went wrong, it is this entry's row, not the end of the batch
                written, why = 0, f"could not be unpacked: {_why(err)}"
            if why:
                out.skipped.append((shown, why))
                continue
            total += written
            try:
                out.times[str(Path(shown))] = datetime(*info.date_time).timestamp()
            except (ValueError, OverflowError, OSError):
                out.times[str(Path(shown))] = 0.0
    return out


def unpack(source: Path, workdir: Path, limits: UnpackLimits | None = None) -> Unpacked:
    """A folder to scan: ``source`` itself, or a zip unpacked into ``workdir`` entry by entry.

    A bad entry (wrong size or CRC, a name clash with a folder, an unsafe path, too large) is that entry's
    problem: it is skipped and listed with the reason; every other entry is still unpacked.
    """
    limits = limits or UnpackLimits()
    if source.is_file() and zipfile.is_zipfile(source):
        target = workdir / "unzipped"
        if target.exists():
            shutil.rmtree(target)
        return _unpack_zip(source, target, limits)
    if source.is_dir():
        return Unpacked(source)
    raise SystemExit(f"{source} is neither a folder nor a .zip of notebooks")


_ROSTER_SYNONYMS = {"sis user id": "sis_id", "sis login id": "login", "user id": "user_id", "login id": "login"}
CANVAS_EXPORT_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def canvas_export(header: list[str]) -> bool:
    """Canvas's own gradebook export: it starts with Student, ID, then SIS columns, and has no id column of ours."""
    names = [h.strip() for h in header]
    return names[:2] == ["Student", "ID"] and "SIS Login ID" in names and "student" not in names


def _canvas_placeholder(row: dict[str, str]) -> bool:
    """Rows of a Canvas export that are not students: "Points Possible", and the "Manual Posting" (formerly
    "Muted") row with an empty Student and ID."""
    who = row.get("name", "")
    return who.casefold() == "points possible" or not (who or row.get("id"))


# Why a file of Canvas's Test Student is not graded (its row in submissions.csv)
CANVAS_TEST_STUDENT = "Canvas's Test Student (the student view user), not a student of the class"


def _canvas_test_student(row: dict[str, str]) -> bool:
    """Canvas's Test Student: the user Canvas adds to every course for its student view, in every gradebook export
    (named "Student, Test" there, "Test Student" elsewhere), never enrolled through the SIS (no SIS User ID or
    SIS Login ID). A person of that name with a SIS id is a student."""
    return (" ".join(row.get("name", "").split()).casefold() in ("student, test", "test student")
            and not (row.get("sis_id") or row.get("login")))


def read_roster(path: Path) -> list[dict[str, str]]:
    """Roster rows with lower-case column names (Canvas's 'SIS User ID' and 'SIS Login ID' become
    ``sis_id`` and ``login``); the ``student`` column is required and must be unique.

    Canvas's gradebook export is read as Canvas writes it: its "Student" column (the name, "Last, First") becomes
    ``name``, the student's id is the SIS Login ID (else the SIS User ID, else Canvas's ID), and its rows that are
    not students ("Points Possible", "Manual Posting"/"Muted", and Canvas's Test Student: see
    :func:`canvas_test_students`) are left out.
    """
    return _read_roster(path)[0]


def canvas_test_students(path: Path) -> list[dict[str, str]]:
    """The rows of Canvas's Test Student that :func:`read_roster` left out of a Canvas export (none for any other
    roster): it is in no class file, no missing-student row and no gradebook; the grader says so once."""
    return _read_roster(path)[1]


def _read_roster(path: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(the roster's students, the Canvas Test Student rows left out of them)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        canvas = canvas_export(header)
        keys = [_ROSTER_SYNONYMS.get(k, k) for k in (h.strip().lower() for h in header)]
        if canvas:
            keys[0] = "name"
        rows = [{k: (v or "").strip() for k, v in zip(keys, values) if k}
                for values in reader if any(v.strip() for v in values)]
    left_out: list[dict[str, str]] = []
    if canvas:
        rows = [r for r in rows if not _canvas_placeholder(r)]
        left_out = [r for r in rows if _canvas_test_student(r)]
        rows = [r for r in rows if not _canvas_test_student(r)]
        for r in rows + left_out:
            r["student"] = r.get("login") or r.get("sis_id") or r.get("id", "")
            if not r["student"]:
                raise SystemExit(f"{path}: Canvas's export has a row without SIS Login ID, SIS User ID or ID "
                                 f"({r.get('name')!r}); export the gradebook again or give a roster with a "
                                 "'student' column")
    if not rows or not (canvas or "student" in keys):
        raise SystemExit(f"{path}: a roster needs a 'student' column (and optionally name, id, sis_id, login, "
                         "section, email, aliases), or is Canvas's gradebook export (Student, ID, SIS User ID, "
                         "SIS Login ID, Section, ...)")
    seen: set[str] = set()
    for row in rows:
        row["student"] = unicodedata.normalize("NFC", row.get("student", ""))
        if not row["student"] or row["student"] in seen:
            raise SystemExit(f"{path}: every roster row needs its own non-empty 'student' "
                             f"({row['student']!r} is {'empty' if not row['student'] else 'repeated'})")
        seen.add(row["student"])
    return rows, left_out


def _roster_keys(rows: list[dict[str, str]], key: Callable[[str], str] = norm) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    last_names: dict[str, list[str]] = {}
    for row in rows:
        own = {key(row["student"])}
        for col in ("id", "sis_id", "user_id", "login"):
            if row.get(col):
                own.add(key(row[col]))
        if row.get("email"):
            own.add(key(row["email"].split("@")[0]))
        if row.get("name"):
            parts = re.split(r"[\s,]+", row["name"].strip())
            own |= {key("".join(parts)), key("".join(reversed(parts)))}
            last_names.setdefault(key(parts[-1] if "," not in row["name"] else parts[0]), []).append(row["student"])
        for alias in row.get("aliases", "").split(";"):
            if alias.strip():
                own.add(key(alias))
        keys[row["student"]] = {k for k in own if k}
    for last, students in last_names.items():
        if len(students) == 1 and last:
            keys[students[0]].add(last)
    return keys


def _roster_match(keys: list[str], exact: dict[str, set[str]], folded: dict[str, set[str]]) -> list[str]:
    """Roster students a file's keys match: exactly, else (a site that wrote 'Zoe' for 'Zoë') without accents."""
    hits = [s for s, ks in exact.items() if ks & set(keys)]
    if not hits:
        loose = {fold(k) for k in keys} - {""}
        hits = [s for s, ks in folded.items() if ks & loose]
    return hits


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
        problems.append((printable(where), f"a folder that could not be listed: {_why(err)}"))

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
    except _NotRegular as err:
        return "skipped", str(err)
    except _TooLarge as err:
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
    rows, test_students = _read_roster(roster) if roster else (None, [])
    exact = _roster_keys(rows) if rows else {}
    folded = _roster_keys(rows, fold) if rows else {}
    by_id = [{k: v for k, v in r.items() if k != "name"} for r in test_students]  # "Student" is no key of theirs
    test_exact, test_folded = _roster_keys(by_id), _roster_keys(by_id, fold)
    out = Mapping(skipped=[(printable(name), why) for name, why in unpacked.skipped])
    per_student: dict[str, list[Candidate]] = {}
    copies = workdir / "notebooks"
    copies.mkdir(parents=True, exist_ok=True)
    intake = _Intake(unpacked.folder, unpacked.owned, copies, limits, chapters,
                     chapter_signatures(Path(released or _RELEASED), tuple(chapters)), unpacked.times)
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
                hits = _roster_match(cand.keys, exact, folded)
                if len(hits) != 1:
                    why = "matches no roster student" if not hits else f"matches several: {', '.join(hits)}"
                    if not hits and _roster_match(cand.keys, test_exact, test_folded):
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
            out.skipped.append((shown, f"could not be read: {_why(err)}"))
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
