"""autograder.submissions: unpacking an export entry by entry, and who each file belongs to.

Hostile-run findings of issue #14 covered here: a bad zip entry stops nothing (4), unpacking has a total and a
ratio limit (5), every entry gets a row saying what was done with it (8), distinct names keep distinct ids (9).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import zipfile
from pathlib import Path

import pytest

from autograder import course, report, submissions
from autograder.submissions import UnpackLimits

pytestmark = pytest.mark.grading

CH = "01_rooflines"
NB = json.dumps({"cells": [], "metadata": {"scalelib": {"chapter": CH}}, "nbformat": 4, "nbformat_minor": 5})


def _zip(entries: list[tuple[str, bytes | str]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def _collect(tmp_path: Path, data: bytes, limits: UnpackLimits | None = None, roster: str | None = None):
    archive = tmp_path / "export.zip"
    archive.write_bytes(data)
    roster_path = None
    if roster is not None:
        roster_path = tmp_path / "roster.csv"
        roster_path.write_text(roster, encoding="utf-8")
    mapping = submissions.collect(archive, CH, course.chapter_names(), tmp_path / "work", roster_path, limits)
    return archive, mapping


def _rows(tmp_path: Path, mapping: submissions.Mapping) -> dict[str, dict[str, str]]:
    report.write_manifest(tmp_path / "submissions.csv", mapping)
    with (tmp_path / "submissions.csv").open(encoding="utf-8", newline="") as f:
        return {row["file"]: row for row in csv.DictReader(f)}


def test_a_bad_entry_is_that_entrys_problem(tmp_path):
    """A file entry then a folder of the same name, a wrong CRC, a wrong stored size: each listed, none fatal."""
    data = bytearray(_zip([("alice.ipynb", NB), ("bob", NB), ("bob/", b""), ("bob/01_rooflines.ipynb", NB),
                           ("carol.ipynb", NB.replace("cells", "cellz"))], zipfile.ZIP_STORED))
    at = data.find(b"cellz")
    data[at:at + 5] = b"cells"  # the bytes change, the stored CRC does not
    sized = bytearray(_zip([("dave.ipynb", NB)]))
    cd = sized.find(b"PK\x01\x02")
    struct.pack_into("<I", sized, cd + 24, 10)  # the central directory's uncompressed size is wrong
    for name, blob in (("one.zip", bytes(data)), ("two.zip", bytes(sized))):
        sub = tmp_path / name
        sub.mkdir()
        archive, mapping = _collect(sub, blob)
        rows = _rows(sub, mapping)
        names = zipfile.ZipFile(archive).namelist()
        assert set(names) <= set(rows), set(names) - set(rows)  # every entry has a row
        if name == "one.zip":
            assert set(mapping.chosen) == {"alice"}
            assert rows["bob/01_rooflines.ipynb"]["use"] == "skipped" and "bob" in rows["bob/01_rooflines.ipynb"]["why"]
            assert rows["carol.ipynb"]["use"] == "skipped" and "CRC" in rows["carol.ipynb"]["why"]
            assert rows["alice.ipynb"]["use"] == "graded"
        else:
            assert rows["dave.ipynb"]["use"] == "skipped" and "bad zip entry" in rows["dave.ipynb"]["why"]


def test_unpacking_has_a_total_and_a_ratio_limit(tmp_path):
    incompressible = [(f"s{i}/01_rooflines.ipynb", os.urandom(600_000)) for i in range(6)]
    bomb = [(f"z{i}.ipynb", b"\0" * (3 << 20)) for i in range(4)]
    limits = UnpackLimits(max_file_bytes=4 << 20, max_total_bytes=2 << 20, max_ratio=200)
    _, mapping = _collect(tmp_path, _zip(incompressible + bomb), limits)
    why = dict(mapping.skipped)
    assert all("too large" in why[name] for name, _ in bomb), why
    unpacked = sum(p.stat().st_size for p in (tmp_path / "work" / "unzipped").rglob("*") if p.is_file())
    assert unpacked <= limits.max_total_bytes
    over = [name for name, _ in incompressible if name in why]
    assert len(over) == 3 and all("too large" in why[n] for n in over)


def test_unsafe_paths_are_listed_not_dropped(tmp_path):
    archive, mapping = _collect(tmp_path, _zip([("../evil.ipynb", NB), ("/abs/x.ipynb", NB), ("ok/alice.ipynb", NB),
                                                ("ok/", b"")]))
    rows = _rows(tmp_path, mapping)
    for name in zipfile.ZipFile(archive).namelist():
        assert name in rows, name
    assert "unsafe path" in rows["../evil.ipynb"]["why"] and "unsafe path" in rows["/abs/x.ipynb"]["why"]
    assert rows["ok/"]["use"] == "skipped"
    assert not (tmp_path / "evil.ipynb").exists() and not (tmp_path / "work" / "evil.ipynb").exists()


def test_distinct_names_keep_distinct_ids(tmp_path):
    names = ["zoë", "zoé", "zoe", "Zoe", "José", "jose", "王芳", "李芳", "a b", "a_b"]
    _, mapping = _collect(tmp_path, _zip([(f"{n}.ipynb", NB) for n in names]))
    assert len(mapping.chosen) == len(names), sorted(mapping.chosen)
    stems = {submissions.file_stem(s) for s in mapping.chosen}
    assert len(stems) == len(names) and len({s.lower() for s in stems}) == len(names)  # case-insensitive file systems
    for stem in stems:
        assert stem.isascii() and "/" not in stem and stem not in (".", "..") and len(stem) < 120
    # the same name typed two ways (composed or not) is one student
    assert submissions.student_id("zoe\u0308") == submissions.student_id("zo\u00eb")
    assert submissions.file_stem("carol") == "carol"


def test_a_roster_keeps_accented_names_apart_and_matches_ascii_spellings(tmp_path):
    roster = "student,name\nzoe1,Zoë Martin\nzoe2,Zoé Martin\n"  # course sites write last name + first name
    entries = [("martinzoë_1_1_01_rooflines.ipynb", NB), ("martinzoé_2_2_01_rooflines.ipynb", NB)]
    _, mapping = _collect(tmp_path, _zip(entries), roster=roster)
    assert {s: c.shown for s, c in mapping.chosen.items()} == {"zoe1": entries[0][0], "zoe2": entries[1][0]}
    (tmp_path / "b").mkdir()
    _, mapping = _collect(tmp_path / "b", _zip([("Zoe Martin.ipynb", NB)]), roster="student,name\nzm,Zoë Martin\n")
    assert set(mapping.chosen) == {"zm"}


def test_a_course_sites_student_folder_names_the_same_student_as_its_flat_file_name():
    chapters = course.chapter_names()
    nested = submissions.parse_name(Path("patel_1006_5006/Copy of 04_transformers.ipynb"), chapters)
    flat = submissions.parse_name(Path("patel_1006_5006_04_transformers.ipynb"), chapters)
    assert nested[0] == flat[0] == "patel"
    assert {"1006", "5006"} <= set(nested[1]) and nested[3] == flat[3] == "04_transformers"


def test_name_parsing():
    chapters = course.chapter_names()
    assert submissions.parse_name(Path("smith_123_456_Copy of 01_rooflines (2).ipynb"), chapters)[0::2] == ("smith", 2)
    nested = Path("sub/bob/Copy of 01_rooflines-3.ipynb")
    student, _keys, resub, chapter = submissions.parse_name(nested, chapters, wrapper=1)  # 'sub/' wraps the export
    assert (student, resub, chapter) == ("bob", 3, CH)
    assert submissions.parse_name(nested, chapters)[0] == "sub"  # unwrapped, 'sub' is the uploader's folder
    assert submissions.parse_name(Path("alice.ipynb"), chapters)[0] == "alice"


def test_the_export_wrapper_is_the_folders_every_notebook_shares():
    wrap = submissions.export_wrapper
    assert wrap([Path("w/alice/x.ipynb"), Path("w/bob/y/x.ipynb")]) == 1
    assert wrap([Path("w/alice/x.ipynb"), Path("w/alice/sub/y.ipynb")]) == 1  # one student: their folder stays theirs
    assert wrap([Path("alice/x.ipynb"), Path("alice/sub/y.ipynb")]) == 0
    assert wrap([Path("alice/x.ipynb"), Path("bob.ipynb")]) == 0
    assert wrap([Path("w/adams_1_2/sub/x.ipynb")]) == 1  # a course site's per-student folder is never a wrapper
    assert wrap([Path("w/adams_1_2_01_rooflines.ipynb"), Path("w/brown_3_4_01_rooflines.ipynb")]) == 1  # flat, wrapped
    assert wrap([Path("w/alice.ipynb"), Path("w/bob.ipynb")]) == 1
    # one folder whose names do not show two students is one student's: the outermost folder is the uploader's
    assert wrap([Path("w/alice/Copy of 01_rooflines.ipynb"), Path("w/alice/01_rooflines (1).ipynb")]) == 0
    assert wrap([Path("alice/bob/brown_1002_5002_01_rooflines.ipynb")]) == 0
    assert wrap([]) == 0


# Issue 19, class 5: who a file belongs to is decided by the uploader's folder (or the site's own prefix of a flat
# file name), never by a name the student chose inside it; and no two ids share a results/ or feedback/ file.
IMPOSTOR_ROSTER = "student,name,id\nalice,Alice Adams,1001\nbob,Bob Brown,1002\n"


def _timed_zip(entries: list[tuple[str, str, int]]) -> bytes:
    """(name, content, hour of 2025-03-01) per entry: the entry time decides which file of a student is latest."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, hour in entries:
            zf.writestr(zipfile.ZipInfo(name, date_time=(2025, 3, 1, hour, 0, 0)), data)
    return buf.getvalue()


