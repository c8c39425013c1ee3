"""Which file is whose: a course site's export (zip or folder) and an optional roster, mapped to students.

File names as course sites and Colab make them are understood: ``lastname_1234_5678_01_rooflines.ipynb``
(name, user id, submission id, original name), ``Copy of 01_rooflines.ipynb``, resubmissions ``-1`` and
`` (1)``, ``alice.ipynb``, ``alice/01_rooflines.ipynb`` and deeper nesting (the nearest folder that is not a
generic one names the student). The chapter comes from the notebook itself (``metadata.scalelib.chapter``),
else from the file name. With a roster (CSV with a ``student`` column and optionally ``name``, ``id``,
``email``, ``aliases`` separated by ``;``), a file belongs to the roster row that one of its name
fragments or ids matches; files matching no row (or several) are *unmatched* and listed, never dropped.

When a student has several files for the chapter, the latest wins: the newest modification time (the
zip entry's timestamp inside a zip, the file's mtime in a folder), then the higher resubmission number,
then the later path in sorted order. Files for another chapter only count when the student has none for
this one (status ``wrong chapter``). Every superseded file is listed in ``submissions.csv``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import shutil
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

_COPY_OF = re.compile(r"^(?:copy\s+of\s+)+", re.IGNORECASE)
_RESUB = re.compile(r"(?:-(\d+)|\s*\((\d+)\))$")
_COURSE_SITE = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)_(?P<rest>.*)$", re.IGNORECASE)
_COURSE_SITE_DIR = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)$", re.IGNORECASE)
_GENERIC_DIRS = {"", "submissions", "submission", "notebooks", "files", "unzipped", "__macosx"}


@dataclass(frozen=True)
class UnpackLimits:
    """What a zip may unpack to: bytes per file, bytes in all, and how far one entry may inflate."""

    max_file_bytes: int = 64 * 2**20
    max_total_bytes: int = 2 * 2**30
    max_ratio: float = 200.0  # uncompressed / compressed, for entries over 1 MiB


@dataclass
class Candidate:
    path: Path  # where the bytes are (unpacked if from a zip)
    shown: str  # the name as it appeared in the export
    mtime: float
    resubmission: int
    keys: list[str]  # name fragments and ids, normalised
    student: str  # best guess without a roster
    chapter: str | None = None  # from the notebook, else from the name
    chapter_from: str = ""
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


def file_stem(student: str) -> str:
    """``student`` as a file name, one-to-one: kept as it is when it is plain (lower-case letters, digits and
    ``._-``), otherwise a readable part plus a short hash, so ids differing in case, accents or punctuation
    never share a file, even on a case-insensitive file system."""
    text = unicodedata.normalize("NFC", student)
    if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", text):
        return text
    readable = re.sub(r"[^a-z0-9._-]+", "_", fold(text) or "student")[:60].strip("_.") or "student"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


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


def parse_name(rel: Path, chapters: list[str]) -> tuple[str, list[str], int, str | None]:
    """(student guess, match keys, resubmission number, chapter from the name)."""
    stem, resub = _strip_name(rel.stem)
    keys: list[str] = []
    m = _COURSE_SITE.match(stem)
    if m:
        keys += [norm(m["name"]), m["uid"], m["sid"]]
        rest, r2 = _strip_name(m["rest"])
        resub = max(resub, r2)
        chapter = _chapter_in(rest, chapters) or _chapter_in(stem, chapters)
        return m["name"], keys, resub, chapter
    chapter = _chapter_in(stem, chapters)
    own = stem
    if chapter:
        own = re.sub(re.escape(chapter), "", own, flags=re.IGNORECASE)
    own = own.strip(" _-.")
    dirs = [d for d in reversed(rel.parts[:-1]) if d.lower() not in _GENERIC_DIRS]
    if norm(own):
        keys.append(norm(own))
        student = own
    else:
        student = dirs[0] if dirs else ""
    for d in dirs:
        site = _COURSE_SITE_DIR.match(d)
        if site:  # a course site's per-student folder: 'patel_1006_5006/Copy of 04_transformers.ipynb'
            keys += [norm(site["name"]), site["uid"], site["sid"]]
            if student == d:
                student = site["name"]
        else:
            keys.append(norm(d))
    return student, [k for k in keys if k], resub, chapter


def notebook_chapter(path: Path, max_bytes: int = UnpackLimits.max_file_bytes) -> tuple[str | None, str]:
    """(chapter from the notebook's own metadata, or None; '' or why the file is not a notebook)."""
    if path.stat().st_size > max_bytes:
        return None, f"too large: {path.stat().st_size} bytes (the limit is {max_bytes})"
    try:
        nb = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        return None, f"not a notebook: {str(err)[:80]}"
    if type(nb) is not dict or type(nb.get("cells")) is not list:
        return None, "not a notebook: no cells"
    meta = nb.get("metadata")
    own = meta.get("scalelib") if isinstance(meta, dict) else None
    chapter = own.get("chapter") if isinstance(own, dict) else None
    return (chapter if type(chapter) is str else None), ""


@dataclass
class Unpacked:
    folder: Path  # what to scan
    times: dict[str, float] = field(default_factory=dict)  # zip entry name -> its timestamp
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (entry, why), one per entry not unpacked


def _copy_capped(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, cap: int) -> int:
    """Write the entry to ``dest``, reading at most ``cap`` bytes whatever its header says; bytes written."""
    written = 0
    with zf.open(info) as src, open(dest, "wb") as out:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                return written
            written += len(chunk)
            if written > cap:
                raise _TooLarge(f"too large: more than {cap} bytes when unpacked")
            out.write(chunk)


class _TooLarge(Exception):
    pass


def _unpack_zip(source: Path, target: Path, limits: UnpackLimits) -> Unpacked:
    out = Unpacked(target)
    total = 0
    target.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError) as err:
        raise SystemExit(f"{source}: not a readable zip ({err})") from None
    with zf:
        infos = zf.infolist()
        last = {info.filename: i for i, info in enumerate(infos)}
        for i, info in enumerate(infos):
            shown = info.filename
            name = Path(shown)
            if info.is_dir():
                out.skipped.append((shown, "a folder entry: nothing to grade in itself"))
                continue
            if name.is_absolute() or ".." in name.parts or "\x00" in shown:
                out.skipped.append((shown, "unsafe path (absolute or with '..'), not unpacked"))
                continue
            if last[shown] != i:
                out.skipped.append((shown, "a later entry of the same name replaces it"))
                continue
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > limits.max_file_bytes:
                out.skipped.append((shown, f"too large: {info.file_size} bytes (the limit is {limits.max_file_bytes})"))
                continue
            if info.file_size > 2**20 and ratio > limits.max_ratio:
                out.skipped.append((shown, f"too large: inflates {ratio:.0f}x (the limit is {limits.max_ratio:.0f}x)"))
                continue
            room = limits.max_total_bytes - total
            if info.file_size > room:
                why = f"too large: the export would unpack to more than {limits.max_total_bytes} bytes"
                out.skipped.append((shown, why))
                continue
            dest = target / name
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.is_dir():
                    raise IsADirectoryError(f"a folder of the same name exists: {shown}")
                total += _copy_capped(zf, info, dest, min(limits.max_file_bytes, room))
            except _TooLarge as err:
                dest.unlink(missing_ok=True)
                out.skipped.append((shown, str(err)))
                continue
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                clash = f"{name.parts[0]} is both a file and a folder"
                out.skipped.append((shown, f"clashes with another entry ({clash}), not unpacked"))
                continue
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
                    NotImplementedError) as err:
                if dest.is_file():
                    dest.unlink(missing_ok=True)
                why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
                out.skipped.append((shown, f"bad zip entry, not unpacked: {type(err).__name__}: {why[:120]}"))
                continue
            try:
                out.times[str(name)] = datetime(*info.date_time).timestamp()
            except ValueError:
                out.times[str(name)] = 0.0
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


