"""What a submission's path says: the student (a course site's ``name_uid_sid`` prefix or folder, Colab's
``Copy of``, resubmission suffixes), the chapter its name mentions, and a safe file stem for each student.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

_COPY_OF = re.compile(r"^(?:copy\s+of\s+)+", re.IGNORECASE)


_RESUB = re.compile(r"(?:-(\d+)|\s*\((\d+)\))$")


_COURSE_SITE = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)_(?P<rest>.*)$", re.IGNORECASE)


_COURSE_SITE_DIR = re.compile(r"^(?P<name>[^_\s]+?)_(?:late_)?(?P<uid>\d+)_(?P<sid>\d+)$", re.IGNORECASE)


_GENERIC_DIRS = {"", "submissions", "submission", "notebooks", "files", "unzipped", "__macosx"}


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
