"""The instructor's notebook, run once per grading run in the grader's own interpreter (the trusted context).

It gives the judge a namespace snapshot before every test cell (expected values are computed there, with the full
library), and it records what each set-up and demo cell binds, so that a student's kernel never runs an
instructor cell: it receives those bindings instead (:meth:`TrustedContext.bindings_for`). A binding is a module
(sent as its name), a value (pickled here, once), or something that cannot be sent. Which of them a kernel gets
depends on its exercise's surface: a value made of scalelib data classes outside the surface travels with their
classes where they can travel (:class:`autograder.kernel.transfer.Shipper`), else as records of their fields; a scalelib
module or function outside it arrives as a stand-in that says so when used.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import pickle
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from autograder import pysource
from autograder.instructor.chapter_model import Chapter
from autograder.kernel import transfer
from autograder.kernel.transfer import library_refs
from autograder.library.surface import Surface

MAX_VALUE_BYTES = 64 * 2**20  # a demo value larger than this is not sent to kernels
_SKIP = {"__builtins__", "__name__", "get_ipython", "In", "Out", "exit", "quit"}


@dataclass(frozen=True)
class Binding:
    name: str
    kind: str  # "module", "value", "unsendable" or "deleted"
    module: str = ""  # kind "module": its name
    data: bytes = b""  # kind "value": its pickle
    refs: frozenset[tuple[str, str]] = frozenset()  # scalelib (and __main__) classes and functions the pickle needs
    plain: bytes = b""  # kind "value": its pickle with scalelib data classes as records (b"" if that needs more)
    why: str = ""  # kind "unsendable": why not


class _ThreadStream(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` while grading: what a thread writes goes where :func:`thread_output` routed
    that thread's output (a judge's capture, or nowhere); a thread not routed writes to the real stream as before.

    ``contextlib.redirect_stdout`` swaps a process-wide object; two threads doing it at once (the trusted context
    and a judge) can leave the grader's own output going nowhere, and a judge's test cell that prints (its
    ``ex.visible_checks`` says the checks passed) would reach the instructor's console between the progress lines.
    """

    def __init__(self, real: TextIO) -> None:
        self.real = real

    def write(self, text: str) -> int:
        sink = getattr(_ROUTE, "sink", None)
        if sink is None:
            return self.real.write(text)
        sink(text)
        return len(text)

    def flush(self) -> None:
        if getattr(_ROUTE, "sink", None) is None:
            self.real.flush()

    # what io.TextIOBase would answer itself (None, False, UnsupportedOperation) is the real stream's: code that
    # asks sys.stderr for its file descriptor or encoding (faulthandler, a progress bar) works as before
    @property
    def encoding(self) -> Any:
        return self.real.encoding

    @encoding.setter
    def encoding(self, value: Any) -> None:
        raise AttributeError("encoding is the real stream's")

    @property
    def errors(self) -> Any:
        return getattr(self.real, "errors", None)

    @errors.setter
    def errors(self, value: Any) -> None:
        raise AttributeError("errors is the real stream's")

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return self.real.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


_ROUTE = threading.local()
_INSTALL = threading.Lock()


def _install() -> None:
    with _INSTALL:
        if not isinstance(sys.stdout, _ThreadStream):
            sys.stdout = _ThreadStream(sys.stdout)
        if not isinstance(sys.stderr, _ThreadStream):
            sys.stderr = _ThreadStream(sys.stderr)


@contextlib.contextmanager
def thread_output(sink: Callable[[str], object]) -> Iterator[None]:
    """Send what this thread writes to ``sys.stdout`` and ``sys.stderr`` to ``sink`` (other threads print as
    usual)."""
    _install()
    before = getattr(_ROUTE, "sink", None)
    _ROUTE.sink = sink
    try:
        yield
    finally:
        _ROUTE.sink = before


def _drop(text: str) -> None:
    return None


def quiet_thread() -> contextlib.AbstractContextManager[None]:
    """Drop what this thread prints to ``sys.stdout`` or ``sys.stderr`` (other threads print as usual)."""
    return thread_output(_drop)


_PLOT = "a figure or plot object (never sent to a kernel)"


def _is_plot_module(module: str) -> bool:
    return module == "matplotlib" or module.startswith("matplotlib.")