def _canvas_export(header: list[str]) -> bool:
    """Canvas's own gradebook export: it starts with Student, ID, then SIS columns, and has no id column of ours."""
    names = [h.strip() for h in header]
    return names[:2] == ["Student", "ID"] and "SIS Login ID" in names and "student" not in names


def _canvas_placeholder(row: dict[str, str]) -> bool:
    """Rows of a Canvas export that are not students: "Points Possible", and the "Manual Posting" (formerly
    "Muted") row with an empty Student and ID."""
    who = row.get("name", "")
    return who.casefold() == "points possible" or not (who or row.get("id"))


def read_roster(path: Path) -> list[dict[str, str]]:
    """Roster rows with lower-case column names (Canvas's 'SIS User ID' and 'SIS Login ID' become
    ``sis_id`` and ``login``); the ``student`` column is required and must be unique.

    Canvas's gradebook export is read as Canvas writes it: its "Student" column (the name, "Last, First") becomes
    ``name``, the student's id is the SIS Login ID (else the SIS User ID, else Canvas's ID), and its rows that are
    not students ("Points Possible", "Manual Posting"/"Muted") are left out.
    """
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        canvas = _canvas_export(header)
        keys = [_ROSTER_SYNONYMS.get(k, k) for k in (h.strip().lower() for h in header)]
        if canvas:
            keys[0] = "name"
        rows = [{k: (v or "").strip() for k, v in zip(keys, values) if k}
                for values in reader if any(v.strip() for v in values)]
    if canvas:
        rows = [r for r in rows if not _canvas_placeholder(r)]
        for r in rows:
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
    return rows


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


def collect(source: Path, chapter: str, chapters: list[str], workdir: Path, roster: Path | None = None,
            limits: UnpackLimits | None = None) -> Mapping:
    limits = limits or UnpackLimits()
    unpacked = unpack(source, workdir, limits)
    rows = read_roster(roster) if roster else None
    exact = _roster_keys(rows) if rows else {}
    folded = _roster_keys(rows, fold) if rows else {}
    out = Mapping(skipped=list(unpacked.skipped))
    per_student: dict[str, list[Candidate]] = {}
    folder = unpacked.folder
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        shown = str(rel)
        if path.is_symlink():
            out.skipped.append((shown, "a symbolic link, not followed"))
            continue
        if not path.is_file():
            continue
        if any(part.startswith(".") or part == "__MACOSX" for part in rel.parts):
            out.unmatched.append((shown, "hidden or system file, ignored"))
            continue
        if path.suffix.lower() != ".ipynb":
            out.unmatched.append((shown, "not a notebook (.ipynb), ignored"))
            continue
        student, keys, resub, name_chapter = parse_name(rel, chapters)
        own_chapter, invalid = notebook_chapter(path, limits.max_file_bytes)
        cand = Candidate(path, shown, unpacked.times.get(shown, path.stat().st_mtime), resub, keys, student,
                         own_chapter or name_chapter,
                         "notebook" if own_chapter else ("file name" if name_chapter else ""),
                         invalid)
        if rows is not None:
            hits = _roster_match(keys, exact, folded)
            if len(hits) != 1:
                why = "matches no roster student" if not hits else f"matches several: {', '.join(hits)}"
                out.unmatched.append((shown, why))
                continue
            sid = hits[0]
        else:
            sid = student_id(student)
            if not sid:
                out.unmatched.append((shown, "no student name in the file or folder name"))
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
