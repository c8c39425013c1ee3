"""Text from submissions made safe to print and to open: one escape for the console and for every CSV.

A name or message that came from a student (a zip entry's name, a roster name a student chose, what their
kernel printed) must not drive the grader's terminal or a spreadsheet:

- :func:`printable`: control and format characters (ESC and the rest of C0/C1, DEL, bidirectional overrides,
  zero-width characters, line and paragraph separators, and the surrogates Python uses for undecodable bytes of a
  file name) are written as Python-style escapes ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``; every other character
  is kept (``zoë``, ``王芳``). Backslashes are kept as they are, so escaping twice changes nothing; a name that
  itself contains such escape text reads the same as one with the character (the export still has the original).
  :func:`unescape` turns the escapes back into characters.
- :func:`printable_lines`: the same, with line breaks and tabs kept: for what a student's code printed or raised,
  or their code itself, on a page or in a notebook a person opens (the feedback page, formgrader's graded copies,
  Gradescope's and PrairieLearn's results). A terminal's escape sequences (CSI, OSC, and the C1 forms such as
  ``\x9b``), which JupyterLab itself acts on in a notebook's output, and bidirectional overrides, which reorder
  what an instructor reads, then show as text: ``\x1b[2J``, ``\u202egnp.exe``.
- :func:`cell`: a CSV cell, the way OWASP's CSV-injection guidance says: text is escaped as above, a text cell
  beginning with ``=``, ``+``, ``-``, ``@``, tab or carriage return (or an apostrophe, so that the rule can be
  undone) gets one leading apostrophe, and :func:`csv_text` quotes every text cell; numbers stay bare numbers
  (a score imports as a number, even a negative one). :func:`uncell` gives the value back: strip one leading
  apostrophe, then :func:`unescape`.

Markdown is a third place: nbconvert turns an nbgrader notebook's Markdown into HTML with raw HTML and link targets
passed through (formgrader's pages, nbgrader's feedback), so a student's ``<img onerror=...>`` there would run
script in the instructor's Jupyter session. Backslash escapes (CommonMark's, which nbconvert's renderer follows)
keep such text literal:

- :func:`markdown_literal`: one line (escaped as above) with every ASCII punctuation character escaped; it renders
  as exactly that text. For text that is only ever shown as Markdown (the graded copy's summary cell).
- :func:`markdown_inert`: only what could start markup that acts (``<`` for HTML and autolinks, ``[`` for links
  and images, and the backslash itself) is escaped, lines kept. For text that formgrader also
  shows as plain text (a comment is a text box's placeholder there), where every other backslash would show.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections.abc import Iterable, Sequence

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_ESCAPED_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_ESCAPE = re.compile(r"\\(?:x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))")
_CONTROL_BUT_LINES = re.compile(r"[^\t\n\x20-\x7e]")  # in ASCII text: any character but tab, newline, printables
_MD_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation character
_MD_ACTIVE = re.compile(r"([\\<\[])")


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every control, format, separator and surrogate character as an escape (see the module)."""
    if text.isprintable() and text.isascii():
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _ESCAPED_CATEGORIES else c for c in text)


def printable_lines(text: str) -> str:
    """``text`` as :func:`printable` writes it, except that its line breaks (``\\n``; ``\\r\\n`` counts as one) and
    tabs are kept; a lone ``\\r``, which would overwrite a line where outputs are shown, is escaped too."""
    if text.isascii() and not _CONTROL_BUT_LINES.search(text):
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join("\t".join(printable(part) for part in line.split("\t")) for line in lines)


def unescape(text: str) -> str:
    """The characters :func:`printable` escaped, back."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2) or m.group(3), 16)), text)


class Number(float):
    """A number for a CSV cell, written the way people write it (``15``, ``2.5``, ``-1``), never quoted."""

    def __repr__(self) -> str:
        return f"{float(self):.15g}"  # every digit a score has, never an exponent for a whole number below 1e15

    __str__ = __repr__


def cell(value: object) -> object:
    """One CSV cell: a :class:`Number` for an int or float, else the value as text, escaped and neutralised."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Number(value)
    text = printable(str(value))
    return "'" + text if text.startswith((*FORMULA_TRIGGERS, "'")) else text


def uncell(text: str) -> str:
    """The value a text cell of :func:`csv_text` holds (one leading apostrophe off, escapes undone)."""
    return unescape(text[1:] if text.startswith("'") else text)


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """Rows as CSV text: every cell through :func:`cell`, text quoted, numbers bare. Every CSV the grader
    writes (grades.csv, grades_long.csv, submissions.csv, canvas.csv) is made here."""
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\r\n")
    for row in rows:
        writer.writerow([cell(v) for v in row])
    return buf.getvalue()


def markdown_literal(text: str) -> str:
    """``text`` as one line of Markdown that renders as exactly that text: no HTML, link, image or emphasis."""
    return _MD_PUNCTUATION.sub(r"\\\1", printable(text))


def markdown_inert(text: str) -> str:
    """``text`` as Markdown that can form no HTML, link or image (other Markdown, such as emphasis, may still show);
    its lines are kept, each escaped as :func:`printable` does."""
    return "\n".join(_MD_ACTIVE.sub(r"\\\1", printable(line)) for line in text.split("\n"))
