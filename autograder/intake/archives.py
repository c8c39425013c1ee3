"""Unpacking an export (a zip or a folder) entry by entry under limits: sizes, ratios, counts, and only
regular files; nothing is extracted outside the work folder and nothing in it runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path


@dataclass(frozen=True)
class UnpackLimits:
    """What a zip may unpack to: bytes per file, bytes in all, and how far one entry may inflate."""

    max_file_bytes: int = 64 * 2**20
    max_total_bytes: int = 2 * 2**30
    max_ratio: float = 200.0  # uncompressed / compressed, for entries over 1 MiB


class TooLarge(Exception):
    pass


class NotRegular(Exception):
    pass


def read_capped(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (not followed if a link) and its status, never more than ``cap``
    bytes read or held: the size is checked before reading, and the read stops past ``cap`` whatever the size said
    (a file can grow between the two). Raises TooLarge or NotRegular, or OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("not a regular file (a pipe, socket or device), not read")
        if st.st_size > cap:
            raise TooLarge(f"too large: {st.st_size} bytes (the limit is {cap})")
        chunks, held = [], 0
        while held <= cap:
            chunk = f.read(min(1 << 20, cap + 1 - held))
            if not chunk:
                break
            chunks.append(chunk)
            held += len(chunk)
        if held > cap:
            raise TooLarge(f"too large: more than {cap} bytes (it grew while being read; the limit is {cap})")
        return b"".join(chunks), st


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
                raise TooLarge(f"too large: more than {cap} bytes when unpacked")
            if written > inflated:
                raise TooLarge(f"too large: inflates more than {max_ratio:.0f}x (more than its header said)")
            out.write(chunk)


def why_unreadable(err: BaseException) -> str:
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
        if isinstance(err, TooLarge):
            return 0, str(err)
        if isinstance(err, (FileExistsError, NotADirectoryError, IsADirectoryError)):
            return 0, f"clashes with another entry ({name.parts[0]} is both a file and a folder), not unpacked"
        if isinstance(err, (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
                            NotImplementedError)):
            return 0, f"bad zip entry, not unpacked: {why_unreadable(err)}"
        raise


def _unpack_zip(source: Path, target: Path, limits: UnpackLimits) -> Unpacked:
    out = Unpacked(target, owned=True)
    total = 0
    target.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as err:
        # the zip's table of contents itself (not one entry's bytes) is unreadable: nothing can be listed
        raise SystemExit(f"{source}: not a readable zip ({why_unreadable(err)}); unpack it with another tool and grade "
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
                written, why = 0, f"could not be unpacked: {why_unreadable(err)}"
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
