"""python -m autograder {release,check,grade} — see README.md ("For instructors")."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder import course


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate chapters/ from solutions/")
    rel.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    sub.add_parser("check", help="fail if chapters/ is out of date with solutions/")
    gr = sub.add_parser("grade", help="grade a folder or zip of student notebooks")
    gr.add_argument("path", type=Path, help="folder or .zip of submitted notebooks")
    gr.add_argument("--chapter", required=True, help="e.g. 01_rooflines (or 01)")
    gr.add_argument("--out", type=Path, default=Path("grading-output"), help="where grades.csv and feedback/ go")
    args = parser.parse_args(argv)

    from autograder import release

    if args.command == "release":
        names = [course.resolve_chapter(c) for c in args.chapters] or None
        for path in release.release(chapters=names):
            print(f"wrote {path.relative_to(course.ROOT)}")
        return 0
    if args.command == "check":
        stale = release.stale()
        if stale:
            print(f"chapters/ is out of date for: {', '.join(stale)}; run `python -m autograder release`", file=sys.stderr)
            return 1
        print(f"chapters/ is in sync with solutions/ ({len(course.chapter_names())} chapters)")
        return 0
    from autograder import grade

    results = grade.grade(args.path, course.resolve_chapter(args.chapter), args.out)
    graded = sum(r.status == "graded" for r in results)
    print(f"{graded} of {len(results)} notebooks graded; wrote {args.out / 'grades.csv'} and {args.out / 'feedback'}/")
    return 0 if graded == len(results) else 2


if __name__ == "__main__":
    sys.exit(main())
