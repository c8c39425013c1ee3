"""The instructor's chapter as the grader sees it (from ``solutions/``): its exercises in order, with their
ids, points, the functions each answer defines, and the test cells that judge them.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

from autograder import course, pysource
from autograder.library import surface

_SOLUTION_MARK = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.MULTILINE)


_HIDDEN = "### BEGIN HIDDEN TESTS"


TEST_HEADER = re.compile(r"^\s*#\s*Test\s+(\S+)\s*\(", re.MULTILINE)


def source_of(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def defined_names(src: str) -> set[str]:
    """Top-level functions and classes a cell defines (a regex when the cell does not parse)."""
    try:
        tree = pysource.parse(_strip_magics(src))
    except (SyntaxError, ValueError):
        return set(re.findall(r"^(?:async\s+)?(?:def|class)\s+([A-Za-z_]\w*)", src, re.MULTILINE))
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _strip_magics(src: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def normalized(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


@dataclass(frozen=True)
class Exercise:
    id: str
    points: float
    names: tuple[str, ...]  # functions the answer cell defines
    answer_source: str  # the instructor's solution, markers removed
    test_source: str  # the full instructor test cell, hidden tests included
    visible_test: str
    title: str = ""  # the heading of its markdown cell ("Exercise 1.A: lower and upper bounds")
    allows: frozenset[surface.Item] = frozenset()  # what of scalelib it may use (ex.allow in its test)
    withholds: frozenset[tuple[str, str]] = frozenset()  # (module, qualname) of members its test withholds


@dataclass
class Chapter:
    name: str
    cells: list[tuple[str, str, str]]  # (kind, source, exercise id); kind: setup/context/answer/test
    exercises: dict[str, Exercise]
    devices: int = 8  # simulated devices the set-up cell asks for

    @property
    def max_score(self) -> float:
        return sum(e.points for e in self.exercises.values())

    @property
    def answer_names(self) -> set[str]:
        return {n for e in self.exercises.values() for n in e.names}


def _title(markdown: list[str], eid: str) -> str:
    """The heading of the last markdown cell that names ``eid`` in backticks."""
    for text in reversed(markdown):
        if f"`{eid}`" in text:
            for line in text.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def load_chapter(path: Path) -> Chapter:
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    cells: list[tuple[str, str, str]] = []
    answers: dict[str, str] = {}
    tests: dict[str, tuple[str, float]] = {}
    titles: dict[str, str] = {}
    markdown: list[str] = []
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            markdown.append(source_of(cell))
            continue
        if cell.get("cell_type") != "code":
            continue
        src = source_of(cell)
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id", "")
        eid = course.exercise_of_answer(gid)
        if meta.get("solution") and eid is not None:
            answers[eid] = _SOLUTION_MARK.sub("", src)
            titles[eid] = _title(markdown, eid)
            cells.append(("answer", answers[eid], eid))
        elif meta.get("grade"):
            tests[gid] = (src, float(meta.get("points", 0)))
            titles.setdefault(gid, _title(markdown, gid))
            cells.append(("test", src, gid))
        elif gid == "setup" or "setup" in cell.get("metadata", {}).get("tags", []):
            cells.append(("setup", src, ""))
        else:
            cells.append(("context", src, ""))
    aliases = surface.chapter_aliases(src for kind, src, _ in cells if kind in ("setup", "context"))
    exercises = {}
    for eid, (test_src, points) in tests.items():
        answer = answers.get(eid, "")
        try:
            allows = surface.declared(test_src, aliases)
            withholds = surface.withheld(test_src, aliases)
        except surface.SurfaceError as err:
            raise surface.SurfaceError(f"{Path(path).name}, test of {eid}: {err}") from None
        exercises[eid] = Exercise(eid, points, tuple(sorted(defined_names(answer))), answer, test_src,
                                  test_src.split(_HIDDEN)[0], titles.get(eid, ""), allows, withholds)
    name = nb.get("metadata", {}).get("scalelib", {}).get("chapter") or Path(path).stem
    setup = " ".join(src for kind, src, _ in cells if kind == "setup")
    m = re.search(r"devices\.setup\((\d+)\)", setup)
    return Chapter(name, cells, exercises, int(m.group(1)) if m else 8)
