"""Which chapter a notebook is, from its content: its lines against each released chapter's (a signature),
else its ``metadata.scalelib.chapter``; read with a cap on bytes and cells.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from pathlib import Path

from autograder.intake.archives import NotRegular, TooLarge, UnpackLimits, read_capped

RELEASED = Path(__file__).resolve().parents[2] / "chapters"  # the released notebooks (course.CHAPTERS)


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


def notebook_chapter(path: Path, max_bytes: int = UnpackLimits.max_file_bytes,
                     signatures: dict[str, frozenset[str]] | None = None) -> tuple[str | None, str, str | None]:
    """(chapter from the notebook's own metadata, or None; '' or why the file is not a notebook; chapter from
    its content (:func:`content_chapter`), or None). Reads at most ``max_bytes``."""
    try:
        data, _ = read_capped(path, max_bytes)
    except (TooLarge, NotRegular) as err:
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