def _binding(name: str, value: Any) -> Binding:
    if isinstance(value, types.ModuleType):
        return Binding(name, "module", module=value.__name__)
    if _is_plot_module(type(value).__module__ or ""):
        return Binding(name, "unsendable", why=_PLOT)
    try:
        data = pickle.dumps(value, protocol=4)
    except Exception as err:
        return Binding(name, "unsendable", why=f"a {type(value).__name__}, which cannot be sent ({type(err).__name__})")
    if len(data) > MAX_VALUE_BYTES:
        return Binding(name, "unsendable", why=f"too large to send ({len(data)} bytes)")
    try:
        # a value holding plot objects (the array of axes plt.subplots returns, the lines ax.plot returns) is one
        # too: each kernel would import matplotlib and rebuild the whole figure to unpickle it
        if any(_is_plot_module(module) for module, _ in transfer.pickle_globals(data)):
            return Binding(name, "unsendable", why=f"a value that holds {_PLOT}")
        refs = frozenset(library_refs(data))
        plain = transfer.dumps(value, transfer.never) if refs else data
        if library_refs(plain):
            plain = b""
    except ValueError as err:
        return Binding(name, "unsendable", why=str(err))
    return Binding(name, "value", data=data, refs=refs, plain=plain)


def _names_read(src: str) -> set[str]:
    try:
        tree = pysource.parse(pysource.transform(src))
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


class _IPythonStub:
    """Enough of get_ipython() for the instructor's cells to run in the grader (magics are ignored)."""

    def run_line_magic(self, *a: Any, **k: Any) -> None:
        return None

    def run_cell_magic(self, *a: Any, **k: Any) -> None:
        return None

    def system(self, *a: Any, **k: Any) -> None:
        return None

    getoutput = system


class TrustedContext:
    """The instructor's notebook run once in the grader: snapshots before test cells, bindings of demo cells."""

    def __init__(self, chapter: Chapter) -> None:
        self.chapter = chapter
        self.snapshots: dict[str, dict] = {}
        self.recorded: dict[int, list[Binding]] = {}  # cell index -> what that set-up/demo cell bound
        self.problems: list[str] = []
        self.seconds = 0.0
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._reached = 0  # cells run so far: kernels may replay up to here before the rest is ready
        self._progress = threading.Condition()
        self.exercise_module: types.ModuleType | None = None
        self._payloads: dict[tuple[str, frozenset[tuple[str, str]], int, int],
                             tuple[bytes, frozenset[tuple[str, str]]]] = {}
        self._lock = threading.Lock()

    def build(self) -> None:
        start = time.perf_counter()
        try:
            self._build()
        except BaseException as err:
            self.error = err
        finally:
            self.seconds = time.perf_counter() - start
            self.ready.set()
            with self._progress:
                self._reached = len(self.chapter.cells)
                self._progress.notify_all()

    def wait_for(self, cells: int, timeout: float) -> bool:
        """Wait until the first ``cells`` cells have run (their snapshots and bindings exist); False on timeout."""
        with self._progress:
            return self._progress.wait_for(lambda: self._reached >= cells or self.error is not None,
                                           timeout=max(timeout, 0))

    def _build(self) -> None:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        from scalelib import exercise

        ns: dict = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _IPythonStub}
        last: dict[str, bytes] = {}
        tests = [i for i, (kind, _, _) in enumerate(self.chapter.cells) if kind == "test"]
        stop = tests[-1] + 1 if tests else 0  # nothing after the last test cell is needed by a kernel or a judge
        for index, (kind, src, eid) in enumerate(self.chapter.cells[:stop]):
            if kind == "test":
                self.snapshots[eid] = dict(ns)
            before = dict(ns)
            try:
                with warnings.catch_warnings(), quiet_thread():
                    warnings.simplefilter("ignore")
                    exec(pysource.notebook_code(src, f"<instructor {kind} {eid}>"), ns)
            except Exception as err:
                self.problems.append(f"{kind} cell {eid or ''}: {type(err).__name__}: {err}"[:300])
            plt.close("all")
            if kind in ("setup", "context"):
                self.recorded[index] = self._changes(before, ns, _names_read(src), last)
            self.exercise_module = exercise
            with self._progress:
                self._reached = index + 1
                self._progress.notify_all()

    @staticmethod
    def _changes(before: dict, after: dict, read: set[str], last: dict[str, bytes]) -> list[Binding]:
        out = []
        for name, value in after.items():
            if name in _SKIP or (name.startswith("__") and name.endswith("__")):
                continue
            if name in before and before[name] is value and name not in read:
                continue  # untouched by this cell
            b = _binding(name, value)
            if name in before and before[name] is value and b.kind == "value" and last.get(name) == b.data:
                continue  # read, not changed
            if b.kind == "value":
                last[name] = b.data
            out.append(b)
        out += [Binding(name, "deleted") for name in before if name not in after and name not in _SKIP]
        return out

    # -- what a kernel receives ------------------------------------------------------------------------------------

    def bindings_for(self, surface: Surface, first: int, stop: int,
                     withheld: frozenset[tuple[str, str]] = frozenset()) -> tuple[bytes, frozenset[tuple[str, str]]]:
        """The bindings of set-up/demo cells ``first`` to ``stop - 1`` as seen by a kernel with ``surface`` whose
        exercises withhold ``withheld``: what ``__grader__.bind`` reads (a pickle of plain tuples), and
        ``(module, name)`` of the scalelib code that travels with it (see :class:`autograder.kernel.transfer.Shipper`).
        Computed once per run and surface."""
        key = (surface.key, withheld, first, stop)
        with self._lock:
            if key not in self._payloads:
                merged: dict[str, Binding] = {}
                for index in range(first, stop):
                    for b in self.recorded.get(index, []):
                        merged.pop(b.name, None)
                        merged[b.name] = b
                shipper = transfer.Shipper(surface.allows, withheld, lenient=True)
                entries = [_entry(b, surface, shipper) for b in merged.values()]
                self._payloads[key] = (pickle.dumps(entries, protocol=4), frozenset(shipper.sent))
            return self._payloads[key]

    def namespace(self, eid: str) -> dict:
        """A copy of the namespace just before ``eid``'s test cell."""
        return dict(self.snapshots[eid])


