"""Judging outside the student's kernel.

The grader process holds a *trusted context*: the instructor's notebook executed once per grading run,
in the grader's own interpreter, with the instructor's solutions, and a snapshot of its namespace
taken just before every test cell. To judge exercise ``E`` for a student, the instructor's test cell
(visible and hidden parts) is executed here, in a copy of that snapshot, with every function the
students write replaced by a :class:`Remote`: calling it sends the arguments (pickled by the grader)
to the student's kernel, which calls the student's function and answers with plain JSON (numbers,
strings, lists, tuples, dicts, arrays as nested lists; anything else becomes an unreadable
:class:`Opaque`). Expected values, ``ex.check_close`` and every comparison run here, with the real
numpy, scalelib and builtins: nothing the kernel does to its own numpy, scalelib, builtins or
assertion helpers changes a verdict, an object whose ``__eq__`` is always true never leaves the
kernel, and the student's copy of a test cell is never run.

``ex.forbid(...)`` inside a test cell is recorded, not applied here: each remote call made inside the
``with`` block asks the kernel to disable those scalelib functions (by module and name) during the call.

Checks that must trace the student's function (it runs inside ``shard_map`` or ``jax.grad``, or the
test reads its jaxpr) put that part in a helper marked ``@ex.probe``. The grader sends the probe's
source (instructor code) to the student's kernel, calls it there with plain arguments and gets plain
values back (outputs, program text, counts); every comparison still runs here. What a probe reports
is measured in the student's process, so a student who rewrites JAX itself could forge its *program
text*; they cannot forge values, and no assertion helper of theirs takes part.

A test cell that still passes the student's function something that cannot be sent (a traced JAX
value, a lambda) outside a probe cannot be judged this way; it then runs inside the student's kernel,
as nbgrader would run it, and the result says so (``judged in kernel``).
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import io
import math
import pickle
import threading
import time
import types
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from autograder import pysource
from autograder.align import Chapter
from autograder.kernel import KernelDied, KernelSession


class NotPortable(Exception):
    """An argument could not be sent to the kernel: judge this test cell inside the kernel."""


class CallTimeout(Exception):
    pass


class StudentError(Exception):
    """The student's function raised; the message is theirs (type name first)."""


class Opaque:
    """A value the kernel returned that is not plain data (never equal to anything but itself)."""

    def __init__(self, kind: str, text: str = ""):
        self.kind, self.text = kind, text[:200]

    def __repr__(self) -> str:
        return f"<{self.kind}: {self.text}>" if self.text else f"<{self.kind}>"


_ARRAY_DTYPES = {"|b1": np.bool_, "<i8": np.int64, "<f8": np.float64}


def _array(obj: dict) -> Any:
    dtype = _ARRAY_DTYPES.get(obj.get("dtype"))  # type: ignore[arg-type]
    shape = obj.get("shape")
    data = obj.get("array")
    if dtype is None or type(shape) is not list or type(data) is not str or len(shape) > 32 or not all(
            type(n) is int and n >= 0 for n in shape):
        return Opaque("unreadable array")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return Opaque("unreadable array")
    if len(raw) != math.prod(shape) * np.dtype(dtype).itemsize:
        return Opaque("unreadable array")
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def decode(obj: Any, depth: int = 0) -> Any:
    """Untrusted JSON -> plain Python values (exact types only)."""
    if depth > 50:
        return Opaque("too deeply nested value")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is list:
        return [decode(v, depth + 1) for v in obj]
    if type(obj) is dict and 1 <= len(obj) <= 3:
        if "tuple" in obj and type(obj["tuple"]) is list:
            return tuple(decode(v, depth + 1) for v in obj["tuple"])
        if "dict" in obj and type(obj["dict"]) is list:
            try:
                return {decode(k, depth + 1): decode(v, depth + 1) for k, v in obj["dict"]}
            except (TypeError, ValueError):
                return Opaque("unreadable dict")
        if "array" in obj:
            return _array(obj)
        if "opaque" in obj:
            return Opaque(str(obj.get("opaque"))[:80], str(obj.get("repr", "")))
    return Opaque("malformed value")


class _Forbidden(threading.local):
    def __init__(self):
        self.stack: list[list[tuple[str, str]]] = []

    def current(self) -> list[tuple[str, str]]:
        return [pair for frame in self.stack for pair in frame]


_FORBIDDEN = _Forbidden()


