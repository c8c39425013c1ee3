"""autograder.intake.collection: unpacking an export entry by entry, and who each file belongs to.

Hostile-run findings of issue #14 covered here: a bad zip entry stops nothing (4), unpacking has a total and a
ratio limit (5), every entry gets a row saying what was done with it (8), distinct names keep distinct ids (9).
Of issue #19: a folder's entries fail one by one, never the batch (3); a notebook over the limit is refused before
it is read, and read with a cap (4); the chapter comes from the content (8). The zip side of 3, and 6 and 8 as a
grading run shows them, are in test_grading.py.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import tracemalloc
import types
import zipfile
from pathlib import Path

import pytest

from autograder import course, safe_text
from autograder.grading import class_run
from autograder.intake import archives, chapter_match, collection, file_names
from autograder.intake.archives import UnpackLimits
from autograder.judging import student_steps
from autograder.outputs import tables

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
    mapping = collection.collect(archive, CH, course.chapter_names(), tmp_path / "work", roster_path, limits)
    return archive, mapping


def _rows(tmp_path: Path, mapping: collection.Mapping) -> dict[str, dict[str, str]]:
    tables.write_manifest(tmp_path / "submissions.csv", mapping)
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
    stems = {file_names.file_stem(s) for s in mapping.chosen}
    assert len(stems) == len(names) and len({s.lower() for s in stems}) == len(names)  # case-insensitive file systems
    for stem in stems:
        assert stem.isascii() and "/" not in stem and stem not in (".", "..") and len(stem) < 120
    # the same name typed two ways (composed or not) is one student
    assert file_names.student_id("zoe\u0308") == file_names.student_id("zo\u00eb")
    assert file_names.file_stem("carol") == "carol"


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
    nested = file_names.parse_name(Path("patel_1006_5006/Copy of 04_transformers.ipynb"), chapters)
    flat = file_names.parse_name(Path("patel_1006_5006_04_transformers.ipynb"), chapters)
    assert nested[0] == flat[0] == "patel"
    assert {"1006", "5006"} <= set(nested[1]) and nested[3] == flat[3] == "04_transformers"


def test_name_parsing():
    chapters = course.chapter_names()
    assert file_names.parse_name(Path("smith_123_456_Copy of 01_rooflines (2).ipynb"), chapters)[0::2] == ("smith", 2)
    nested = Path("sub/bob/Copy of 01_rooflines-3.ipynb")
    student, _keys, resub, chapter = file_names.parse_name(nested, chapters, wrapper=1)  # 'sub/' wraps the export
    assert (student, resub, chapter) == ("bob", 3, CH)
    assert file_names.parse_name(nested, chapters)[0] == "sub"  # unwrapped, 'sub' is the uploader's folder
    assert file_names.parse_name(Path("alice.ipynb"), chapters)[0] == "alice"


def test_a_folders_entries_fail_one_by_one_never_the_batch(tmp_path, monkeypatch, capsys):
    """Issue #19, 3 (folder mode): a pipe, links, a name that is not UTF-8, an entry whose reading raises: each is
    its own row; and an export with nothing gradable still leaves grades.csv and submissions.csv saying why."""
    folder = tmp_path / "class"
    (folder / "bob").mkdir(parents=True)
    (folder / "alice.ipynb").write_text(NB)
    (folder / "bob" / "01_rooflines.ipynb").write_text(NB)
    os.mkfifo(folder / "pipe.ipynb")  # opening it to read would block a plain reader
    (folder / "link.ipynb").symlink_to("/etc/passwd")
    (folder / "dirlink").symlink_to(tmp_path)
    with open(os.path.join(os.fsencode(folder), b"\xff\xfe-raw.ipynb"), "w") as f:
        f.write(NB)
    real = file_names.parse_name

    def flaky(rel, chapters, wrapper=0):
        if rel.parts[0] == "bob":
            raise RuntimeError("an unforeseen failure")
        return real(rel, chapters, wrapper)

    monkeypatch.setattr(collection, "parse_name", flaky)
    mapping = collection.collect(folder, CH, course.chapter_names(), tmp_path / "work")
    rows = _rows(tmp_path, mapping)
    assert rows["alice.ipynb"]["use"] == "graded"
    assert rows["pipe.ipynb"]["use"] == "skipped" and "not a regular file" in rows["pipe.ipynb"]["why"]
    assert "symbolic link" in rows["link.ipynb"]["why"] and "symbolic link" in rows["dirlink"]["why"]
    assert rows["bob/01_rooflines.ipynb"]["why"] == "could not be read: RuntimeError: an unforeseen failure"
    raw = "\\udcff\\udcfe-raw.ipynb"  # undecodable bytes, escaped (and the file still graded)
    assert rows[raw]["use"] == "graded" and rows[raw]["student"] == "'-raw"  # a formula-looking id, neutralised
    assert mapping.chosen[safe_text.uncell(rows[raw]["student"])].shown == raw
    monkeypatch.undo()
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    os.mkfifo(nothing / "pipe.ipynb")
    (nothing / "readme.txt").write_text("hello")
    out = tmp_path / "out"
    with pytest.raises(SystemExit, match="no notebooks found"):
        class_run.grade(nothing, CH, out, allow_unsandboxed=True, quiet=True)
    assert (out / "grades.csv").read_bytes().decode() == '"student","chapter","score","max_score","status","detail","file"' + \
        "".join(f',"{e}"' for e in _exercise_ids()) + "\r\n"
    assert {r["file"]: r["use"] for r in csv.DictReader((out / "submissions.csv").open())} == {
        "pipe.ipynb": "skipped", "readme.txt": "unmatched"}


def _exercise_ids():
    from autograder.instructor import chapter_model

    return list(chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb").exercises)


def test_an_oversized_notebook_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """Issue #19, 4: a folder's notebook over the limit costs no memory (its size is checked before it is read)
    and is that student's "invalid notebook"; a file that grows after the size check is read no further than the
    limit; the grader grades its own copy, which cannot grow or change after it was read."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.ipynb").write_text(NB)
    (folder / "mallory.ipynb").write_text(NB)
    with open(folder / "hoarder.ipynb", "wb") as f:
        f.truncate(512 << 20)  # sparse: 512 MiB that take no disk
    limits = UnpackLimits(max_file_bytes=1 << 20)
    chapter_match.chapter_signatures(Path(course.CHAPTERS), tuple(course.chapter_names()))  # built once per process
    real_fstat = os.fstat

    def shrunk(fd):  # mallory's file says 10 bytes when the grader checks, then is 4 MiB when read
        st = real_fstat(fd)
        if st.st_ino == (folder / "mallory.ipynb").stat().st_ino:
            with open(folder / "mallory.ipynb", "ab") as f:
                f.write(b" " * (4 << 20))
            return types.SimpleNamespace(st_mode=st.st_mode, st_size=10, st_mtime=st.st_mtime)
        return st

    monkeypatch.setattr(archives.os, "fstat", shrunk)
    tracemalloc.start()
    try:
        mapping = collection.collect(folder, CH, course.chapter_names(), tmp_path / "work", None, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    monkeypatch.undo()
    assert peak < 16 << 20, peak
    for who, detail in (("hoarder", f"too large: {512 << 20} bytes (the limit is {1 << 20})"),
                        ("mallory", f"too large: more than {1 << 20} bytes (it grew while being read; the limit is "
                                    f"{1 << 20})")):
        r = student_steps.screen(CH, who, mapping.chosen[who], 15.0, ["ex"], "fp")
        assert r is not None and (r.status, r.score, r.detail) == ("invalid notebook", 0.0, detail)
    alice = mapping.chosen["alice"]
    assert student_steps.screen(CH, "alice", alice, 15.0, ["ex"], "fp") is None
    assert folder not in alice.path.parents and alice.path.read_bytes() == NB.encode()
    with open(folder / "alice.ipynb", "ab") as f:  # the original changes after it was read: the copy does not
        f.write(b" " * 100)
    assert alice.path.read_bytes() == NB.encode()
    assert all(p.stat().st_size <= limits.max_file_bytes for p in (tmp_path / "work").rglob("*") if p.is_file())


def test_the_chapter_comes_from_the_content(tmp_path):
    """Issue #19, 8: a notebook's own cells decide its chapter when they clearly match one released chapter, over
    its name and its metadata; when they do not, the metadata, then the name."""
    def stripped(chapter, meta_chapter=None):
        nb = json.loads((course.CHAPTERS / f"{chapter}.ipynb").read_text(encoding="utf-8"))
        for c in nb["cells"]:
            c["metadata"] = {}
        nb["metadata"] = {"scalelib": {"chapter": meta_chapter}} if meta_chapter else {}
        return json.dumps(nb)

    entries = [("eve_01_rooflines.ipynb", stripped("02_tpus")),  # named as chapter 1, no metadata
               ("fay_01_rooflines.ipynb", stripped("02_tpus", CH)),  # metadata says chapter 1 too
               ("gil.ipynb", stripped(CH)),  # no chapter in the name, no metadata
               ("hal_01_rooflines.ipynb", NB)]  # no content to go by: its metadata
    _, mapping = _collect(tmp_path, _zip(entries))
    got = {s: (c.chapter, c.chapter_from) for s, c in mapping.chosen.items()}
    assert got == {"eve": ("02_tpus", "content"), "fay": ("02_tpus", "content"), "gil": (CH, "content"),
                   "hal": (CH, "notebook")}
    r = student_steps.screen(CH, "eve", mapping.chosen["eve"], 15.0, ["ex"], "fp")
    assert r is not None and (r.status, r.score) == ("wrong chapter", 0.0) and "02_tpus" in r.detail


def test_the_export_wrapper_is_the_folders_every_notebook_shares():
    wrap = file_names.export_wrapper
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
    readable = re.sub(r"[^a-z0-9._-]+", "_", file_names.fold(text) or "student")[:60].strip("_.") or "student"
    return f"{readable}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def test_no_two_ids_share_a_file_stem(tmp_path):
    """A folder named to equal another student's on-disk stem used to share their results/ and feedback/ file."""
    victim = "zoë"
    impostor = _old_file_stem(victim)  # 'zoe-' + 10 hex digits: a plain id, so it was its own stem
    assert _old_file_stem(impostor) == _old_file_stem(victim)  # the collision being fixed
    entries = [(f"{victim}/01_rooflines.ipynb", NB), (f"{impostor}/01_rooflines.ipynb", NB)]
    _, mapping = _collect(tmp_path, _zip(entries))
    assert set(mapping.chosen) == {victim, impostor}
    assert file_names.file_stem(victim) != file_names.file_stem(impostor)
    ids = [victim, impostor, "zoe", "Zoe", "ZOE", "zoé", "zoe\u0308", "Con", "con", "con.x", "nul", "com1", "a~b",
           "a b", "a_b", "a-b", "a.b", ".hidden", "..", "x" * 100, "x" * 101, "王芳", "李芳", "", "-", "~",
           "\udcff", "Zoë Martin", "zoe martin", "zoemartin"]
    ids += [file_names.file_stem(i) for i in ids]  # an id chosen to equal any stem, plain or hashed
    ids = list(dict.fromkeys(ids))
    stems = [file_names.file_stem(i) for i in ids]
    assert len(set(stems)) == len(ids)
    assert len({s.casefold() for s in stems}) == len(ids)  # a case-insensitive file system
    for stem in stems:
        assert re.fullmatch(r"[a-z0-9][a-z0-9._~-]*", stem) and len(stem) <= 100, stem
        assert stem.split(".")[0] not in {"con", "prn", "aux", "nul", "com1", "lpt1"}, stem
    assert file_names.file_stem("carol") == "carol" and file_names.file_stem("zoe-1234") == "zoe-1234"
    hashed = file_names.file_stem("Zoë Martin")
    assert hashed.startswith("zoemartin~") and len(hashed.split("~")[1]) == 32
