"""Build chapters/ (student notebooks) from solutions/ (nbgrader sources), deterministically.

nbgrader removes the solution regions and hidden tests; we then name each stub after its exercise, drop
outputs and execution counts, set the notebook metadata JupyterLab and Colab write back, and stamp the
set-up cell from its one template (``autograder/templates/setup_cell.ipy`` with ``scalelib/bootstrap.py``'s
installer and the install source), so releasing twice gives identical bytes. ``release`` stamps the same cell
(install source empty) into solutions/ too, and refuses an exercise whose id or points in its header, its test
cell's first line or its ``ex.visible_checks`` disagree with the nbgrader metadata (the only copy the grader reads).
The README's chapter table gets "Open in Colab" links when the install source is a GitHub repository.

``release`` also writes ``chapters/.release.json``: a fingerprint of every input (the solution
notebooks, the release code, nbgrader's and nbformat's versions, the install source) and of every
output. ``check`` compares fingerprints instead of rendering again, so it takes well under a second;
``stale(full=True)`` renders every chapter and compares bytes (the test suite does both).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import course
from autograder.instructor.instructor_errors import ReleaseError

if TYPE_CHECKING:
    from nbformat import NotebookNode

MANIFEST = ".release.json"
_SOURCE_LINE = re.compile(r'^(\s*SCALELIB_SOURCE = )"[^"\n]*"', re.MULTILINE)
_STUB_RAISE = 'raise NotImplementedError("write your answer here")'
_GITHUB = re.compile(r"^\S+\s*@\s*git\+https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?(?:@([\w./-]+))?$")
_TABLE = re.compile(r"(<!-- chapters:start -->\n)(.*?)(<!-- chapters:end -->)", re.DOTALL)
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(.*?)\s*\|\s*(.*?)\s*\|$")

# What JupyterLab 4 writes back when it opens a notebook on a python3 kernel, and what Colab keeps: a
# notebook that already holds these is not marked modified by opening it.
NOTEBOOK_METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}
_RELEASE_CODE = ("autograder/instructor/release.py", "autograder/instructor/nbgrader_course.py",
                 "autograder/instructor/templates/setup_cell.ipy", "scalelib/bootstrap.py")
SETUP_TEMPLATE = Path(__file__).resolve().parent / "templates" / "setup_cell.ipy"
# Folded where students meet it: Colab shows the `#@title` line of a "form" cell, JupyterLab collapses the input.
SETUP_METADATA = {"cellView": "form", "jupyter": {"source_hidden": True}}
_HEADER = re.compile(r"`(ch\d\d-[A-Za-z0-9-]+)` · (\d+(?:\.\d+)?) points?\b")
_VISIBLE = re.compile(r"visible_checks\(\s*[\"']([^\"']*)[\"']")




def stamp_install_source(nb: NotebookNode, install_source: str) -> int:
    """Point the set-up cell's ``SCALELIB_SOURCE = "..."`` at ``install_source``; returns cells changed."""
    if '"' in install_source or "\n" in install_source:
        raise ReleaseError(f"install source {install_source!r} must not contain quotes or newlines")
    changed = 0
    for cell in nb.cells:
        if "setup" in cell.get("metadata", {}).get("tags", []):
            new, n = _SOURCE_LINE.subn(lambda m: f'{m.group(1)}"{install_source}"', cell.source)
            cell.source, changed = new, changed + n
    if changed != 1:
        raise ReleaseError('expected exactly one `SCALELIB_SOURCE = "..."` line in a cell tagged "setup"')
    return changed


def setup_cell_source(install_source: str = "") -> str:
    """The set-up cell every chapter starts with: the template, with the installer and ``install_source`` in."""
    from scalelib import bootstrap

    installer = inspect.getsource(bootstrap.install_scalelib)
    doc = re.search(r'\n    """.*?"""\n', installer, re.DOTALL)  # the docstring stays in bootstrap.py
    if doc is not None:
        note = "\n    # (scalelib/bootstrap.py explains this function)\n"
        installer = installer[:doc.start()] + note + installer[doc.end():]
    indented = "\n".join(("    " + line) if line.strip() else "" for line in installer.rstrip("\n").splitlines())
    text = SETUP_TEMPLATE.read_text().replace("{install_scalelib}", indented).rstrip("\n")
    if '"' in install_source or "\n" in install_source:
        raise ReleaseError(f"install source {install_source!r} must not contain quotes or newlines")
    text, n = _SOURCE_LINE.subn(lambda m: f'{m.group(1)}"{install_source}"', text)
    if n != 1:
        raise ReleaseError(f'{SETUP_TEMPLATE.name} must hold exactly one `SCALELIB_SOURCE = "..."` line')
    return text