def _entry(b: Binding, surface: Surface, shipper: transfer.Shipper) -> tuple[str, str, Any]:
    """One binding for a kernel: ("module", name, module), ("value", name, pickle), ("poison", name, message) or
    ("delete", name, None). A value made of scalelib data classes outside the surface travels with their classes
    where they can travel (``shipper``), else as records."""
    allowed = surface.describe()
    if b.kind == "deleted":
        return ("delete", b.name, None)
    if b.kind == "module":
        lib = b.module == "scalelib" or b.module.startswith("scalelib.")
        if not lib or b.module in surface.modules:
            return ("module", b.name, b.module)
        why = f"{b.name} ({b.module}) is not available while this exercise is graded; it may use {allowed}"
        return ("poison", b.name, why)
    if b.kind == "unsendable":
        return ("poison", b.name, f"{b.name} is not available while this exercise is graded: {b.why}")
    outside = sorted(f"{m}.{q}" for m, q in b.refs if m == "__main__" or not surface.allows(m, q))
    if outside:
        shipped = _shipped(b, surface, shipper)
        if shipped:
            return ("value", b.name, shipped)
    if outside and b.plain:
        return ("value", b.name, b.plain)  # its fields, without the methods of classes outside the surface
    if outside:
        why = (f"{b.name} is not available while this exercise is graded: it is made with {', '.join(outside[:3])}, "
               f"and this exercise may use {allowed}")
        return ("poison", b.name, why)
    return ("value", b.name, b.data)


def _shipped(b: Binding, surface: Surface, shipper: transfer.Shipper) -> bytes:
    """``b``'s value pickled with the classes that can travel (b"" where it would still need more of scalelib)."""
    sent = set(shipper.sent)
    try:
        data = transfer.dumps(pickle.loads(b.data), surface.allows, shipper)  # the grader's own pickle
    except Exception:
        shipper.sent = sent
        return b""
    if any(m == "__main__" or not surface.allows(m, q) for m, q in library_refs(data)):
        shipper.sent = sent  # not sent after all
        return b""
    return data
