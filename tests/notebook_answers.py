"""Fill a released student notebook with the instructor's answers (for grading tests)."""

import re

import nbformat

from autograder import course


def solution_cells(nb):
    return {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def answered(chapter, edit=None):
    """The student notebook with every solution cell filled in from solutions/.

    ``edit(grade_id, source) -> source`` may change one answer (to make it wrong).
    """
    student = nbformat.read(course.CHAPTERS / f"{chapter}.ipynb", as_version=4)
    solved = solution_cells(nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4))
    for gid, cell in solution_cells(student).items():
        src = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", solved[gid].source, flags=re.M)
        cell.source = edit(gid, src) if edit else src
    return student


def delegating(chapter):
    """The student notebook whose every answer hands the work to scalelib (tests/delegations.py)."""
    from tests.delegations import DELEGATIONS

    answers = DELEGATIONS.get(chapter, {})

    def delegate(gid, src):
        eid = course.exercise_of_answer(gid)
        assert eid in answers, f"tests/delegations.py has no answer for {eid} that delegates to scalelib: add one"
        return answers[eid].lstrip()

    return answered(chapter, delegate)


def second_answers(chapter):
    """The student notebook answered with a second honest answer per exercise (tests/second_answers/)."""
    from tests.second_answers import SECOND

    answers = SECOND[chapter]

    def second(gid, src):
        eid = course.exercise_of_answer(gid)
        assert eid in answers, f"tests/second_answers/ has no second answer for {eid}: add one"
        return answers[eid].lstrip()

    return answered(chapter, second)
