"""Judging outside the student's kernel.

The grader process holds a *trusted context* (:mod:`autograder.judging.trusted`): the instructor's notebook executed
once per grading run, in the grader's own interpreter, with a snapshot of its namespace taken just before every test
cell. To judge exercise ``E`` for a student, the instructor's test cell (visible and hidden parts) is executed here,
in a copy of that snapshot, with every function the students write replaced by a :class:`Remote`: calling it sends
the arguments (pickled by the grader) to the student's kernel, which calls the student's function and answers with
plain data (numbers, strings, lists, tuples, dicts, arrays; anything else becomes an unreadable :class:`Opaque`).
Expected values, ``ex.check_close`` and every comparison run here, with the real numpy, scalelib and builtins:
nothing the kernel does to its own numpy, scalelib, builtins or assertion helpers changes a verdict, an object whose
``__eq__`` is always true never leaves the kernel, and the student's copy of a test cell is never run.

The kernel holds only the part of scalelib that ``E`` declares (``ex.allow``; see :mod:`autograder.library.surface`), so
an answer cannot delegate to the rest of the library.
A scalelib data object a test hands the student's function travels with its class's code (properties and methods
work as in the visible checks; see :mod:`autograder.kernel.transfer`), minus the members the exercises of the kernel
withhold (``ex.withhold(...)`` in their hidden tests, read before the kernel starts: :func:`autograder.library.surface.
withheld`). ``ex.withhold`` here records what the test withholds: if the kernel was sent anything of it all the same,
the test cannot be judged. Any other scalelib object or function a test sends is reported as the instructor's
mistake.

Checks that must trace the student's function (it runs inside ``shard_map`` or ``jax.grad``, or the test reads its
jaxpr) put that part in a helper marked ``@ex.probe``. The grader sends the probe's source (instructor code) to the
student's kernel, calls it there with plain arguments and gets plain values back (outputs, program text, counts);
every comparison still runs here. What a probe reports is measured in the student's process, so a student who
rewrites JAX itself could forge its *program text*; they cannot forge values, and no assertion helper of theirs
takes part. A test cell that passes the student's function something that cannot be sent (a traced JAX value, a
lambda) outside a probe cannot be judged: the exercise scores 0 and the verdict says the test must use a probe.
"""

from __future__ import annotations

import base64
import math
import re
import time
import types
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from autograder import pysource
from autograder.judging.judging_errors import CallTimeout, NotPortable, StudentError, SurfaceViolation, TestFault
from autograder.judging.trusted import TrustedContext, thread_output
from autograder.kernel import transfer
from autograder.kernel.kernel_errors import KernelDied
from autograder.kernel.session import KernelSession
from autograder.kernel.transfer import library_refs
from autograder.library.surface import Surface
from autograder.results import NOT_ANSWERED, TEST_FAULT

_UNDEFINED = re.compile(r"NameError: name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")


class Opaque:
    """A value the kernel returned that is not plain data (never equal to anything but itself)."""

    def __init__(self, kind: str, text: str = "") -> None:
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


class Remote:
    """Stands for one of the student's functions in the trusted context."""

    def __init__(self, judge: Judge, name: str) -> None:
        self._judge, self._name = judge, name
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            data = transfer.dumps((_portable(args), _portable(kwargs)), self._judge.surface.allows,
                                  self._judge.shipper)
        except transfer.Unshippable as err:
            raise SurfaceViolation(f"the test sends {self._name} an object whose class cannot travel: {err}") from None
        except Exception as err:
            raise NotPortable(f"{self._name}: {type(err).__name__}: {err}") from None
        self._judge.check_sendable(data, self._name)
        payload = base64.b64encode(data).decode()
        return self._judge.ask(f"__grader_out__ = __grader__.call({self._name!r}, {payload!r})")

    def __repr__(self) -> str:
        return f"<student function {self._name}>"


def _portable(value: Any) -> Any:
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


@dataclass
class Verdict:
    points: float
    max_points: float
    passed: bool
    message: str = ""
    output: str = ""
    seconds: float = 0.0
    instructor_error: bool = False  # the test itself is wrong for grading (not the student's fault)


