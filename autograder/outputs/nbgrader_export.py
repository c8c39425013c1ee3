"""``nbgrader export`` in the course folder the grader writes: nbgrader's CSV, made safe to open in a spreadsheet.

nbgrader's own exporter (``CsvExportPlugin`` of nbgrader 0.9) joins each row's fields with "," and quotes none, so a
student id, name or email such as ``=1+1``, ``a;b,c`` or one holding a line break comes out as a formula cell or as
columns shifted. :class:`SafeCsvExportPlugin` writes the same file: the same columns in the same order, one row per
assignment and student (0 for a student without a submission), ``--to`` (default ``grades.csv``), ``--assignment``
and ``--student`` as nbgrader reads them. Only the writing differs: it is :func:`autograder.safe_text.csv_text`, as
for every CSV the grader writes, so text cells are quoted and escaped and one that begins with ``=``, ``+``, ``-``,
``@``, tab or carriage return gets a leading apostrophe (``safe_text.uncell`` gives the value back); scores are
bare numbers. The course folder's ``nbgrader_config.py`` (``gradebook.CONFIG``) makes it the folder's exporter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbgrader.api import MissingEntry
from nbgrader.plugins import ExportPlugin

from autograder import safe_text

COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "raw_score", "late_submission_penalty", "score", "max_score")  # nbgrader 0.9's, in its order


def _text(value: object) -> str:
    return "" if value is None else str(value)  # as nbgrader writes a date or a missing value


class SafeCsvExportPlugin(ExportPlugin):
    """nbgrader's CSV export with every cell through :func:`autograder.safe_text.cell` (see the module)."""

    def export(self, gradebook: Any) -> None:
        dest = self.to or "grades.csv"
        students = [str(s) for s in self.student]
        assignments = [str(a) for a in self.assignment]
        self.log.info("Exporting grades to %s", dest)
        if assignments:
            self.log.info("Exporting only assignments: %s", assignments)
        if students:
            self.log.info("Exporting only students: %s", students)
        rows: list[list[object]] = [list(COLUMNS)]
        for assignment in gradebook.assignments:
            if assignments and assignment.name not in assignments:
                continue
            for student in gradebook.students:
                if students and student.id not in students:
                    continue
                try:
                    sub = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:  # nothing submitted: 0, as nbgrader's exporter gives
                    timestamp, raw, penalty = "", 0.0, 0.0
                else:
                    timestamp, raw, penalty = _text(sub.timestamp), sub.score, sub.late_submission_penalty or 0.0
                rows.append([assignment.name, _text(assignment.duedate), timestamp, student.id,
                             _text(student.last_name), _text(student.first_name), _text(student.email),
                             raw, penalty, max(0.0, raw - penalty), assignment.max_score])
        Path(dest).write_text(safe_text.csv_text(rows), encoding="utf-8", newline="")
