"""autograder.outputs.feedback: the feedback page (grades.csv and the other CSVs are checked end to end in test_grading.py)."""

import html

import pytest

from autograder import course
from autograder.instructor import chapter_model
from autograder.outputs import feedback
from autograder.results import TEST_FAULT, Status, StudentResult
from tests.test_safe_text import STUDENT_OUTPUT, assert_shown_escaped

pytestmark = pytest.mark.grading

CHAPTER = "01_rooflines"


@pytest.mark.parametrize("status", [Status.GRADED, Status.CRASHED, Status.INVALID])
def test_the_feedback_page_shows_what_a_student_printed_escaped_never_raw(tmp_path, status):
    """Issue 48: a feedback page quotes what the student's code printed or raised (the check's message, the test's
    output), the row's detail, the file's name and the student's id; a browser shows a bidirectional override as
    the reordering it asks for, and a page opened as text in a terminal (`cat`, `less -r`) would clear the screen or
    set its title. Every such character shows as its escape, lines and tabs kept, in every place the page quotes
    it."""
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{CHAPTER}.ipynb")
    first, second, third = list(ch.exercises)[:3]
    r = StudentResult(f"eve{STUDENT_OUTPUT}", status, 0.0, ch.max_score, dict.fromkeys(ch.exercises, 0.0),
                      detail=f"kernel said {STUDENT_OUTPUT}", file=f"eve {STUDENT_OUTPUT}.ipynb",
                      messages={first: f"ExerciseError: {STUDENT_OUTPUT}", second: f"{TEST_FAULT}: {STUDENT_OUTPUT}"},
                      outputs={first: f"printed {STUDENT_OUTPUT}", third: STUDENT_OUTPUT})
    page = tmp_path / "eve.html"
    feedback.write_feedback(page, CHAPTER, r, ch)
    text = page.read_text(encoding="utf-8")
    assert_shown_escaped(text)
    shown = html.unescape(text)
    for quoted in ["ExerciseError: cleared", "kernel said cleared", "eve cleared", "printed cleared",
                   f"{TEST_FAULT}: cleared"]:
        assert quoted in shown, quoted
    assert "cleared \\x1b[2J\\x1b]0;pwned\\x07\nreversed \\u202egnp.exe\tC1" in shown  # its lines and tabs kept
