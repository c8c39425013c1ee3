"""Where the course lives and the settings an instructor may change (pyproject [tool.scalelib-course])."""

from __future__ import annotations

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


@dataclass(frozen=True)
class Settings:
    install_source: str  # what the Colab set-up cell pip-installs ("": not configured)
    cell_timeout_s: int  # per-cell limit while grading
    notebook_timeout_s: int = 3600  # per-notebook limit while grading
    memory_mb: int = 6144  # address-space limit of one grading kernel (0: none)
    disk_mb: int = 1024  # all files of one grading kernel together (a tmpfs, also counted as its memory)
    max_output_bytes: int = 1_000_000  # text output kept per graded notebook


def settings(root: Path = ROOT) -> Settings:
    data = tomllib.loads((root / "pyproject.toml").read_text())
    own = data.get("tool", {}).get("scalelib-course", {})
    try:
        return Settings(install_source=str(own["install-source"]).strip(),
                        cell_timeout_s=int(own.get("cell-timeout-s", 600)),
                        notebook_timeout_s=int(own.get("notebook-timeout-s", 3600)),
                        memory_mb=int(own.get("memory-mb", 6144)),
                        disk_mb=int(own.get("disk-mb", 1024)),
                        max_output_bytes=int(own.get("max-output-bytes", 1_000_000)))
    except KeyError:
        raise SystemExit(
            "pyproject.toml has no [tool.scalelib-course] install-source; add the pip requirement the "
            "Colab set-up cell should install, e.g. install-source = \"scalelib @ git+https://...@main\" "
            "(or install-source = \"\" to leave it unset)"
        ) from None


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