def _setup_cells(nb: NotebookNode) -> list:
    cells = [c for c in nb.cells if "setup" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ReleaseError(f'expected exactly one cell tagged "setup", found {len(cells)}')
    return cells


def stamp_setup_cell(nb: NotebookNode, install_source: str = "") -> bool:
    """Make the cell tagged "setup" the template's (folded); returns whether anything changed."""
    (cell,) = _setup_cells(nb)
    before = (cell.source, json.dumps(cell.metadata, sort_keys=True))
    cell.source = setup_cell_source(install_source)
    cell.metadata.update(json.loads(json.dumps(SETUP_METADATA)))
    if "checksum" in cell.metadata.get("nbgrader", {}):
        from nbgrader.utils import compute_checksum

        cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
    return before != (cell.source, json.dumps(cell.metadata, sort_keys=True))


def _points_text(points: float) -> str:
    return "1 point" if points == 1 else f"{points:g} points"


def exercise_text_problems(nb: NotebookNode) -> list[str]:
    """Where an exercise's id or points, written out for students, disagree with its nbgrader metadata.

    For every graded test cell (id G, N points) one markdown line before its answer reads "`G` · N points"; the
    test cell starts "# Test G (N points)" and its ``ex.visible_checks`` name G; the answer cell "G-answer" comes
    before the test. Every "`chNN-...` · N points" in the markdown names a graded exercise.
    """
    problems: list[str] = []
    headers: dict[str, list[tuple[int, str]]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for m in _HEADER.finditer(cell.source):
                headers.setdefault(m.group(1), []).append((i, m.group(2)))
    graded = {}
    answers = {c.metadata["nbgrader"]["grade_id"]: i for i, c in enumerate(nb.cells)
               if c.metadata.get("nbgrader", {}).get("solution")}
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("grade"):
            continue
        gid, points = meta["grade_id"], float(meta.get("points", 0))
        graded[gid] = points
        pts = _points_text(points)
        first = cell.source.split("\n", 1)[0]
        if first != f"# Test {gid} ({pts})":
            problems.append(f"{gid}: its test cell starts {first!r}, expected '# Test {gid} ({pts})'")
        named = _VISIBLE.findall(cell.source)
        if not named or any(n != gid for n in named):
            problems.append(f"{gid}: its test cell's ex.visible_checks name {named or 'nothing'}, expected {gid!r}")
        answer_gid = course.answer_id(gid)
        answer = answers.get(answer_gid)
        if answer is None or answer > i:
            problems.append(f"{gid}: no answer cell {answer_gid} before its test cell")
        found = headers.get(gid, [])
        if len(found) != 1:
            problems.append(f"{gid}: the markdown shows '`{gid}` · {pts}' {len(found)} times, expected once")
        elif float(found[0][1]) != points:
            problems.append(f"{gid}: the markdown says {_points_text(float(found[0][1]))}, its metadata {pts}")
        elif answer is not None and found[0][0] > answer:
            problems.append(f"{gid}: its header comes after its answer cell")
    problems += [f"{gid}: the markdown shows it with points, but no test cell grades it"
                 for gid in headers if gid not in graded]
    return problems


def name_stubs(nb: NotebookNode) -> int:
    """Each answer cell's stub raises ``NotImplementedError`` naming its exercise; returns stubs named."""
    from nbgrader.utils import compute_checksum

    from scalelib.exercise import stub_message

    named = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution") or _STUB_RAISE not in cell.source:
            continue
        exercise = meta["grade_id"].removesuffix(course.ANSWER_SUFFIX)
        named += cell.source.count(_STUB_RAISE)
        cell.source = cell.source.replace(_STUB_RAISE, f'raise NotImplementedError("{stub_message(exercise)}")')
        meta["checksum"] = compute_checksum(cell)
    return named


def normalize(nb: NotebookNode) -> None:
    """Outputs and counts off; metadata reduced to what students, JupyterLab, Colab and nbgrader need."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    nb.metadata.update(json.loads(json.dumps(NOTEBOOK_METADATA)))


def render(chapter: str, root: Path = course.ROOT, install_source: str | None = None) -> str:
    """The student notebook for ``chapter`` as text."""
    import nbformat

    from autograder.instructor import nbgrader_course

    source = course.settings(root).install_source if install_source is None else install_source
    solution = nbformat.read(root / "solutions" / f"{chapter}.ipynb", as_version=4)
    problems = exercise_text_problems(solution)
    if problems:
        raise ReleaseError(f"solutions/{chapter}.ipynb: " + "; ".join(problems))
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        _, released = nbgrader_course.generate(Path(tmp), chapter, root / "solutions")
        nb = nbformat.read(released, as_version=4)
    normalize(nb)
    name_stubs(nb)
    stamp_setup_cell(nb, source)
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


# ------------------------------------------------------------------ README: the chapter table


def colab_url(install_source: str, chapter: str) -> str | None:
    """The "Open in Colab" address of ``chapter`` when the install source is a GitHub repository."""
    m = _GITHUB.match(install_source.strip())
    if m is None:
        return None
    owner, repo, ref = m.group(1), m.group(2), m.group(3) or "main"
    return f"https://colab.research.google.com/github/{owner}/{repo}/blob/{ref}/chapters/{chapter}.ipynb"


def readme_with_table(readme: str, chapters: list[str], install_source: str) -> str:
    """``readme`` with its chapter table's notebook column linked to Colab (or plain, without a GitHub source)."""
    block = _TABLE.search(readme)
    if block is None:
        raise ReleaseError("README.md has no chapter table between <!-- chapters:start --> and <!-- chapters:end -->")
    lines = block.group(2).splitlines()
    header, rows = lines[:2], [ln for ln in lines[2:] if ln.strip()]
    described: dict[str, str] = {}
    for row in rows:
        m = _ROW.match(row)
        if m is None:
            raise ReleaseError(f"README.md chapter table: cannot read the row {row!r} "
                               "(expected | n | notebook | text |)")
        name = re.search(r"`(\d\d_\w+)`", m.group(2))
        if name is None:
            raise ReleaseError(f"README.md chapter table: the row {row!r} names no notebook like `01_rooflines`")
        described[name.group(1)] = m.group(3)
    missing = [c for c in chapters if c not in described]
    if missing:
        raise ReleaseError(f"README.md chapter table has no row for {', '.join(missing)}; "
                           "add one (| n | `name` | what |)")
    out = []
    for chapter in chapters:
        url = colab_url(install_source, chapter)
        cell = f"[`{chapter}`]({url})" if url else f"`{chapter}`"
        out.append(f"| {int(chapter[:2])} | {cell} | {described[chapter]} |")
    table = "\n".join(header + out) + "\n"
    return readme[:block.start(2)] + table + readme[block.end(2):]


# ------------------------------------------------------------------ the manifest that makes `check` fast


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _release_fingerprint(root: Path, install_source: str) -> dict:
    from scalelib.exercise import stub_message

    code = b"".join((root / p).read_bytes() if (root / p).exists() else (course.ROOT / p).read_bytes()
                    for p in _RELEASE_CODE)
    return {"release_code": _sha(code + course.CODE_STUB.encode() + stub_message("chNN-id").encode()),
            "nbgrader": metadata.version("nbgrader"), "nbformat": metadata.version("nbformat"),
            "install_source": install_source}


def _entry(root: Path, chapter: str, inputs: dict) -> dict:
    return {"inputs": inputs, "solution": _sha((root / "solutions" / f"{chapter}.ipynb").read_bytes()),
            "student": _sha((root / "chapters" / f"{chapter}.ipynb").read_bytes())}


def _read_manifest(root: Path) -> dict:
    path = root / "chapters" / MANIFEST
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ValueError("not a mapping of chapters")
    return data


def release(root: Path = course.ROOT, chapters: list[str] | None = None,
            install_source: str | None = None) -> list[Path]:
    """Write chapters/<name>.ipynb for every chapter (or those given), the manifest and README's table."""
    source = course.settings(root).install_source if install_source is None else install_source
    all_chapters = course.chapter_names(root)
    out_dir = root / "chapters"
    out_dir.mkdir(exist_ok=True)
    written = []
    for name in chapters or all_chapters:
        written += stamp_solution(root, name)
        target = out_dir / f"{name}.ipynb"
        target.write_text(render(name, root, source))
        written.append(target)
    readme = root / "README.md"
    if readme.exists():
        text = readme.read_text()
        new = readme_with_table(text, all_chapters, source)
        if new != text:
            readme.write_text(new)
            written.append(readme)
    try:
        manifest = _read_manifest(root)
    except (OSError, ValueError):
        manifest = {}
    inputs = _release_fingerprint(root, source)
    manifest.update({name: _entry(root, name, inputs) for name in chapters or all_chapters})
    manifest = {name: entry for name, entry in manifest.items() if name in all_chapters}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return written


def stamp_solution(root: Path, chapter: str) -> list[Path]:
    """Give solutions/<chapter>.ipynb the template's set-up cell (install source empty); the path if it changed."""
    import nbformat

    path = root / "solutions" / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    if not stamp_setup_cell(nb, ""):
        return []
    nbformat.write(nb, path)
    return [path]


def _solution_setup_differs(root: Path, chapter: str) -> bool:
    cells = json.loads((root / "solutions" / f"{chapter}.ipynb").read_text())["cells"]
    setup = [c for c in cells if "setup" in c.get("metadata", {}).get("tags", [])]
    if len(setup) != 1:
        return True
    source = setup[0]["source"]
    source = "".join(source) if isinstance(source, list) else source
    meta = setup[0]["metadata"]
    return source != setup_cell_source("") or any(meta.get(k) != v for k, v in SETUP_METADATA.items())


@dataclass(frozen=True)
class Staleness:
    chapter: str
    reason: str


def check(root: Path = course.ROOT, install_source: str | None = None) -> list[Staleness]:
    """Why chapters/ (or README's table) differs from what ``release`` would write; empty when in sync.

    Compares fingerprints only: a solution notebook changed since the release, a student notebook edited
    by hand, a chapter added or removed, the release code, tools or install source changed.
    """
    source = course.settings(root).install_source if install_source is None else install_source
    names = course.chapter_names(root)
    try:
        recorded = _read_manifest(root)
    except OSError:
        return [Staleness("*", f"chapters/{MANIFEST} is missing: run `python -m autograder release`")]
    except ValueError:
        return [Staleness("*", f"chapters/{MANIFEST} cannot be read: run `python -m autograder release`")]
    out = []
    want_inputs = _release_fingerprint(root, source)
    for name in names:
        student = root / "chapters" / f"{name}.ipynb"
        entry = recorded.get(name)
        if entry is None:
            out.append(Staleness(name, "new chapter, never released"))
        elif not student.exists():
            out.append(Staleness(name, f"chapters/{name}.ipynb is missing"))
        elif _solution_setup_differs(root, name):
            out.append(Staleness(name, f"solutions/{name}.ipynb's set-up cell differs from {SETUP_TEMPLATE.name} "
                                       "(edit the template, not the cell)"))
        elif _sha((root / "solutions" / f"{name}.ipynb").read_bytes()) != entry.get("solution"):
            out.append(Staleness(name, f"solutions/{name}.ipynb changed since the last release"))
        elif _sha(student.read_bytes()) != entry.get("student"):
            out.append(Staleness(name, f"chapters/{name}.ipynb was edited by hand (edit solutions/ and release)"))
        else:
            changed = [f"{k} ({entry.get('inputs', {}).get(k)!r} -> {v!r})" for k, v in want_inputs.items()
                       if entry.get("inputs", {}).get(k) != v]
            if changed:
                out.append(Staleness(name, "changed since its release: " + ", ".join(changed)))
    out += [Staleness(n, "released, but solutions/ no longer has it") for n in recorded if n not in names]
    readme = root / "README.md"
    if readme.exists():
        try:
            if readme_with_table(readme.read_text(), names, source) != readme.read_text():
                out.append(Staleness("README.md", "its chapter table differs from the chapters and install source"))
        except ReleaseError as err:
            out.append(Staleness("README.md", str(err)))
    return out


def stale(root: Path = course.ROOT, full: bool = False) -> list[str]:
    """Chapters whose student notebook is out of date: by fingerprint, or (``full``) by rendering again."""
    if not full:
        return sorted({s.chapter for s in check(root)})
    out = []
    for name in course.chapter_names(root):
        target = root / "chapters" / f"{name}.ipynb"
        if not target.exists() or target.read_text() != render(name, root):
            out.append(name)
    return out


def warn_if_unconfigured(install_source: str) -> None:
    """Say loudly that students in Colab will not get scalelib installed without help."""
    if install_source.strip():
        return
    bar = "!" * 78
    print(f"{bar}\n! install-source is not set: the chapters' set-up cell cannot install scalelib in Colab.\n"
          "! Students who open a chapter there are told to use the course's link or to upload scalelib's\n"
          "! wheel. Set [tool.scalelib-course] install-source in pyproject.toml to a pip requirement, e.g.\n"
          '!   install-source = "scalelib @ git+https://github.com/you/your-fork@v1"\n'
          "! or pass --install-source, then release again.\n" + bar, file=sys.stderr)