@pytest.mark.parametrize("wrapped", ["", "Chapter 1 submissions/"])
@pytest.mark.parametrize("with_roster", [False, True])
def test_a_name_inside_the_uploaders_folder_cannot_claim_another_student(tmp_path, wrapped, with_roster):
    """Adams uploads, later than Brown, files named as Brown's course-site file and folder. They are Adams's
    (graded as Adams: the uploader is known for certain, and the latest of Adams's own files wins as for any
    student; not unmatched, which would drop a file its uploader may mean as their answer); Brown's real
    submission stands."""
    real_brown = f"{wrapped}brown_1002_5003/Copy of 01_rooflines.ipynb"
    entries = [(f"{wrapped}adams_1001_5001/01_rooflines.ipynb", NB, 9),
               (real_brown, NB, 10),
               (f"{wrapped}adams_1001_5001/brown_1002_5002_01_rooflines.ipynb", NB, 11),
               (f"{wrapped}adams_1001_5001/brown_1002_5002/01_rooflines.ipynb", NB, 12),
               (f"{wrapped}adams_1001_5001/bob/01_rooflines.ipynb", NB, 13)]
    _, mapping = _collect(tmp_path, _timed_zip(entries), roster=IMPOSTOR_ROSTER if with_roster else None)
    adams, brown = ("alice", "bob") if with_roster else ("adams", "brown")
    assert set(mapping.chosen) == {adams, brown} and not mapping.unmatched, mapping
    assert mapping.chosen[brown].shown == real_brown
    assert mapping.chosen[adams].shown == entries[-1][0]  # the uploader's latest file
    assert {c.shown: s for c, s in mapping.superseded} == {name: adams for name, _, _ in entries[:-1]
                                                           if name != real_brown}
    rows = _rows(tmp_path, mapping)
    assert rows[real_brown]["use"] == "graded" and rows[real_brown]["student"] == brown