@contextlib.contextmanager
def recording_forbid(*functions):
    """``ex.forbid`` in the trusted context: remember what to disable in the kernel, change nothing here."""
    frame = []
    for fn in functions:
        fn = fn.fget if isinstance(fn, property) else fn
        if not isinstance(fn, types.FunctionType):
            raise TypeError(f"forbid() takes Python functions, got {fn!r}")
        frame.append((fn.__module__, fn.__qualname__))
    _FORBIDDEN.stack.append(frame)
    try:
        yield
    finally:
        _FORBIDDEN.stack.pop()


class Remote:
    """Stands for one of the student's functions in the trusted context."""

    def __init__(self, judge: Judge, name: str):
        self._judge, self._name = judge, name
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        try:
            payload = base64.b64encode(pickle.dumps((_portable(args), _portable(kwargs)))).decode()
        except Exception as err:  # noqa: BLE001 - anything pickle cannot handle
            raise NotPortable(f"{self._name}: {type(err).__name__}: {err}") from None
        code = f"__grader_out__ = __grader__.call({self._name!r}, {payload!r}, {tuple(_FORBIDDEN.current())!r})"
        return self._judge.ask(code)

    def __repr__(self) -> str:
        return f"<student function {self._name}>"


def _portable(value):
    """JAX arrays travel as numpy arrays; tracers and functions do not travel at all."""
    if isinstance(value, (list, tuple)):
        return type(value)(_portable(v) for v in value) if type(value) in (list, tuple) else value
    if isinstance(value, dict) and type(value) is dict:
        return {k: _portable(v) for k, v in value.items()}
    module = type(value).__module__
    if module.startswith("jax") and "Tracer" in type(value).__name__:
        raise NotPortable("a traced value")
    if module.startswith("jax") and hasattr(value, "shape") and hasattr(value, "dtype"):
        return np.asarray(value)
    if callable(value) and not isinstance(value, type):
        raise NotPortable("a function")
    return value


class _IPythonStub:
    """Enough of get_ipython() for the instructor's cells to run in the grader (magics are ignored)."""

    def run_line_magic(self, *a, **k):
        return None

    def run_cell_magic(self, *a, **k):
        return None

    def system(self, *a, **k):
        return None

    getoutput = system


class TrustedContext:
    """The instructor's notebook run once in the grader; a namespace snapshot before each test cell."""

    def __init__(self, chapter: Chapter):
        self.chapter = chapter
        self.snapshots: dict[str, dict] = {}
        self.problems: list[str] = []
        self.seconds = 0.0
        self.ready = threading.Event()
        self.error: BaseException | None = None

    def build(self) -> None:
        start = time.perf_counter()
        try:
            self._build()
        except BaseException as err:  # noqa: BLE001 - reported to every judge
            self.error = err
        finally:
            self.seconds = time.perf_counter() - start
            self.ready.set()

    def _build(self) -> None:
        import matplotlib

        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt

        from scalelib import exercise

        ns: dict = {"__name__": "__main__", "__builtins__": builtins, "get_ipython": _IPythonStub}
        sink = io.StringIO()
        for kind, src, eid in self.chapter.cells:
            if kind == "test":
                self.snapshots[eid] = dict(ns)
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
                    warnings.simplefilter("ignore")
                    exec(pysource.notebook_code(src, f"<instructor {kind} {eid}>"), ns)  # noqa: S102 - instructor code
            except Exception as err:  # noqa: BLE001
                self.problems.append(f"{kind} cell {eid or ''}: {type(err).__name__}: {err}"[:300])
            plt.close("all")
            sink.seek(0)
            sink.truncate()
        self._exercise_module = exercise

    def namespace_for(self, eid: str, judge: Judge) -> dict:
        ns = dict(self.snapshots[eid])
        ex_copy = types.ModuleType("scalelib.exercise")
        ex_copy.__dict__.update(self._exercise_module.__dict__)
        ex_copy.forbid = recording_forbid
        ex_copy.probe = judge.probe
        for key, value in list(ns.items()):
            if value is self._exercise_module:
                ns[key] = ex_copy
            elif value is self._exercise_module.forbid:
                ns[key] = recording_forbid
            elif value is self._exercise_module.probe:
                ns[key] = judge.probe
        for name in self.chapter.answer_names:
            ns[name] = Remote(judge, name)
        ns["print"] = judge.print
        return ns


@dataclass
class Verdict:
    points: float
    max_points: float
    passed: bool
    message: str = ""
    output: str = ""
    in_kernel: bool = False
    seconds: float = 0.0


