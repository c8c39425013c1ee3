"""What a grading run says on the console while it runs: the export's problems, what was graded, what was
written where; every piece of student text printed through :func:`autograder.safe_text.printable`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from autograder.grading import shards
from autograder.intake import collection, rosters
from autograder.safe_text import printable


class Console:
    """The instructor's console, in three parts: progress (a line per student as each is done, printed at once),
    then the problems of the run, if any, then where the files are (:meth:`end`). Problems found while grading are
    kept for the end (:meth:`problem`), not printed between the progress lines. Nothing a student's code prints
    reaches it: kernels' output is captured by their sessions and a judge's by the verdict
    (:func:`autograder.judging.trusted.thread_output`), both for the feedback."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self._lock = threading.Lock()
        self.problems: list[tuple[str, list[str]]] = []  # (headline, lines under it)
        self.notes: list[str] = []  # what the instructor should know that is no problem, printed after the problems
        self.not_submissions: list[tuple[str, str]] = []  # entries of the export that are no notebooks: (name, why)

    def __call__(self, text: str) -> None:
        """Print one line; what a student chose (an entry's name, what their code printed) cannot drive the
        terminal: control characters and escape sequences are printed escaped (safe_text.printable)."""
        if not self.quiet:
            with self._lock:
                print(printable(text), flush=True)

    def problem(self, headline: str, lines: list[str] | None = None) -> None:
        """A problem of the run, printed under 'problems' at its end."""
        with self._lock:
            self.problems.append((headline, list(lines or [])))

    def end(self, out_dir: Path, files: list[str]) -> None:
        """The end of the run: the problems (only if there are any), the notes (scores kept from formgrader, Canvas's
        Test Student left out), the entries that were not submissions (a neutral note), then the files written."""
        self._problems()
        for line in self.notes:
            self(line)
        if self.not_submissions:
            n = len(self.not_submissions)
            self(f"not graded: {n} {'entry' if n == 1 else 'entries'} of the export that {'is' if n == 1 else 'are'} "
                 "not a submission (not a notebook, a hidden or system file, or Canvas's Test Student's; see "
                 "submissions.csv):")
            for line in _listed(self.not_submissions):
                self(f"  {line}")
        self(f"files written in {out_dir}:")
        for line in files:
            self(f"  {line}")

    def _problems(self) -> None:
        with self._lock:
            problems, self.problems = self.problems, []
        if problems:
            self(f"problems ({len(problems)}):")
            for headline, lines in problems:
                self(f"  - {headline}")
                for line in lines:
                    self(f"      {line}")

    @contextlib.contextmanager
    def stopped_runs_say_their_problems(self) -> Iterator[None]:
        """A run that stops with an error (the gradebook failed twice, an interrupt) still prints the problems
        kept so far, before the error."""
        try:
            yield
        except BaseException:
            self._problems()
            raise


_LISTED = 20  # entries of the export listed on the console per section (submissions.csv has them all)


def _listed(entries: list[tuple[str, str]]) -> list[str]:
    lines = [f"{name}: {why}" for name, why in entries[:_LISTED]]
    if len(entries) > _LISTED:
        lines.append(f"... and {len(entries) - _LISTED} more")
    return lines


def _is_notebook(shown: str) -> bool:
    """Whether an entry of the export, by its name, is a notebook a student may have meant to hand in (not a hidden
    or system file such as a checkpoint or macOS's __MACOSX copies)."""
    parts = shown.split("/")
    return shown.lower().endswith(".ipynb") and not any(p.startswith(".") or p == "__MACOSX" for p in parts)


def export_problems(mapping: collection.Mapping, say: Console) -> None:
    """What became of the entries of the export that are not graded: a notebook not read or matched to no student is
    a problem; anything else (a README, a checkpoint) is only noted."""
    if mapping.skipped:
        say.problem(f"{len(mapping.skipped)} entries of the export not unpacked or not read (see submissions.csv):",
                    _listed(mapping.skipped))
    def lost(name: str, why: str) -> bool:  # a notebook of someone in the class, maybe
        return _is_notebook(name) and why != rosters.CANVAS_TEST_STUDENT

    notebooks = [(name, why) for name, why in mapping.unmatched if lost(name, why)]
    if notebooks:
        say.problem(f"{len(notebooks)} notebooks matched to no student, not graded (see submissions.csv):",
                    _listed(notebooks))
    say.not_submissions = [(name, why) for name, why in mapping.unmatched if not lost(name, why)]


def files_written(lms: str | None, book: Path | None, shard: tuple[int, int] | None) -> list[str]:
    """The files section of the console: what was written in ``--out`` (and where the gradebook is)."""
    lines = ["grades.csv, grades_long.csv, submissions.csv" + (", canvas.csv" if lms == "canvas" else ""),
             f"feedback/ (a page per student), results/, logs/, {shards.MARKER}"]
    if lms == "gradescope":
        lines.append("gradescope/ (Gradescope's results.json per student)")
    if book is not None:
        lines.append(f"nbgrader gradebook: {book} (there: `nbgrader export`, or `jupyter lab` for formgrader)")
    elif shard is not None:
        lines.append(f"shard {shard[0]}/{shard[1]}: no gradebook here; `python -m autograder merge` joins the shards")
    return lines
