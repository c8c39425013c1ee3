"""``python -m autograder VERB``: one verb per action of an instructor or a platform (README, "For instructors").

release, check: the chapters from solutions/ · grade, merge: a class (whole or in shards) · export: the class's files
again, with formgrader's manual scores · forget-unsafe-ids, doctor: the gradebook's and the host's health ·
gradescope, prairielearn: one submission, inside that platform's container.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from autograder import course

if TYPE_CHECKING:
    from autograder.sandbox.probes import HostCheck

# `grade`'s exit status: 0 every student reached "graded"; 3 the class was graded and its files written, but
# some students did not reach "graded" (missing, invalid notebook, timed out, crashed: see grades.csv);
# 1 grading refused or failed (the message says why); 2 a usage error (argparse's own status).
GRADED, NOT_ALL_GRADED = 0, 3
GRADE_STATUS = ("exit status: 0 every student graded; 3 graded and written, but some students did not reach "
                "'graded' (see grades.csv); 1 refused or failed (the message says why); 2 usage error")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="regenerate chapters/ from solutions/")
    rel.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    rel.add_argument("--install-source", help="pip requirement the set-up cell installs in Colab; stored as "
                                              "pyproject's [tool.scalelib-course] install-source, which every later "
                                              "release and check reads (commit pyproject.toml)")
    sub.add_parser("check", help="fail if chapters/ is out of date with solutions/")
    gr = sub.add_parser("grade", help="grade a folder or zip of student notebooks", epilog=GRADE_STATUS)
    gr.add_argument("path", type=Path, help="folder or .zip of submitted notebooks")
    gr.add_argument("--chapter", required=True, help="e.g. 01_rooflines (or 01)")
    gr.add_argument("--out", type=Path, default=Path("grading-output"), help="where grades.csv and feedback/ go")
    gr.add_argument("--roster", type=Path,
                    help="CSV with a 'student' column (optional: name, id, sis_id, login, section, email, aliases)")
    gr.add_argument("--workers", type=int, default=None, help="kernels side by side (default: number of cores)")
    gr.add_argument("--force", action="store_true", help="re-grade students already graded in --out")
    gr.add_argument("--cell-timeout", type=float, help="seconds per cell (default: pyproject cell-timeout-s)")
    gr.add_argument("--notebook-timeout", type=float,
                    help="seconds per notebook (default: pyproject notebook-timeout-s)")
    gr.add_argument("--memory-mb", type=int,
                    help="memory limit per kernel sandbox in MB, 0 for none (default: pyproject memory-mb)")
    gr.add_argument("--disk-mb", type=int,
                    help="disk space per kernel sandbox in MB, all its files together; 0: up to half the RAM, within "
                         "--memory-mb (default: pyproject disk-mb)")
    gr.add_argument("--nbgrader-course", type=Path,
                    help="nbgrader course folder whose gradebook.db receives the grades (default: OUT/nbgrader)")
    gr.add_argument("--max-output-bytes", type=int,
                    help="text output kept per notebook (default: pyproject max-output-bytes)")
    gr.add_argument("--allow-unsandboxed", action="store_true",
                    help="grade even where no OS sandbox is available (student code then runs as you)")
    gr.add_argument("--shard", help="K/N: grade only shard K of N of the class (join the outputs with `merge`)")
    lms_help = "also write canvas.csv for Canvas's gradebook import (needs --roster)"
    gr.add_argument("--lms", choices=["canvas", "gradescope"],
                    help=lms_help + ", or gradescope/<student>/results.json in Gradescope's format")
    gr.add_argument("--lms-assignment", help="the assignment column for --lms, e.g. 'Chapter 1 (12345)' with Canvas's "
                                             "assignment id (default: the chapter's own column when --roster is "
                                             "Canvas's gradebook export, else the chapter's name)")
    mg = sub.add_parser("merge", help="join the outputs of `grade --shard K/N` runs into one class")
    mg.add_argument("shards", nargs="+", type=Path, help="the shards' --out folders")
    mg.add_argument("--out", type=Path, required=True, help="where the class's grades.csv, feedback/ ... go")
    mg.add_argument("--allow-partial", action="store_true", help="write the class even if a shard is missing or failed")
    mg.add_argument("--roster", type=Path, help="the roster the shards used (for --lms)")
    mg.add_argument("--lms", choices=["canvas"], help=lms_help)
    mg.add_argument("--lms-assignment", help="as for grade")
    mg.add_argument("--nbgrader-course", type=Path, help="nbgrader course folder (default: OUT/nbgrader)")
    ex = sub.add_parser("export", help="write grades.csv, grades_long.csv (and canvas.csv or gradescope/) again "
                        "from a graded class and its gradebook, with the scores typed in formgrader since; runs no "
                        "student code")
    ex.add_argument("--out", type=Path, required=True, help="the --out of the `grade` or `merge` run")
    ex.add_argument("--roster", type=Path, help="the roster the class was graded with (needed for --lms canvas)")
    ex.add_argument("--lms", choices=["canvas", "gradescope"], help="also write canvas.csv or gradescope/, as grade")
    ex.add_argument("--lms-assignment", help="as for grade")
    ex.add_argument("--nbgrader-course", type=Path, help="nbgrader course folder (default: OUT/nbgrader)")
    fu = sub.add_parser("forget-unsafe-ids", help="list (and with --yes remove) the gradebook rows an earlier grader "
                        "wrote under student ids that formgrader would show unescaped")
    fu.add_argument("course_dir", type=Path, help="the nbgrader course folder (grade's --nbgrader-course, default "
                                                   "OUT/nbgrader)")
    fu.add_argument("--yes", action="store_true", help="remove those rows and their submissions from gradebook.db")
    sub.add_parser("doctor", help="check what the sandbox needs from this host, and that kernels import the "
                                    "grader's own scalelib")
    for platform in ("gradescope", "prairielearn"):
        pl = sub.add_parser(platform, help=f"grade the one submission {platform} laid out in its container and write "
                                           "its results.json (the deploy recipe's entry point)")
        pl.add_argument("--chapter", default=os.environ.get("SCALELIB_CHAPTER"),
                        help="e.g. 01_rooflines (default: $SCALELIB_CHAPTER)")
        pl.add_argument("--allow-unsandboxed", action="store_true",
                        default=os.environ.get("SCALELIB_ALLOW_UNSANDBOXED") == "1",
                        help="grade where no OS sandbox can be made (the container is then the only boundary)")
    args = parser.parse_args(argv)
    _resolve_paths(args)

    if args.command == "doctor":
        ok = True
        for c in doctor_checks():
            print(f"{'ok  ' if c.ok else ('FAIL' if c.required else 'weak')}  {c.name}: {c.detail}", flush=True)
            ok = ok and (c.ok or not c.required)
        return 0 if ok else 1

    if args.command in ("gradescope", "prairielearn"):
        from autograder.grading import lms_submission

        if not args.chapter:
            parser.error("say which chapter: --chapter 01_rooflines or SCALELIB_CHAPTER=01_rooflines")
        data = lms_submission.run(args.command, args.chapter, lms_submission.platform_root(), args.allow_unsandboxed)
        print(data.get("output") or data.get("message") or f"score {data['score']}")
        return 0

    if args.command == "forget-unsafe-ids":
        from autograder.outputs import gradebook

        if not (args.course_dir / "gradebook.db").exists():
            print(f"no gradebook.db in {args.course_dir}: give the nbgrader course folder grade wrote "
                  "(--nbgrader-course, default OUT/nbgrader)", file=sys.stderr)
            return 2
        lines = gradebook.forget(args.course_dir, remove=args.yes)
        for line in lines:
            print(line)
        print(f"{len(lines)} rows {'removed' if args.yes else 'found; run again with --yes to remove them'}"
              if lines else "no unsafe ids: formgrader can be opened on this folder")
        return 0

    if args.command == "merge":
        from autograder.grading import shard_merge, shards

        merged = shard_merge.merge(args.shards, args.out, allow_partial=args.allow_partial, roster=args.roster,
                              lms=args.lms, lms_assignment=args.lms_assignment, nbgrader_dir=args.nbgrader_course)
        print(f"{len(merged)} students from {len(args.shards)} shards; wrote {args.out / 'grades.csv'}")
        from autograder.outputs import gradebook

        warning = gradebook.unsafe_ids_warning(args.nbgrader_course or args.out / "nbgrader")
        if warning:
            print(warning)
        return 0

    if args.command == "export":
        from autograder.grading import re_export
        from autograder.intake import canvas_columns
        from autograder.outputs import kept_scores
        from autograder.safe_text import printable

        kept = re_export.rewrite(args.out, roster=args.roster, lms=args.lms, lms_assignment=args.lms_assignment,
                               nbgrader_dir=args.nbgrader_course)
        note = canvas_columns.student_view_note(args.roster) if args.roster else ""
        for line in ([note] if note else []) + kept_scores.console_lines(kept):
            print(printable(line))
        files = "grades.csv, grades_long.csv" + {"canvas": ", canvas.csv", "gradescope": ", gradescope/"}.get(
            args.lms or "", "")
        print(f"{len(kept) or 'no'} manual score{'' if len(kept) == 1 else 's'} from formgrader; wrote {files} in "
              f"{args.out}")
        return 0

    from autograder.instructor import release

    if args.command == "release":
        if args.install_source is not None and course.store_install_source(args.install_source):
            print(f"stored install-source = {args.install_source.strip()!r} in pyproject.toml "
                  "([tool.scalelib-course]); commit it with chapters/")
        source = course.settings().install_source
        release.warn_if_unconfigured(source)
        names = [course.resolve_chapter(c) for c in args.chapters] or None
        try:
            written = release.release(chapters=names, install_source=source)
        except release.ReleaseError as err:
            print(f"release failed: {err}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {path.relative_to(course.ROOT)}")
        release.warn_if_unconfigured(source)  # again, below the list, where it is seen
        return 0
    if args.command == "check":
        problems = release.check()
        if problems:
            for p in problems:
                print(f"{p.chapter}: {p.reason}", file=sys.stderr)
            print("chapters/ is out of date; run `python -m autograder release` and commit chapters/ and README.md",
                  file=sys.stderr)
            return 1
        print(f"chapters/ is in sync with solutions/ ({len(course.chapter_names())} chapters)")
        return 0
    from autograder.grading import class_run, shard_merge, shards

    # grade prints the run's progress, its problems and the files it wrote (in that order)
    results = class_run.grade(args.path, course.resolve_chapter(args.chapter), args.out, roster=args.roster,
                          workers=args.workers, force=args.force, cell_timeout_s=args.cell_timeout,
                          notebook_timeout_s=args.notebook_timeout, memory_mb=args.memory_mb, disk_mb=args.disk_mb,
                          max_output_bytes=args.max_output_bytes, nbgrader_dir=args.nbgrader_course,
                          allow_unsandboxed=args.allow_unsandboxed, lms=args.lms, lms_assignment=args.lms_assignment,
                          shard=shards.parse(args.shard) if args.shard else None)
    return GRADED if all(r.status == "graded" for r in results) else NOT_ALL_GRADED


_PATH_ARGS = ("path", "out", "roster", "nbgrader_course", "shards", "course_dir")


def _resolve_paths(args: argparse.Namespace) -> None:
    """Every path of the command line made absolute (``Path.resolve``) once, before any thread starts: what the
    threads of ``grade`` write then lands where ``--out`` said whatever the process's working directory is later."""
    for name in _PATH_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, Path):
            setattr(args, name, value.resolve())
        elif isinstance(value, list):
            setattr(args, name, [v.resolve() if isinstance(v, Path) else v for v in value])


def doctor_checks() -> Iterator[HostCheck]:
    """``doctor``'s checks, each yielded as soon as it is known (the sandbox's, the fork server's, then whether
    kernels import the grader's scalelib), so that each is printed before the next one runs."""
    from autograder.kernel import forkserver, library_proof
    from autograder.sandbox import probes

    yield from probes.host_checks()
    yield from forkserver.host_checks()
    same, detail = library_proof.doctor()
    yield probes.HostCheck("kernels' scalelib", same, detail, True)

