"""autograder.judging.student_steps: the kernels a student's grading announces to the pool and takes, without starting any."""

import shutil

import nbformat
import pytest

from autograder import course
from autograder.instructor import chapter_model
from autograder.intake import answer_cells, collection
from autograder.judging import student_steps
from autograder.kernel.session import Limits
from autograder.library import surface
from tests.notebook_answers import answered

pytestmark = pytest.mark.grading

CH = "02_tpus"  # a chapter whose exercises fall into several groups (surfaces)


class Pool:
    """What grade.py's pool hears: one expected kernel per group of each student, consumed by ``take`` or
    ``forget``. Taking one here is a failure: these notebooks must start no kernel."""

    wanted: list[str]  # set by _shared

    def forget(self, key):
        self.wanted.remove(key)

    def take(self, key):
        raise AssertionError(f"a kernel of {key} was asked for")


@pytest.fixture(scope="module")
def chapter():
    return chapter_model.load_chapter(course.SOLUTIONS / f"{CH}.ipynb")


def _shared(chapter, pool, tmp_path):
    surfaces = {eid: surface.closure(ex.allows) for eid, ex in chapter.exercises.items()}
    groups = student_steps.groups(chapter, surfaces, student_steps.replay_steps(chapter))
    assert len(groups) > 1, "pick a chapter with several groups"
    pool.wanted = [g.surface.key for g in groups]  # as grade.py's pool.expect, for this one student
    stubs = answer_cells.released_stubs(course.CHAPTERS / f"{CH}.ipynb")
    return student_steps.Shared(chapter, None, [], groups, pool, Limits(), tmp_path, stubs=stubs)


def _candidate(path, invalid=""):
    return collection.Candidate(path, path.name, 0.0, 0, [], "dana", chapter=CH, invalid=invalid)


@pytest.mark.parametrize("notebook", ["invalid", "untouched", "only_one_answer_kept_as_released"])
def test_a_group_that_takes_no_kernel_is_forgotten(chapter, tmp_path, notebook):
    """An invalid notebook, a released notebook as it was, and one whose other answer cells were deleted: every
    kernel grade.py announced for this student is forgotten (before this, the pool went on expecting one for each
    group without an answer, and for every group of an invalid notebook)."""
    path = tmp_path / "dana.ipynb"
    if notebook == "invalid":
        path.write_text("{ not json")
    elif notebook == "untouched":
        shutil.copy(course.CHAPTERS / f"{CH}.ipynb", path)
    else:
        nb = nbformat.read(course.CHAPTERS / f"{CH}.ipynb", as_version=4)
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        nb.cells = [c for c in nb.cells if c not in answers[1:]]
        nbformat.write(nb, path)
    pool = Pool()
    shared = _shared(chapter, pool, tmp_path)
    cand = _candidate(path, "not a notebook (not JSON)" if notebook == "invalid" else "")  # as submissions finds it
    result = student_steps.grade_student(shared, "dana", cand, "fp", tmp_path / "dana.log")
    assert result.score == 0
    assert pool.wanted == [], pool.wanted


def test_a_notebook_with_answers_takes_a_kernel_for_each_group(chapter, tmp_path):
    """The counter-check: an answered notebook does ask the pool for a kernel (here refused), so the test above
    sees a real difference."""
    path = tmp_path / "dana.ipynb"
    nbformat.write(answered(CH), path)
    shared = _shared(chapter, Pool(), tmp_path)
    with pytest.raises(AssertionError, match="a kernel of .* was asked for"):
        student_steps.grade_student(shared, "dana", _candidate(path), "fp", tmp_path / "dana.log")
