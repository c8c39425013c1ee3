"""Build chapters/ (student notebooks) from solutions/ (nbgrader sources), deterministically.

nbgrader removes the solution regions and hidden tests; we then drop outputs and execution counts and
stamp the Colab install source from pyproject, so releasing twice gives identical bytes.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import nbformat

from autograder import course, nbgrader_course

_PIP_LINE = re.compile(r'^(\s*%pip install -q )"[^"]*"\s*$', re.MULTILINE)


def stamp_install_source(nb, install_source: str) -> int:
    """Point the set-up cell's `%pip install` at ``install_source``; returns cells changed."""
    changed = 0
    for cell in nb.cells:
        if "setup" in cell.get("metadata", {}).get("tags", []):
            new, n = _PIP_LINE.subn(lambda m: f'{m.group(1)}"{install_source}"', cell.source)
            cell.source, changed = new, changed + n
    if changed != 1:
        raise RuntimeError("expected exactly one `%pip install -q \"...\"` line in a cell tagged 'setup'")
    return changed


def normalize(nb) -> None:
    """Outputs and counts off; metadata reduced to what students and nbgrader need."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)


def render(chapter: str, root: Path = course.ROOT) -> str:
    """The student notebook for ``chapter`` as text."""
    settings = course.settings(root)
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        _, released = nbgrader_course.generate(Path(tmp), chapter, root / "solutions")
        nb = nbformat.read(released, as_version=4)
    normalize(nb)
    stamp_install_source(nb, settings.install_source)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def release(root: Path = course.ROOT, chapters: list[str] | None = None) -> list[Path]:
    """Write chapters/<name>.ipynb for every chapter (or those given); returns the files written."""
    out_dir = root / "chapters"
    out_dir.mkdir(exist_ok=True)
    written = []
    for name in chapters or course.chapter_names(root):
        target = out_dir / f"{name}.ipynb"
        target.write_text(render(name, root))
        written.append(target)
    return written


def stale(root: Path = course.ROOT) -> list[str]:
    """Chapters whose committed student notebook differs from a fresh release (or is missing)."""
    out = []
    for name in course.chapter_names(root):
        target = root / "chapters" / f"{name}.ipynb"
        if not target.exists() or target.read_text() != render(name, root):
            out.append(name)
    return out
