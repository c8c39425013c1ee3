"""Test session set-up: 8 simulated CPU devices before anything starts JAX."""

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable

import nbval.kernel
from jupyter_client.manager import KernelManager
from traitlets import CaselessStrEnum, default

os.environ.setdefault("MPLBACKEND", "Agg")  # headless plots in tests

# Compile time is most of the suite's time: thousands of small programs, each compiled once and run a few times.
# Three XLA flags make XLA:CPU compile them three to four times faster:
# * LLVM's optimizations off (XLA's backend level 0; its default is 3): only the machine code changes;
# * the generated code in one LLVM module, not split into 32 compiled side by side (XLA's default): on the suite's
#   2 busy cores the split costs more CPU than it saves (about 15% of a compile); the optimized HLO, its analyses
#   and the numerics are the same;
# * XLA:CPU's older fusion emitters: the ops XLA fuses change, hence what its cost and memory analyses count (the
#   FLOPs of elementwise work by a few in 10^4, bytes accessed, temp bytes) and the names fused ops get in a trace.
# What stays is the numerics (within the suite's tolerances), the collectives in the optimized HLO, and the argument and
# output bytes (tests/test_suite_groups.py holds all of it). So a check that holds a prediction against XLA's cost or
# memory analysis, or reads a program's fused ops, compiles that program with XLA_DEFAULT_FUSION (``lowered.compile(
# XLA_DEFAULT_FUSION)``, ``jax.jit(f, compiler_options=XLA_DEFAULT_FUSION)``), which gives exactly what XLA's defaults
# give (tests/test_suite_groups.py fails for a test module that reads an analysis and never uses it). A bound with room
# to spare need not: test_parallel_schemes holds its case steps' temp bytes under one at the suite's flags, which move
# them by under 1 % (test_suite_groups asserts it; the module's docstring has what it measured and saves). Every
# process the suite starts inherits the flags (launched ranks, notebook kernels, and the grader's sandboxed kernels,
# which get the grader's XLA flags as its trusted context has them); a student's Run All
# (tests/test_chapters_student.py) compiles at XLA's defaults, as students do. SCALELIB_TEST_XLA_DEFAULTS=1 runs the
# whole suite at defaults.
FAST_COMPILE_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_parallel_codegen_split_count=1",
                          "--xla_cpu_use_fusion_emitters=false")
XLA_DEFAULT_FUSION = {"xla_cpu_use_fusion_emitters": True}  # compile options: XLA's own default
AT_XLA_DEFAULTS = os.environ.get("SCALELIB_TEST_XLA_DEFAULTS", "") not in ("", "0")
if not AT_XLA_DEFAULTS:
    _flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join([*(f for f in FAST_COMPILE_XLA_FLAGS if f not in _flags), *_flags])


from scalelib import devices  # noqa: E402

DEVICE_INFO = devices.setup(8)

_IPC_FOLDER = tempfile.mkdtemp(prefix="test-kernels-")
atexit.register(shutil.rmtree, _IPC_FOLDER, True)


class IpcKernelManager(KernelManager):
    """The notebook kernels this suite starts (nbval's, the student Run All's) talk over Unix sockets in a folder of
    this process's, not over TCP. Over TCP, jupyter_client picks five free ports and the kernel binds them a second
    later, once its interpreter has started; any other process may take one meanwhile (the suite's gloo ranks,
    launchers and other kernels open ports all the time), and then the kernel dies before replying to kernel_info:
    every cell of one notebook errored with that message in one suite run (the kernel's stderr was not kept, so
    this race is the likely cause, not a proven one)."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _ip_in_own_folder(self) -> str:  # absolute: the kernel runs in the notebook's folder, its client here
        return os.path.join(_IPC_FOLDER, uuid.uuid4().hex[:12])


# nbval starts its kernels with the KernelManager its module imported (nbval/kernel.py, start_new_kernel)
assert nbval.kernel.KernelManager is KernelManager, "nbval no longer names jupyter_client's KernelManager"
nbval.kernel.KernelManager = IpcKernelManager  # type: ignore[misc]


def pytest_terminal_summary(terminalreporter):
    """Say how much of the book's numeric results the suite reproduces."""
    try:
        from tests.test_book_answers import coverage
    except Exception:  # the book-answer test was not collected in this run
        return
    parts = [f"{name}: {n} of {total}" for name, (n, total) in coverage().items()]
    terminalreporter.write_line("book answers reproduced by scalelib: " + "; ".join(parts))


# ------------------------------------------------------------------ how the workers share the suite
# course.py runs pytest with `--dist loadfile --no-loadscope-reorder`; the scheduler below keeps loadfile's rule (a
# group goes whole to one worker, so its module fixtures are built once) but splits three long files into groups
# whose tests share a fixture or a cached compile: one chapter graded, the scheme cases that share a single-device
# reference, one launch of the self-check. The collection is sorted longest group first so that no worker is left
# alone with a long group at the end.
# (xdist's own `loadgroup` cannot do this here: with pytest 9 its group marks no longer reach the scheduler.)


