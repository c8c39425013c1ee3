"""autograder.safe_text's Markdown escapes, rendered by the Markdown-to-HTML filter formgrader and nbgrader's feedback
use (nbconvert's, which passes raw HTML and link targets through)."""

from html.parser import HTMLParser

import pytest
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from autograder import safe_text

pytestmark = pytest.mark.grading

HOSTILE = [
    '<img src=x onerror="document.title=1">',
    "<script>alert(1)</script>",
    "[click](javascript:alert(1)) ![i](javascript:alert(2)) <javascript:alert(3)>",
    "[ref]\n\n[ref]: javascript:alert(4)",
    "a \\<b onclick=x> \\\\<i onclick=y>",  # a backslash of the student's own must not cancel the escape
    "<div\nonmouseover=alert(5)>two lines</div>",
    "\x1b[2J\u202eevil *bold* `code` # heading $x$",
]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list]] = []
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text += data


def _rendered(markdown: str) -> _Tags:
    parsed = _Tags()
    parsed.feed(markdown2html_mistune(markdown))
    return parsed


@pytest.mark.parametrize("text", HOSTILE)
def test_nothing_a_student_wrote_becomes_markup(text):
    assert [t for t, _ in _rendered(text).tags if t not in ("p",)], "the sample itself must be markup"
    literal = _rendered(safe_text.markdown_literal(text))
    assert [t for t, _ in literal.tags] == ["p"] and literal.text.strip() == safe_text.printable(text)
    inert = _rendered(safe_text.markdown_inert(text))
    assert {t for t, _ in inert.tags} <= {"p", "em", "strong", "code", "h1", "br"}, inert.tags
    assert not [a for _, attrs in inert.tags for a in attrs], inert.tags  # no attribute: no handler, no href
    assert "\x1b" not in inert.text and "\u202e" not in inert.text


def test_plain_text_is_kept_as_it_is():
    assert safe_text.markdown_inert("critical batch = 240.0, got 120 (off by 2x)") == (
        "critical batch = 240.0, got 120 (off by 2x)")  # formgrader shows comments as plain text
    assert safe_text.markdown_inert("line one\nline two") == "line one\nline two"
