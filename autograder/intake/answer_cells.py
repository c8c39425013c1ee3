"""The instructor's chapter (from solutions/) and where a student's answers are in their notebook.

Nothing here trusts a submission's metadata. An answer cell is recognised by what its code defines:
the instructor's answer cell for exercise ``E`` defines some functions (``roofline_bounds``); the student's
answer is the last code cell that defines one of them (cells still carrying nbgrader's ``E-answer``
grade id are used when nothing defines the function, e.g. an untouched stub). The student's test cells,
edited or not, are dropped: the instructor's own test cells always run. Student cells that are neither
answers, tests nor copies of the instructor's demo cells ("helpers") run just before the next answer.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder import course
from autograder.instructor.chapter_model import TEST_HEADER, Chapter, defined_names, normalized, source_of
from autograder.intake.intake_errors import AnswersTimeout

MAX_CODE_CELLS = 400  # code cells of a submission that are read; a chapter has about 50


MAX_CODE_CHARS = 1_000_000  # characters of code read in all


FUZZY_MAX_CHARS = 12_000  # longer cells are never compared character by character


FUZZY_BUDGET = 2_000  # full comparisons per notebook; past it, unmatched cells count as the student's own


def released_stubs(released: Path) -> dict[str, str]:
    """Per exercise id, its answer cell in the released notebook ``released`` (the stub a student starts from),
    normalized as :func:`as_released` compares it; empty when there is no such notebook."""
    try:
        nb = json.loads(Path(released).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    stubs = {}
    for cell in nb.get("cells", []):
        gid = str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))
        eid = course.exercise_of_answer(gid)
        if cell.get("cell_type") == "code" and eid is not None:
            stubs[eid] = normalized(source_of(cell))
    return stubs


def as_released(eid: str, plan: Plan, stubs: dict[str, str]) -> bool:
    """Whether the student left exercise ``eid`` as released: its answer cell is the stub (up to trailing spaces and
    blank lines at either end), with no cell of their own before it."""
    return (eid in stubs and eid in plan.answers and not plan.helpers.get(eid)
            and normalized(plan.answers[eid]) == stubs[eid])


@dataclass
class Plan:
    """What of a student's notebook runs: per exercise, helper cells then the answer cell."""

    answers: dict[str, str] = field(default_factory=dict)
    helpers: dict[str, list[str]] = field(default_factory=dict)
    not_found: list[str] = field(default_factory=list)
    dropped_tests: int = 0
    problems: list[str] = field(default_factory=list)




class _Fuzzy:
    """Character-level similarity with a bounded amount of work per notebook."""

    def __init__(self) -> None:
        self.left = FUZZY_BUDGET

    def similar(self, a: str, b: str, threshold: float) -> bool:
        if self.left <= 0 or len(a) > FUZZY_MAX_CHARS or len(b) > FUZZY_MAX_CHARS:
            return False
        sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
        if not (sm.real_quick_ratio() > threshold and sm.quick_ratio() > threshold):
            return False
        self.left -= 1
        return sm.ratio() > threshold


def _is_test(src: str, gid: str, chapter: Chapter, meta: dict, fuzzy: _Fuzzy) -> bool:
    if gid in chapter.exercises or meta.get("grade"):
        return True
    if TEST_HEADER.search(src.split("\n", 3)[0] if src else ""):
        return True
    if "ex.check" not in src:
        return False
    norm = normalized(src)
    return any(fuzzy.similar(norm, normalized(e.visible_test), 0.6) for e in chapter.exercises.values())


def plan(student_cells: list[dict], chapter: Chapter, deadline: float | None = None) -> Plan:
    """Where the student's answers are. Bounded: at most MAX_CODE_CELLS cells and MAX_CODE_CHARS characters are
    read and FUZZY_BUDGET character comparisons made; past ``deadline`` (time.monotonic) it raises AnswersTimeout,
    so this work counts against the student's own time limit."""
    owner = {n: eid for eid, e in chapter.exercises.items() for n in e.names}
    demo = {normalized(src) for kind, src, _ in chapter.cells if kind in ("setup", "context")}
    by_gid: dict[str, str] = {}
    by_def: dict[str, tuple[int, str]] = {}
    helpers_before: list[tuple[int, str]] = []
    out = Plan()
    fuzzy = _Fuzzy()
    code_cells = chars = 0
    for i, cell in enumerate(student_cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise AnswersTimeout(f"reading the notebook took past its time limit (at cell {i})")
        src = source_of(cell)
        code_cells, chars = code_cells + 1, chars + len(src)
        if code_cells > MAX_CODE_CELLS or chars > MAX_CODE_CHARS:
            out.problems.append(f"only the first {code_cells - 1} code cells were read (limits: {MAX_CODE_CELLS} "
                                f"cells, {MAX_CODE_CHARS} characters of code)")
            break
        raw_meta = cell.get("metadata")
        meta: dict = raw_meta if isinstance(raw_meta, dict) else {}
        raw_nbg = meta.get("nbgrader")
        nbg: dict = raw_nbg if isinstance(raw_nbg, dict) else {}
        gid = str(nbg.get("grade_id", ""))
        if not src.strip():
            continue
        if _is_test(src, gid, chapter, nbg, fuzzy):
            out.dropped_tests += 1
            continue
        hits = {owner[n] for n in defined_names(src) if n in owner}
        if hits:
            for eid in hits:
                by_def[eid] = (i, src)  # the last definition wins, as in the student's own run
            continue
        answered = course.exercise_of_answer(gid)
        if answered is not None and answered in chapter.exercises:
            by_gid[answered] = src
            continue
        norm = normalized(src)
        if norm in demo or "devices.setup(" in src:
            continue
        if any(fuzzy.similar(norm, d, 0.9) for d in demo if abs(len(d) - len(norm)) < 0.2 * max(len(d), 1)):
            continue
        helpers_before.append((i, src))
    answer_pos = {}
    for eid in chapter.exercises:
        if eid in by_def:
            answer_pos[eid], out.answers[eid] = by_def[eid]
        elif eid in by_gid:
            answer_pos[eid], out.answers[eid] = -1, by_gid[eid]
        else:
            out.not_found.append(eid)
    # a helper runs before the first answer (in the student's order) that comes after it
    ordered = sorted((pos, eid) for eid, pos in answer_pos.items() if pos >= 0)
    for i, src in helpers_before:
        after = [eid for pos, eid in ordered if pos > i]
        if after:
            out.helpers.setdefault(after[0], []).append(src)
    return out
