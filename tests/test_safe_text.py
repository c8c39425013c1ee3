"""autograder.safe_text: the Markdown escapes, rendered by the Markdown-to-HTML filter formgrader and nbgrader's
feedback use (nbconvert's, which passes raw HTML and link targets through), and the escapes of what pages show."""

import unicodedata
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


# Issue 48: what a student's code printed or raised, as the grader keeps it (results/*.json hold it raw): a screen
# clear and a window title (CSI, OSC), a file name reversed by a bidirectional override, a C1 control that a
# terminal reads as CSI, the other bidirectional controls, NUL, DEL and a lone carriage return
STUDENT_OUTPUT = ("cleared \x1b[2J\x1b]0;pwned\x07\nreversed \u202egnp.exe\tC1 \x9b31m isolates \u2066x\u2069 "
                  "marks \u200e\u200f\u061c nul \x00 del \x7f back\rover")
SHOWN = ["\\x1b[2J\\x1b]0;pwned\\x07", "\\u202egnp.exe", "\\x9b31m", "\\u2066x\\u2069", "\\u200e\\u200f\\u061c",
         "\\x00", "\\x7f", "back\\x0dover"]


def raw_controls(text: str) -> list[str]:
    """The control, format and separator characters in ``text``, but newline and tab."""
    return sorted({c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") and c not in "\n\t"})


def assert_shown_escaped(text: str) -> None:
    """``text`` (a page, a notebook's string) shows :data:`STUDENT_OUTPUT` escaped and holds none of it raw."""
    assert raw_controls(text) == [], [safe_text.printable(c) for c in raw_controls(text)]
    missing = [s for s in SHOWN if s not in text]
    assert not missing, (missing, text)


def test_printable_lines_keeps_lines_and_tabs_and_escapes_every_other_control():
    shown = safe_text.printable_lines(STUDENT_OUTPUT)
    assert_shown_escaped(shown)
    assert shown.split("\n")[0] == "cleared \\x1b[2J\\x1b]0;pwned\\x07" and "\tC1 " in shown
    assert safe_text.printable_lines(shown) == shown  # escaping twice changes nothing
    assert safe_text.printable_lines("a\r\nb") == "a\nb"
    plain = "Traceback (most recent call last):\n\tx = 1 / 0\nZeroDivisionError: division by zero — zoë 王芳"
    assert safe_text.printable_lines(plain) == plain