def test_a_flat_course_site_name_is_the_sites_prefix_whatever_the_student_named_the_file(tmp_path):
    entries = [("brown_1002_5003_01_rooflines.ipynb", NB, 10),
               ("adams_1001_5001_brown_1002_5002_01_rooflines.ipynb", NB, 11)]  # Adams named the upload as Brown's
    for wrapped in ("", "Chapter 1/"):  # as the site exports it, or zipped again inside a folder
        for roster in (None, IMPOSTOR_ROSTER):
            sub = tmp_path / f"{bool(wrapped)}-{roster is None}"
            sub.mkdir()
            _, mapping = _collect(sub, _timed_zip([(wrapped + n, c, h) for n, c, h in entries]), roster=roster)
            named = {s: c.shown for s, c in mapping.chosen.items()}
            brown, adams = (wrapped + n for n, _, _ in entries)
            assert named == ({"brown": brown, "adams": adams} if roster is None else {"bob": brown, "alice": adams})


def _old_file_stem(student: str) -> str:
    """The naming before issue 19: a plain id as itself, else readable part + 10 hex digits; not one-to-one."""
    import hashlib
    import re
    import unicodedata

    text = unicodedata.normalize("NFC", student)
    if re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", text):
        return text
    readable = re.sub(r"[^a-z0-9._-]+", "_", submissions.fold(text) or "student")[:60].strip("_.") or "student"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def test_no_two_ids_share_a_file_stem(tmp_path):
    """A folder named to equal another student's on-disk stem used to share their results/ and feedback/ file."""
    victim = "zoë"
    impostor = _old_file_stem(victim)  # 'zoe-' + 10 hex digits: a plain id, so it was its own stem
    assert _old_file_stem(impostor) == _old_file_stem(victim)  # the collision being fixed
    entries = [(f"{victim}/01_rooflines.ipynb", NB), (f"{impostor}/01_rooflines.ipynb", NB)]
    _, mapping = _collect(tmp_path, _zip(entries))
    assert set(mapping.chosen) == {victim, impostor}
    assert submissions.file_stem(victim) != submissions.file_stem(impostor)
    ids = [victim, impostor, "zoe", "Zoe", "ZOE", "zoé", "zoe\u0308", "Con", "con", "con.x", "nul", "com1", "a~b",
           "a b", "a_b", "a-b", "a.b", ".hidden", "..", "x" * 100, "x" * 101, "王芳", "李芳", "", "-", "~",
           "\udcff", "Zoë Martin", "zoe martin", "zoemartin"]
    ids += [submissions.file_stem(i) for i in ids]  # an id chosen to equal any stem, plain or hashed
    ids = list(dict.fromkeys(ids))
    stems = [submissions.file_stem(i) for i in ids]
    assert len(set(stems)) == len(ids)
    assert len({s.casefold() for s in stems}) == len(ids)  # a case-insensitive file system
    for stem in stems:
        assert re.fullmatch(r"[a-z0-9][a-z0-9._~-]*", stem) and len(stem) <= 100, stem
        assert stem.split(".")[0] not in {"con", "prn", "aux", "nul", "com1", "lpt1"}, stem
    assert submissions.file_stem("carol") == "carol" and submissions.file_stem("zoe-1234") == "zoe-1234"
    hashed = submissions.file_stem("Zoë Martin")
    assert hashed.startswith("zoemartin~") and len(hashed.split("~")[1]) == 32
