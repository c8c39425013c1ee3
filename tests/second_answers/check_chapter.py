"""Grade one chapter's second answers (tests/second_answers/) and print each exercise's score.

    .venv/bin/python -m tests.second_answers.check_chapter 07_inference [--open] [--solution] [--only EID ...]

The student notebook gets the solution in every answer cell, except the exercises that a module of this
package gives a second answer for (``SECOND[chapter][exercise id]``); ``--only`` keeps the solution for all the
others. ``--solution`` grades the untouched solution next to it, to tell a grader problem from an answer's; ``--open``
grades the same answers with all of scalelib reachable, to tell what the grader withholds from a wrong answer.
For working on the answers; the grading tests hook the same answers into their shared graded fixture.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import course
from autograder.grading import class_run
from autograder.instructor import chapter_model
from tests.notebook_answers import answered


def second_answers(chapter: str) -> dict[str, str]:
    found: dict[str, str] = {}
    package = Path(__file__).parent
    for info in pkgutil.iter_modules([str(package)]):
        if info.name == Path(__file__).stem:
            continue
        mod = importlib.import_module(f"tests.second_answers.{info.name}")
        found.update(getattr(mod, "SECOND", {}).get(chapter, {}))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapter")
    ap.add_argument("--solution", action="store_true", help="also grade the solution as a second student")
    ap.add_argument("--open", action="store_true",
                    help="also grade the second answers with all of scalelib reachable (student 'second_open'): an "
                         "answer that scores there but not as 'second' loses only to what the grader withholds")
    ap.add_argument("--only", nargs="*", default=None, help="exercise ids to replace (default: all given)")
    args = ap.parse_args(argv)
    answers = second_answers(args.chapter)
    if args.only is not None:
        answers = {e: a for e, a in answers.items() if e in args.only}

    def second(gid: str, src: str) -> str:
        return answers.get(gid[: -len("-answer")], src).lstrip()

    with tempfile.TemporaryDirectory(prefix="second-") as tmp:
        subs = Path(tmp) / "subs"
        subs.mkdir()
        nbformat.write(answered(args.chapter, second), subs / "second.ipynb")
        if args.open:
            nbformat.write(answered(args.chapter, second), subs / "second_open.ipynb")
        if args.solution:
            nbformat.write(answered(args.chapter), subs / "solution.ipynb")
        results = {r.student: r for r in class_run.grade(subs, args.chapter, Path(tmp) / "out", quiet=True,
                                                     unrestricted=frozenset({"second_open"}))}
    points = {e: x.points for e, x in chapter_model.load_chapter(course.SOLUTIONS / f"{args.chapter}.ipynb").exercises.items()}
    bad = 0
    for student, r in sorted(results.items()):
        print(f"--- {student}: {r.score:g} / {r.max_score:g} ({r.status.value}) {r.detail}")
        for eid, score in r.exercises.items():
            mark = "second" if eid in answers else "solution"
            full = score == points[eid]
            print(f"  {eid:34s} {score:4g} / {points[eid]:g} [{mark}] {'full' if full else 'LOST'}  "
                  f"{'' if full else r.messages.get(eid, '')[:800]}")
            bad += student == "second" and not full
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
