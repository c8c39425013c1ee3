"""Where the course lives and the settings an instructor may change (pyproject [tool.scalelib-course])."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
CHAPTERS = ROOT / "chapters"

CODE_STUB = '# YOUR CODE HERE\nraise NotImplementedError("write your answer here")'
ANSWER_SUFFIX = "-answer"  # an answer cell's nbgrader grade_id is its exercise's id and this

MEMORY_MB = 6144  # the one default memory limit of a grading kernel (pyproject's memory-mb overrides it)


def answer_id(exercise: str) -> str:
    """The grade_id of ``exercise``'s answer cell."""
    return exercise + ANSWER_SUFFIX


def exercise_of_answer(grade_id: str) -> str | None:
    """The exercise whose answer cell has this grade_id; None for any other cell's id."""
    return grade_id[: -len(ANSWER_SUFFIX)] if grade_id.endswith(ANSWER_SUFFIX) else None


@dataclass(frozen=True)
class Settings:
    install_source: str  # what the Colab set-up cell pip-installs ("": not configured)
    cell_timeout_s: int  # per-cell limit while grading
    notebook_timeout_s: int = 3600  # per-notebook limit while grading
    memory_mb: int = MEMORY_MB  # one grading kernel's sandbox, all its processes together (0: none)
    disk_mb: int = 1024  # all files of one grading kernel together (a tmpfs, also counted as its memory)
    max_output_bytes: int = 1_000_000  # text output kept per graded notebook


def settings(root: Path = ROOT) -> Settings:
    return settings_from_text((root / "pyproject.toml").read_text(encoding="utf-8"))


def settings_from_text(text: str) -> Settings:
    data = tomllib.loads(text)
    own = data.get("tool", {}).get("scalelib-course", {})
    try:
        return Settings(install_source=str(own["install-source"]).strip(),
                        cell_timeout_s=int(own.get("cell-timeout-s", 600)),
                        notebook_timeout_s=int(own.get("notebook-timeout-s", 3600)),
                        memory_mb=int(own.get("memory-mb", MEMORY_MB)),
                        disk_mb=int(own.get("disk-mb", 1024)),
                        max_output_bytes=int(own.get("max-output-bytes", 1_000_000)))
    except KeyError:
        raise SystemExit(
            "pyproject.toml has no [tool.scalelib-course] install-source; add the pip requirement the "
            "Colab set-up cell should install, e.g. install-source = \"scalelib @ git+https://...@main\" "
            "(or install-source = \"\" to leave it unset)"
        ) from None


_INSTALL_SOURCE_LINE = re.compile(r'^install-source\s*=\s*"[^"\n]*"[ \t]*$', re.MULTILINE)


def store_install_source(value: str, root: Path = ROOT) -> bool:
    """Write ``value`` as pyproject's ``[tool.scalelib-course] install-source``, the one place ``release``, a partial
    ``release`` and ``check`` read it from; returns whether the file changed. Commit pyproject.toml with chapters/."""
    value = value.strip()
    if any(c in value for c in '"\\\n\r'):
        raise SystemExit(f"install source {value!r} must not contain quotes, backslashes or line breaks")
    path = root / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    start = text.find("[tool.scalelib-course]")
    end = text.find("\n[", start + 1) if start >= 0 else -1
    section = text[start:] if end < 0 else text[start:end]
    if start < 0 or len(_INSTALL_SOURCE_LINE.findall(section)) != 1:
        raise SystemExit(f"{path}: cannot store the install source: [tool.scalelib-course] needs exactly one line "
                         'install-source = "..." (add it, e.g. install-source = "")')
    new_section = _INSTALL_SOURCE_LINE.sub(lambda _: f'install-source = "{value}"', section)
    new = text[:start] + new_section + text[start + len(section):]
    if new == text:
        return False
    if settings_from_text(new).install_source != value:  # what every reader will see
        raise SystemExit(f"{path}: storing the install source did not give {value!r}; edit the file by hand")
    path.write_text(new, encoding="utf-8")
    return True


def chapter_names(root: Path = ROOT) -> list[str]:
    """Chapters are the notebooks in solutions/, named like '01_rooflines'."""
    return sorted(p.stem for p in (root / "solutions").glob("[0-9][0-9]_*.ipynb"))


def resolve_chapter(name: str, root: Path = ROOT) -> str:
    """Accept '01_rooflines', '01' or 'rooflines'."""
    names = chapter_names(root)
    hits = [n for n in names if name in (n, n.split("_", 1)[0], n.split("_", 1)[1])]
    if len(hits) != 1:
        raise SystemExit(f"unknown chapter {name!r}; chapters are: {', '.join(names)}")
    return hits[0]