def _scheme_case_group(param: str) -> str:
    """tests/test_parallel_schemes.py's group for a case id: the first case (scalelib.parallel.cases.CASES) with the
    same single-device reference (``Case.reference_inputs``), which each process computes once; an id of no
    such case (a FLOPs-only case, a bad input) is its own group. (Split one group per case, the six cases sharing
    the data-parallel reference computed it on both workers.)"""
    from scalelib.parallel.cases import CASES

    case = next((c for c in CASES if c.id == param), None)
    return param if case is None else next(c.id for c in CASES if c.reference_inputs == case.reference_inputs)


SPLIT: dict[str, Callable[[str], str] | str | None] = {
    "test_grading_chapters.py": None,  # each parameter (a chapter) its own group
    "test_parallel_schemes.py": _scheme_case_group,  # the cases that share a reference
    "test_parallel_selfcheck.py": "test_other_splits_of_8_devices",  # each of its launches; the rest share one
}
# Files that share something made once per process (tests/trace_cases.py's captured traces, the serving tests'
# model and compiled steps in tests/serving_common.py) form one group: made once, on one worker.
JOIN = ("test_profiling_trace_", "test_serving_")
# Seconds each group took in a full run on a quiet 2-core machine (`--durations`), for the order only: a group
# not listed runs after these, in the collection's order; a wrong figure costs time, never a result.
LONG_GROUPS_S = {
    # first on purpose, with test_launch.py beside it (below); since its launches compile with the older fusion
    # emitters it takes about 45-55 s (it took 85-135 s before), which no longer makes it the longest group
    "test_parallel_selfcheck.py": 150,
    # right beside the self-check, though short: most of its time is waiting (a 12 s hang, gloo's fixed 30 s), and
    # the self-check's launches of several processes use the core it leaves free
    "test_launch.py": 149,
    "test_grading_chapters.py[05_training]": 85,
    "test_model.py": 75,
    "test_grading_scale.py": 60,
    "test_cluster.py": 50,
    "test_grading_chapters.py[09_profiling]": 40,
    "test_grading_chapters.py[04_transformers]": 40,
    "test_grading_chapters.py[03_sharding]": 40,
    "test_sandbox.py": 40,
    "test_parallel_selfcheck.py[8-1-schemes1]": 38,
    "test_shards.py": 38,
    "test_grading_chapters.py[10_jax]": 37,
    "test_grading_chapters.py[07_inference]": 35,
    "test_release.py": 30,
    "test_parallel_expert.py": 25,
    "test_parallel_selfcheck.py[4-2-schemes0]": 24,
    "test_lms.py": 24,
    "test_grading.py": 24,
    "test_serving_speculative.py": 22,
    "test_kernel.py": 22,
    # test_parallel_schemes' longest groups: their tests' one-process durations, summed, times the two-worker
    # slowdown (about 1.5)
    "test_parallel_schemes.py[data-8]": 32,
    "test_parallel_schemes.py[expert-4]": 20,
    "test_parallel_schemes.py[seq-all_gather-4]": 19,
    "test_parallel_schemes.py[1f1b-2]": 18,
    "test_parallel_schemes.py[tensor-2x4]": 17,
    "test_profiling_trace_*.py": 45,
    "test_serving_*.py": 40,
}


def work_group(nodeid: str) -> str:
    """The group of a test id: its file, the files of its JOIN prefix, or for the files in SPLIT its file and
    parameters (or the group SPLIT's function gives them)."""
    path, _, rest = nodeid.partition("::")
    folder, _, name = path.rpartition("/")
    joined = next((prefix for prefix in JOIN if name.startswith(prefix)), None)
    if joined:
        return f"{folder}/{joined}*.py"
    func, _, param = rest.partition("[")
    if name not in SPLIT or not param:
        return path
    rule, param = SPLIT[name], param.rstrip("]")
    if isinstance(rule, str):  # only that test function is split
        return f"{path}[{param}]" if rule == func else path
    return f"{path}[{rule(param) if rule else param}]"


def _seconds(nodeid: str) -> float:
    return LONG_GROUPS_S.get(work_group(nodeid).rsplit("/", 1)[-1], 0)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: -_seconds(item.nodeid))  # stable: within a group, as collected


class _Groups:
    """The scheduler hook, registered only where xdist runs (an unknown hook would stop `-p no:xdist`)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") != "loadfile":
            return None  # any other --dist: xdist's own
        from xdist.scheduler import LoadScopeScheduling

        class Groups(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return work_group(nodeid)

        return Groups(config, log)


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Groups(), "scalelib-test-groups")
