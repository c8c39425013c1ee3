"""Where one chapter's grading spends its time: ``python -m tests.benchmarks --grading-profile CHAPTER``.

Grades the class that tests/test_grading_chapters.py grades for CHAPTER (the solution, the untouched notebook,
hostile, delegating and second answers) with the suite's settings and prints, per phase of the grader, how often
it ran and how long it took, and the CPU the whole machine and the grader's own process used meanwhile:

* the trusted context: the instructor's notebook run once in the grader (autograder.judging.trusted), on the critical
  path of every student whose replay needs its values;
* kernel starts (autograder.kernel.session.KernelSession: a sandbox, ipykernel's start, the grader's helper), one
  per student per group of exercises that share a surface;
* ``bind`` steps (the set-up's values unpickled in a kernel; JAX is there already: kernels are forked from a
  server that imported it, see autograder/kernel/forkserver.py),
  the student's cells and the judge's calls into the kernel, and the judge's tests (run in the grader).

The wall times of phases that overlap (threads, the warm pool) add up to more than the run's wall time. Nothing
here asserts a speed; it reads the grader's internals, so it is a benchmark and not a test.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from autograder.grading import class_run
from autograder.judging import judge, trusted
from autograder.kernel import session


def _busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux), else None."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


@contextlib.contextmanager
def _timed(phases: dict[str, list[float]]) -> Iterator[None]:
    """While inside, the grader's phases append their wall times to ``phases`` (restored after)."""
    lock = threading.Lock()

    def wrap(fn, label):
        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(self, *args, **kwargs)
            finally:
                what = label(args, kwargs) if callable(label) else label
                with lock:
                    phases[what].append(time.perf_counter() - start)
        return timed

    def run_kind(args, kwargs):
        code = args[0] if args else kwargs.get("code", "")
        if code.startswith("__grader__.bind"):
            return "kernel: bind the set-up's values"
        # the judge's calls of the student's functions (and its helpers) run silently, the student's cells do not
        return "kernel: the judge's calls" if kwargs.get("silent") else "kernel: a student's cell"

    methods = [(trusted.TrustedContext, "build", "trusted context (instructor's notebook)"),
               (session.KernelSession, "__init__", "kernel start (sandbox + ipykernel)"),
               (session.KernelSession, "run", run_kind),
               (judge.Judge, "judge", "judge: one exercise's tests")]
    saved = [(cls, name, getattr(cls, name)) for cls, name, _ in methods]
    for cls, name, label in methods:
        setattr(cls, name, wrap(getattr(cls, name), label))
    try:
        yield
    finally:
        for cls, name, fn in saved:
            setattr(cls, name, fn)


def report(chapter: str) -> None:
    import tests.conftest  # noqa: F401  # the suite's settings: its XLA flags, 8 devices (before JAX starts)
    from tests.test_grading_chapters import write_class

    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}")
    phases: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        subs = Path(tmp) / "subs"
        unrestricted = write_class(chapter, subs)
        busy, own = _busy_cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        with _timed(phases):
            results = class_run.grade(subs, chapter, Path(tmp) / "out", unrestricted=unrestricted, quiet=True)
        wall = time.perf_counter() - start
        after, own_after = _busy_cpu_s(), resource.getrusage(resource.RUSAGE_SELF)
    grader_cpu = (own_after.ru_utime + own_after.ru_stime) - (own.ru_utime + own.ru_stime)
    machine = f"{after - busy:.1f} CPU-s" if busy is not None and after is not None else "unknown (no /proc/stat)"
    print(f"grading {chapter} for {len(results)} students ({os.cpu_count()} cores): {wall:.1f} s wall; the "
          f"machine was busy for {machine}, the grader's own process for {grader_cpu:.1f} CPU-s")
    for r in results:
        print(f"  {r.student:15s} {r.status:8s} {r.score:5.1f} of {r.max_score:<5.1f} {r.seconds:6.1f} s")
    print(f"{'phase':42s} {'count':>6s} {'sum (s)':>8s} {'median (s)':>11s} {'max (s)':>8s}")
    for what, times in sorted(phases.items(), key=lambda kv: -sum(kv[1])):
        print(f"{what:42s} {len(times):6d} {sum(times):8.1f} {statistics.median(times):11.3f} {max(times):8.2f}")