class Judge:
    """Judges one student's exercises against their live kernel session."""

    def __init__(self, context: TrustedContext, session: KernelSession, call_timeout_s: float, deadline: float):
        self.context, self.session = context, session
        self.call_timeout_s, self.deadline = call_timeout_s, deadline
        self._out: list[str] = []
        self._out_bytes = 0
        self._probes: dict[str, str] = {}

    def print(self, *args, sep=" ", end="\n", **_):
        text = sep.join(str(a) for a in args) + end
        self._out_bytes += len(text)
        if self._out_bytes < 20_000:
            self._out.append(text)

    def ask(self, code: str):
        timeout = min(self.call_timeout_s, self.deadline - time.monotonic())
        if timeout <= 0:
            raise CallTimeout("the notebook's time limit was reached")
        run = self.session.run(code, timeout=timeout, silent=True, user_expressions={"r": "__grader_out__"})
        if run.timed_out:
            raise CallTimeout(f"the call took longer than {timeout:.0f} s")
        expr = run.expressions.get("r", {})
        if expr.get("status") != "ok":
            raise StudentError(run.error or "the kernel did not answer")
        reply = expr.get("data", {}).get("application/json") if type(expr.get("data")) is dict else None
        if type(reply) is not dict:
            return Opaque("unreadable reply")
        if "err" in reply:
            raise StudentError(str(reply["err"])[:2000])
        return decode(reply.get("ok"))

    def probe(self, fn):
        """``@ex.probe`` in the trusted context: define the helper in the kernel, return its stand-in."""
        source = self._probes.get(getattr(fn, "__name__", ""))
        if source is None:
            raise NotPortable(f"probe {fn!r} is not a top-level def of the test cell")
        name = f"__grader_probe_{fn.__name__}"
        timeout = min(self.call_timeout_s, self.deadline - time.monotonic())
        if timeout <= 0:
            raise CallTimeout("the notebook's time limit was reached")
        run = self.session.run(source.replace(f"def {fn.__name__}(", f"def {name}(", 1), timeout=timeout, silent=True)
        if not run.ok:
            raise StudentError(f"the test's probe could not be defined in your kernel: {run.error}")
        return Remote(self, name)

    def judge(self, eid: str) -> Verdict:
        ex_ = self.context.chapter.exercises[eid]
        start = time.perf_counter()
        self._out, self._out_bytes = [], 0
        self._probes = pysource.decorated_functions(ex_.test_source, "probe")
        ns = self.context.namespace_for(eid, self)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(pysource.notebook_code(ex_.test_source, f"<test {eid}>"), ns)  # noqa: S102 - instructor code
        except NotPortable:
            return self._in_kernel(eid, start)
        except KernelDied:
            raise
        except CallTimeout as err:
            return Verdict(0.0, ex_.points, False, f"TimeoutError: {err}", "".join(self._out), seconds=time.perf_counter() - start)
        except Exception as err:  # noqa: BLE001 - any failure is a failed test
            name = "StudentError" if isinstance(err, StudentError) else type(err).__name__
            msg = f"{name}: {err}" if not isinstance(err, StudentError) else f"your function raised {err}"
            return Verdict(0.0, ex_.points, False, msg[:1500], "".join(self._out), seconds=time.perf_counter() - start)
        return Verdict(ex_.points, ex_.points, True, "", "".join(self._out), seconds=time.perf_counter() - start)

    def _in_kernel(self, eid: str, start: float) -> Verdict:
        ex_ = self.context.chapter.exercises[eid]
        timeout = min(self.call_timeout_s, self.deadline - time.monotonic())
        if timeout <= 0:
            return Verdict(0.0, ex_.points, False, "TimeoutError: the notebook's time limit was reached", in_kernel=True)
        mark = len(self.session.output)
        run = self.session.run(ex_.test_source, timeout=timeout)
        out = "".join(self.session.output[mark:])[-5000:]
        secs = time.perf_counter() - start
        if run.ok:
            return Verdict(ex_.points, ex_.points, True, "", out, in_kernel=True, seconds=secs)
        msg = f"TimeoutError: over {timeout:.0f} s" if run.timed_out else run.error
        return Verdict(0.0, ex_.points, False, msg, out, in_kernel=True, seconds=secs)


__all__ = ["Judge", "Opaque", "TrustedContext", "Verdict", "decode"]