class Judge:
    """Judges one student's exercises against their live kernel session."""

    def __init__(self, context: TrustedContext, session: KernelSession, surface: Surface, call_timeout_s: float,
                 deadline: float, withheld: frozenset[tuple[str, str]] = frozenset()) -> None:
        self.context, self.session, self.surface = context, session, surface
        self.call_timeout_s, self.deadline = call_timeout_s, deadline
        self.shipper = transfer.Shipper(surface.allows, withheld)  # one kernel: what its exercises withhold
        self._out: list[str] = []
        self._out_bytes = 0
        self._probes: dict[str, str] = {}
        self.answers = 0  # calls into the kernel that answered (a test that fails before any did is at fault)
        self._withholds: set[tuple[str, str]] = set()

    def withhold(self, *members: Any) -> None:
        """``ex.withhold`` while grading: the members of travelling classes that the kernel's exercises withhold were
        left out when their classes were sent; this records what the test withholds, so that :meth:`leaks` can tell
        if any of it reached the kernel all the same."""
        for fn in members:
            fn = fn.fget if isinstance(fn, property) else fn
            self._withholds.add((getattr(fn, "__module__", "") or "", getattr(fn, "__qualname__", "")))

    def leaks(self) -> list[str]:
        """What the test withholds that travelled to the kernel with an object's class all the same."""
        return sorted(f"{m}.{q}" for m, q in self._withholds
                      if (m, q.split(".")[0]) in self.shipper.sent and (m, q) not in self.shipper.withheld)

    def print(self, *args: Any, sep: str = " ", end: str = "\n", **_: Any) -> None:
        self.keep(sep.join(str(a) for a in args) + end)

    def keep(self, text: str) -> None:
        """What the test cell printed (its ``print``, and whatever this thread writes to sys.stdout or sys.stderr
        while it runs, such as ``ex.visible_checks``' line): the verdict's output, shown in the student's feedback,
        never on the grader's console."""
        self._out_bytes += len(text)
        if self._out_bytes < 20_000:
            self._out.append(text)

    def check_sendable(self, data: bytes, to: str) -> None:
        outside = sorted(f"{m}.{q}" for m, q in library_refs(data) if m == "__main__" or not self.surface.allows(m, q))
        if outside:
            raise SurfaceViolation(f"the test sends {to} {', '.join(outside[:3])}, which the exercise does not declare "
                                   f"in ex.allow(...) (it allows {self.surface.describe()})")

    def ask(self, code: str) -> Any:
        timeout = min(self.call_timeout_s, self.deadline - time.monotonic())
        if timeout <= 0:
            raise CallTimeout("the notebook's time limit was reached")
        run = self.session.run(code, timeout=timeout, silent=True, user_expressions={"r": "__grader_out__"})
        if run.timed_out:
            raise CallTimeout(f"the call took longer than {timeout:.0f} s")
        expr = run.expressions.get("r", {})
        if expr.get("status") != "ok":
            raise StudentError(run.error or "the kernel did not answer")
        data = expr.get("data")
        reply = data.get("application/json") if type(data) is dict else None
        if type(reply) is not dict:
            return Opaque("unreadable reply")
        if "err" in reply:
            text = str(reply["err"])[:2000]
            missing = _UNDEFINED.search(text)
            if missing and missing.group(1) in self.context.chapter.answer_names:
                # the probe called a function the student's notebook should define: the student's cell raised (or
                # did not define it), not the test
                raise StudentError(f"{text} (your notebook does not define it: its cell raised, or it has "
                                   "another name)")
            if reply.get("by") in ("test", "grader"):  # the kernel says so; a student who forges it still scores 0
                raise TestFault(text)
            raise StudentError(text)
        self.answers += 1
        return decode(reply.get("ok"))

    def probe(self, fn: Any) -> Remote:
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
            raise TestFault(f"the test's helper {fn.__name__} could not be defined in your kernel: {run.error}")
        return Remote(self, name)

    def namespace_for(self, eid: str) -> dict:
        """The instructor's namespace before ``eid``'s test, with the student's functions as :class:`Remote`s and
        ``scalelib.exercise`` as graded (``probe`` running in the kernel)."""
        ns = self.context.namespace(eid)
        real = self.context.exercise_module
        ex_copy = types.ModuleType("scalelib.exercise")
        if real is not None:
            ex_copy.__dict__.update(real.__dict__)
        ex_copy.withhold = self.withhold  # type: ignore[attr-defined]
        ex_copy.probe = self.probe  # type: ignore[attr-defined]
        for key, value in list(ns.items()):
            if real is not None and value is real:
                ns[key] = ex_copy
            elif real is not None and value is getattr(real, "withhold", None):
                ns[key] = self.withhold
            elif real is not None and value is getattr(real, "probe", None):
                ns[key] = self.probe
        for name in self.context.chapter.answer_names:
            ns[name] = Remote(self, name)
        ns["print"] = self.print
        return ns

    def judge(self, eid: str) -> Verdict:
        ex_ = self.context.chapter.exercises[eid]
        start = time.perf_counter()
        self._out, self._out_bytes, self.answers = [], 0, 0
        self._probes = pysource.decorated_functions(ex_.test_source, "probe")
        self._withholds = set()
        ns = self.namespace_for(eid)

        def verdict(message: str, instructor_error: bool = False) -> Verdict:
            return Verdict(0.0, ex_.points, False, message[:1500], "".join(self._out),
                           seconds=time.perf_counter() - start, instructor_error=instructor_error)

        try:
            with warnings.catch_warnings(), thread_output(self.keep):
                warnings.simplefilter("ignore")
                exec(pysource.notebook_code(ex_.test_source, f"<test {eid}>"), ns)
        except NotPortable as err:
            return verdict(f"this test cannot be judged: it sends something that cannot be sent to your kernel ({err});"
                           " the instructor must put that part of the test in an @ex.probe helper", True)
        except SurfaceViolation as err:
            return verdict(f"this test cannot be judged: {err}", True)
        except (KernelDied, SystemError):
            raise  # the kernel is gone, or the grader's interpreter failed: no verdict on the student
        except CallTimeout as err:
            return verdict(f"TimeoutError: {err}")
        except TestFault as err:
            return verdict(test_fault_message(str(err)), True)
        except StudentError as err:
            return verdict(student_error_message(str(err)))
        except AssertionError as err:
            return verdict(f"{type(err).__name__}: {err}")
        except Exception as err:
            if not self.answers:  # nothing of the student's had answered: the test's own code raised
                where = _test_frame(err, f"<test {eid}>")
                return verdict(test_fault_message(f"the test's code{where} raised {type(err).__name__}: {err}"), True)
            return verdict(f"{type(err).__name__}: {err} (raised by the test while checking what your function "
                           "returned)")
        leaked = self.leaks()
        if leaked:
            return verdict(f"this test cannot be judged: it withholds {', '.join(leaked[:3])}, which reached your "
                           "kernel with an object's class; the instructor must name it in ex.withhold(...) in the test "
                           "cell itself, where the grader reads it", True)
        return Verdict(ex_.points, ex_.points, True, "", "".join(self._out), seconds=time.perf_counter() - start)


def test_fault_message(detail: str) -> str:
    """The verdict when the test's own code failed (see :class:`TestFault`)."""
    return (f"{TEST_FAULT}: {detail}. Your answer was not judged; tell your instructor (this is not a reason to "
            "change your code)")


def student_error_message(detail: str) -> str:
    """The verdict when the student's function raised; a stub that still raises reads as not answered."""
    if detail.startswith("NotImplementedError"):
        return f"{NOT_ANSWERED}: your function still raises its stub ({detail})"
    return f"your function raised {detail}"


def _test_frame(err: BaseException, filename: str) -> str:
    """' (line N)' of the innermost frame of the test cell in ``err``'s traceback, '' if none."""
    line = None
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (line {line} of the test cell)" if line else ""


__all__ = ["NOT_ANSWERED", "TEST_FAULT", "Judge", "Opaque", "StudentError", "TestFault", "TrustedContext", "Verdict",
           "decode", "student_error_message", "test_fault_message"]
