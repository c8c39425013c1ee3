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
import json
import re
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

_COPY_OF = re.compile(r"^(?:copy\s+of\s+)+", re.I)
_RESUB = re.compile(r"(?:-(\d+)|\s*\((\d+)\))$")
_COURSE_SITE = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)_(?P<rest>.*)$", re.I)
_GENERIC_DIRS = {"", "submissions", "submission", "notebooks", "files", "unzipped", "__macosx"}


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
    missing: list[str] = field(default_factory=list)  # roster students without a file


def norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


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
        own = re.sub(re.escape(chapter), "", own, flags=re.I)
    own = own.strip(" _-.")
    if norm(own):
        keys.append(norm(own))
        student = own
    else:
        dirs = [d for d in reversed(rel.parts[:-1]) if d.lower() not in _GENERIC_DIRS]
        student = dirs[0] if dirs else ""
    for d in rel.parts[:-1]:
        if d.lower() not in _GENERIC_DIRS:
            keys.append(norm(d))
    return student, [k for k in keys if k], resub, chapter


def notebook_chapter(path: Path) -> tuple[str | None, str]:
    """(chapter from the notebook's own metadata, or None; '' or why the file is not a notebook)."""
    try:
        nb = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        return None, f"not a notebook: {str(err)[:80]}"
    if type(nb) is not dict or type(nb.get("cells")) is not list:
        return None, "not a notebook: no cells"
    meta = nb.get("metadata") if type(nb.get("metadata")) is dict else {}
    own = meta.get("scalelib") if type(meta.get("scalelib")) is dict else {}
    chapter = own.get("chapter")
    return (chapter if type(chapter) is str else None), ""


def unpack(source: Path, workdir: Path) -> tuple[Path, dict[str, float]]:
    """A folder to scan, and the zip timestamps of its files (empty for a folder)."""
    if source.is_file() and zipfile.is_zipfile(source):
        target = workdir / "unzipped"
        times: dict[str, float] = {}
        with zipfile.ZipFile(source) as zf:
            for info in zf.infolist():
                name = Path(info.filename)
                if info.is_dir() or name.is_absolute() or ".." in name.parts:
                    continue
                dest = target / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                if info.file_size > 200 * 2**20:
                    dest.write_bytes(b"")  # not a notebook anyone meant to hand in
                else:
                    dest.write_bytes(zf.read(info))
                times[str(name)] = datetime(*info.date_time).timestamp()
        return target, times
    if source.is_dir():
        return source, {}
    raise SystemExit(f"{source} is neither a folder nor a .zip of notebooks")


def read_roster(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        rows = [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()} for row in csv.DictReader(f)]
    if not rows or "student" not in rows[0]:
        raise SystemExit(f"{path}: a roster needs a 'student' column (and optionally name, id, email, aliases)")
    return rows


def _roster_keys(rows: list[dict[str, str]]) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    last_names: dict[str, list[str]] = {}
    for row in rows:
        own = {norm(row["student"])}
        for col in ("id", "sis_id", "user_id", "login"):
            if row.get(col):
                own.add(norm(row[col]))
        if row.get("email"):
            own.add(norm(row["email"].split("@")[0]))
        if row.get("name"):
            parts = re.split(r"[\s,]+", row["name"].strip())
            own |= {norm("".join(parts)), norm("".join(reversed(parts)))}
            last_names.setdefault(norm(parts[-1] if "," not in row["name"] else parts[0]), []).append(row["student"])
        for alias in row.get("aliases", "").split(";"):
            if alias.strip():
                own.add(norm(alias))
        keys[row["student"]] = {k for k in own if k}
    for last, students in last_names.items():
        if len(students) == 1 and last:
            keys[students[0]].add(last)
    return keys


def collect(source: Path, chapter: str, chapters: list[str], workdir: Path, roster: Path | None = None) -> Mapping:
    folder, zip_times = unpack(source, workdir)
    rows = read_roster(roster) if roster else None
    rkeys = _roster_keys(rows) if rows else {}
    out = Mapping()
    per_student: dict[str, list[Candidate]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder)
        shown = str(rel)
        if any(part.startswith(".") or part == "__MACOSX" for part in rel.parts):
            out.unmatched.append((shown, "hidden or system file, ignored"))
            continue
        if path.suffix.lower() != ".ipynb":
            out.unmatched.append((shown, "not a notebook (.ipynb), ignored"))
            continue
        student, keys, resub, name_chapter = parse_name(rel, chapters)
        own_chapter, invalid = notebook_chapter(path)
        cand = Candidate(path, shown, zip_times.get(shown, path.stat().st_mtime), resub, keys, student,
                         own_chapter or name_chapter, "notebook" if own_chapter else ("file name" if name_chapter else ""),
                         invalid)
        if rows is not None:
            hits = [s for s, ks in rkeys.items() if ks & set(keys)]
            if len(hits) != 1:
                out.unmatched.append((shown, "matches no roster student" if not hits else f"matches several: {', '.join(hits)}"))
                continue
            sid = hits[0]
        else:
            sid = re.sub(r"[^A-Za-z0-9_.-]+", "_", student).strip("_.")
            if not sid:
                out.unmatched.append((shown, "no student name in the file or folder name"))
                continue
        per_student.setdefault(sid, []).append(cand)
    for sid, cands in per_student.items():
        def rank(c: Candidate):
            right = c.chapter in (None, chapter)
            return (right, c.mtime, c.resubmission, c.shown)
        cands.sort(key=rank)
        out.chosen[sid] = cands[-1]
        out.superseded += [(c, sid) for c in cands[:-1]]
    if rows is not None:
        out.missing = [r["student"] for r in rows if r["student"] not in out.chosen]
    return out
