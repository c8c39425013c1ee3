"""autograder.intake.answer_cells: finding the answers in a submission, with bounded work (issue #14, hostile finding 3)."""

from __future__ import annotations

import random
import time

import pytest

from autograder import course
from autograder.instructor import chapter_model
from autograder.intake import answer_cells

pytestmark = pytest.mark.grading


@pytest.fixture(scope="module")
def chapter():
    return chapter_model.load_chapter(course.SOLUTIONS / "01_rooflines.ipynb")


def _long_cells(chapter, n: int, repeat: int) -> list[dict]:
    """Cells built to be expensive to compare: near-copies of test and demo cells, long, all mentioning ex.check."""
    r = random.Random(0)
    bases = [e.visible_test for e in chapter.exercises.values()] + [s for k, s, _ in chapter.cells if k == "context"]
    cells = []
    for i in range(n):
        base = bases[i % len(bases)]
        noisy = "".join(c if r.random() > 0.3 else r.choice("abc()=") for c in base)
        cells.append({"cell_type": "code", "metadata": {}, "source": (noisy + "\n") * repeat + "ex.check_close(1, 1, 1)\n"})
    return cells


def test_a_notebook_of_many_long_cells_is_read_in_bounded_time(chapter):
    cells = _long_cells(chapter, 3000, 4)
    start = time.perf_counter()
    plan = answer_cells.plan(cells, chapter)
    assert time.perf_counter() - start < 20  # unbounded, this takes minutes
    assert plan.problems and "code cells were read" in plan.problems[0]
    assert sorted(plan.not_found) == sorted(chapter.exercises)


def test_reading_the_notebook_counts_against_its_time_limit(chapter):
    with pytest.raises(answer_cells.AnswersTimeout):
        answer_cells.plan(_long_cells(chapter, 50, 1), chapter, deadline=time.monotonic() - 1)


def test_answers_are_found_by_what_they_define(chapter):
    eid, ex = next(iter(chapter.exercises.items()))
    cells = [{"cell_type": "code", "metadata": {}, "source": ex.answer_source},
             {"cell_type": "code", "metadata": {}, "source": "helper = 1"}]
    plan = answer_cells.plan(cells, chapter)
    assert plan.answers[eid] == ex.answer_source and not plan.problems


def test_an_answer_left_as_released_is_told_from_one_changed_by_a_character_or_a_cell_before_it(chapter):
    """The grader starts no kernel for a group whose answers are all their stubs (autograder.judging.student_steps), so the test
    for "left as released" must be exact: the stub up to trailing spaces and blank lines at either end, with no
    cell of the student's own run before it."""
    import json

    released = json.loads((course.CHAPTERS / "01_rooflines.ipynb").read_text())["cells"]
    stubs = answer_cells.released_stubs(course.CHAPTERS / "01_rooflines.ipynb")
    assert set(stubs) == set(chapter.exercises)
    assert answer_cells.plan(released, chapter).answers and all(
        answer_cells.as_released(eid, answer_cells.plan(released, chapter), stubs) for eid in chapter.exercises)
    eid = next(iter(chapter.exercises))
    cell = next(c for c in released if c["metadata"].get("nbgrader", {}).get("grade_id") == course.answer_id(eid))
    stub = chapter_model.source_of(cell)

    def left(source: str, before: str = "") -> bool:
        cells = [{"cell_type": "code", "metadata": {}, "source": before}] if before else []
        return answer_cells.as_released(eid, answer_cells.plan([*cells, {"cell_type": "code", "metadata": {}, "source": source}],
                                                 chapter), stubs)

    assert left(stub) and left("\n" + stub.replace("\n", "  \n") + "\n\n")
    assert "raise NotImplementedError" in stub and not left(stub.replace("raise NotImplementedError", "raise ValueError"))
    assert not left(stub + "\nx = 1") and not left(stub.replace("    ", "\t", 1))
    assert not left(stub, before="import numpy as np  # a cell of the student's own, run before the answer")
    assert answer_cells.released_stubs(course.CHAPTERS / "no_such_chapter.ipynb") == {}
