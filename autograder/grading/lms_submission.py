"""Gradescope's and PrairieLearn's per-submission run: grade the one notebook in the platform's folder and
write the platform's ``results.json`` (``python -m autograder gradescope|prairielearn --chapter CH``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from autograder import atomic_files
from autograder.outputs.lms_results import STUDENT, gradescope_results, prairielearn_results

ROOT_ENV = "SCALELIB_LMS_ROOT"


def _notebooks(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if p.is_file() and not p.is_symlink()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def run(platform: str, chapter: str, root: Path, allow_unsandboxed: bool = False) -> dict:
    """Grade the one submission the platform laid out under ``root`` and write its results.json; returns it."""
    from autograder import course
    from autograder.grading import class_run
    from autograder.instructor import chapter_model

    chapter = course.resolve_chapter(chapter)
    ch = chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb")
    if platform == "gradescope":
        source, target = root / "autograder" / "submission", root / "autograder" / "results" / "results.json"
    else:
        source, target = root / "grade" / "student", root / "grade" / "results" / "results.json"
    found = _notebooks(source) if source.is_dir() else []
    if not found:
        why = f"no notebook (.ipynb) was submitted; submit your {chapter}.ipynb"
        data = ({"score": 0.0, "output": why, "output_format": "text", "visibility": "visible", "tests": []}
                if platform == "gradescope"
                else {"gradable": False, "score": 0.0, "message": why, "output": "", "tests": []})
    else:
        with tempfile.TemporaryDirectory(prefix="lms-") as tmp:
            subs = Path(tmp) / "submissions" / STUDENT  # the folder names the student, whatever the files are called
            subs.mkdir(parents=True)
            for i, nb in enumerate(found):
                shutil.copy2(nb, subs / f"{i:03d}_{nb.name}")
            roster = Path(tmp) / "roster.csv"  # one student, whom every file's folder names
            roster.write_text(f"student\n{STUDENT}\n", encoding="utf-8")
            results = class_run.grade(subs.parent, chapter, Path(tmp) / "out", roster=roster, workers=1, quiet=True,
                                  allow_unsandboxed=allow_unsandboxed,
                                  nbgrader_dir=Path(tmp) / "nbgrader")
        r = next(r for r in results if r.student == STUDENT)
        data = gradescope_results(r, ch) if platform == "gradescope" else prairielearn_results(r, ch)
    atomic_files.atomic_write(target, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return data


def platform_root() -> Path:
    """Where the platform's folders are: ``/``, or ``$SCALELIB_LMS_ROOT`` (tests lay them out under a temporary
    folder)."""
    return Path(os.environ.get(ROOT_ENV, "/"))

