"""Checks used by the notebooks' exercise tests.

Every exercise test converts the student's answer to plain Python values before comparing, so an
object that claims to equal everything (a custom ``__eq__``) fails, and its hidden part calls the
student's function with inputs the student has not seen, in a kernel that holds only the part of scalelib
the test declares (``allow``), so merely calling the function it is checked against is not an answer.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import sys
import types
from typing import Any, Callable, Iterator, cast

import numpy as np

_NUMBER_TYPES = (int, float)


class ExerciseError(AssertionError):
    """A check failed; the message says which value was wrong and what was expected.

    In IPython (Jupyter, Colab) the failure shows as one line, the message, rather than a traceback into this
    module, which says nothing the message does not; ``%tb`` in the next cell shows the whole traceback. Outside
    IPython (the grader, pytest) it is an ``AssertionError`` like any other: its type, message and traceback are
    untouched.
    """

    def _render_traceback_(self) -> list[str]:
        """What IPython prints for this error: one line while the error is the one being handled (the cell that
        raised it), the full traceback when asked again later (``%tb``, which re-shows the last error)."""
        import sys

        if sys.exc_info()[1] is self:
            return [f"\x1b[1;31m{type(self).__name__}\x1b[0m: {self}   (run %tb in a new cell for the full traceback)"]
        return _full_traceback(self)


def _full_traceback(err: BaseException) -> list[str]:
    """``err``'s traceback as IPython formats any other error's (colours, context lines), or Python's plain form
    where IPython is not running or cannot format it."""
    import traceback

    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            return list(shell.InteractiveTB.structured_traceback(type(err), err, err.__traceback__))
    except Exception:  # an IPython whose formatter differs: the plain form still says everything
        pass
    return "".join(traceback.format_exception(type(err), err, err.__traceback__)).splitlines()


def plain_number(value: object, name: str = "answer") -> float:
    """``value`` as a Python float, accepting only real numbers (not bool, not look-alikes)."""
    if type(value) in _NUMBER_TYPES:
        out = float(cast(float, value))
    elif (isinstance(value, np.generic) and type(value).__module__ == "numpy"
          and np.issubdtype(value.dtype, np.number)) \
            or (type(value) is np.ndarray and value.shape == () and np.issubdtype(value.dtype, np.number)):
        out = float(value.item())
    elif type(value).__module__.startswith("jax") and getattr(value, "shape", None) == ():
        out = float(np.asarray(value).item())
    else:
        raise ExerciseError(
            f"{name} must be a number (int or float), got a {type(value).__name__}: {shown(value)}"
        )
    if not math.isfinite(out):
        raise ExerciseError(f"{name} must be finite, got {out}")
    return out


def plain_array(value: object, name: str = "answer") -> np.ndarray:
    """``value`` as a float64 numpy array, accepting only numpy/JAX arrays and nested lists of numbers."""
    module = type(value).__module__
    if not (type(value) in (np.ndarray, list, tuple) or module.startswith("jax")):
        raise ExerciseError(f"{name} must be an array, got a {type(value).__name__}")
    try:
        out = np.array(np.asarray(value), dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ExerciseError(f"{name} could not be read as an array of numbers: {err}") from None
    return out


def _short(x: float) -> str:
    """A tolerance as written in the test: 1e-09 -> 1e-9, 0.5 -> 0.5."""
    text = f"{x:g}"
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}" if e else text


def tolerance_text(rtol: float, atol: float = 0.0) -> str:
    """How close a check requires, as it is: "relative 1e-9", "relative 1e-9, absolute 0.5", "exactly"."""
    parts = [f"relative {_short(rtol)}"] if rtol else []
    parts += [f"absolute {_short(atol)}"] if atol else []
    return ", ".join(parts) or "exactly"


def distinct(got: float, want: float) -> tuple[str, str]:
    """``got`` and ``want`` with enough significant digits (6 or more) that their difference shows: 136034.2 and
    136034.7, not 136034 and 136034 (or 136035)."""
    digits = 6
    gap, size = abs(got - want), max(abs(got), abs(want))
    if gap and math.isfinite(gap) and size:
        digits = min(17, max(6, math.ceil(math.log10(size / gap)) + 2))
    return f"{got:.{digits}g}", f"{want:.{digits}g}"


def check_close(got: object, want: float, rtol: float, name: str = "answer") -> None:
    """Fail unless ``got`` is a plain number within ``rtol`` (relative) of ``want``."""
    value = plain_number(got, name)
    if not math.isclose(value, float(want), rel_tol=rtol, abs_tol=0.0):
        shown, expected = distinct(value, float(want))
        raise ExerciseError(f"{name} = {shown}, expected {expected} (tolerance: {tolerance_text(rtol)})")


def check_array_close(got: object, want: object, rtol: float, atol: float, name: str = "answer") -> None:
    """Fail unless ``got`` is an array of the same shape as ``want`` and close to it elementwise."""
    value, target = plain_array(got, name), np.asarray(want, dtype=np.float64)
    if value.shape != target.shape:
        raise ExerciseError(f"{name} has shape {value.shape}, expected {target.shape}")
    bad = ~np.isclose(value, target, rtol=rtol, atol=atol)
    if bad.any():
        worst = int(np.argmax(np.where(bad, np.abs(value - target), -1.0)))
        shown, expected = distinct(float(value.flat[worst]), float(target.flat[worst]))
        where = tuple(int(i) for i in np.unravel_index(worst, value.shape)) if value.ndim > 1 else worst
        raise ExerciseError(
            f"{name}: {int(bad.sum())} of {value.size} entries differ; e.g. element {where} is "
            f"{shown}, expected {expected} (tolerance: {tolerance_text(rtol, atol)})"
        )


# ---------------------------------------------------------------- the answer rule
# One rule for every exercise, used by its visible checks and its hidden checks alike, so that an answer that passes
# in the notebook is never refused for its container when graded, nor the reverse:
#   * several values returned together ("a pair of seconds", "(steps, comms_s)") may come as a tuple, a list, or a
#     1-D NumPy or JAX array of that length: :func:`unpack`;
#   * a list of any length ("one row per tick") may be a list or a tuple (or a 1-D array): :func:`sequence`;
#   * each number in them may be a Python int or float, a NumPy scalar or a 0-d array: :func:`plain_number`;
#   * a yes/no may be a Python bool, a NumPy bool or a 0-d boolean array, never a number: :func:`plain_bool`.
# A test that truly needs another type (a dict with named entries, a string) says so in its visible check first.


def _is_array(value: object) -> bool:
    """Whether ``value`` is a NumPy array or a JAX one (not a subclass or a look-alike of another module)."""
    return type(value) is np.ndarray or type(value).__module__.startswith("jax")


def _is_vector(value: object) -> bool:
    """Whether ``value`` is a 1-D NumPy or JAX array."""
    return _is_array(value) and getattr(value, "ndim", None) == 1


def unpack(got: object, n: int, what: str) -> tuple:
    """``got`` as a tuple of its ``n`` values: a tuple, a list or a 1-D array of length ``n`` (see the rule above)."""
    if _is_vector(got):
        got = tuple(np.asarray(got))
    if type(got) not in (tuple, list) or len(got) != n:  # type: ignore[arg-type]
        kind = f"{len(got)} values" if type(got) in (tuple, list) else f"a {type(got).__name__}"  # type: ignore[arg-type]
        raise ExerciseError(f"{what} must return {n} values (a tuple, a list or a 1-D array of {n}), got {kind}: "
                            f"{shown(got)}")
    return tuple(got)  # type: ignore[arg-type]


def sequence(got: object, what: str) -> list:
    """``got`` as a list: a list, a tuple or a 1-D array of any length (see the rule above)."""
    if _is_vector(got):
        return list(np.asarray(got))
    if type(got) not in (tuple, list):
        raise ExerciseError(f"{what} must be a list (or a tuple), got a {type(got).__name__}: {shown(got)}")
    return list(got)  # type: ignore[call-overload]


def plain_bool(value: object, name: str = "answer") -> bool:
    """``value`` as a Python bool: a bool, a NumPy bool or a 0-d boolean array; a number (0, 1) is refused."""
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_) or (_is_array(value) and getattr(value, "shape", None) == ()
                                       and np.asarray(value).dtype == np.bool_):
        return bool(np.asarray(value).item())
    raise ExerciseError(f"{name} must be True or False, got a {type(value).__name__}: {shown(value)}")


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` for a message: whole, or cut at ``limit`` characters with a note of how much was left out, so
    that a message never ends mid-number without saying so."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def check_equal(got: Any, want: Any, what: str) -> None:
    """Fail unless ``got == want`` (for exact answers: strings, tuples of ints)."""
    if got != want:
        raise ExerciseError(f"{what} = {shown(got)}, expected {shown(want)}")


# ---------------------------------------------------------------- unanswered exercises

STRICT_ENV = "SCALELIB_STRICT_CHECKS"
_STUB = re.compile(r"^(ch\d\d-[A-Za-z0-9-]+): not answered yet")


def stub_message(exercise_id: str) -> str:
    """What an exercise's stub raises until the student writes the answer (``NotImplementedError``)."""
    return f"{exercise_id}: not answered yet (replace this line with your code)"


def strict() -> bool:
    """True where an unanswered exercise must fail its checks: grading and CI (``SCALELIB_STRICT_CHECKS=1``)."""
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def passed_message(exercise_id: str, detail: str = "") -> str:
    """What a test cell prints once its visible checks pass (``detail``: what they showed, if worth saying)."""
    return f"{exercise_id}: visible checks passed" + (f" ({detail})" if detail else "")


@contextlib.contextmanager
def visible_checks(exercise_id: str, detail: str = "", answers: tuple[Callable, ...] = ()) -> Iterator[None]:
    """The visible checks of ``exercise_id``: says when they pass; an exercise not answered yet is reported, not raised.

    A chapter's test cells wrap their visible checks in this block. When the block ends without an error it
    prints ``passed_message(exercise_id, detail)``. While an exercise still holds its stub (which raises
    ``NotImplementedError(stub_message(id))``), the block prints that the exercise is not answered and lets the
    notebook go on, so "Run all" reaches the end of the chapter and draws every plot. A wrong answer still
    fails here, and so does every other error. Grading and CI set ``SCALELIB_STRICT_CHECKS=1``, which makes an
    unanswered exercise fail like a wrong one; the hidden checks are never wrapped, so an unanswered exercise
    scores 0 under nbgrader too.

    The block runs under the test cell's :func:`withhold` declarations (written above it): while it runs, code of
    the cells that define ``answers`` (the student's functions the exercise asks for) that reads a withheld member
    fails here with a message, as it would when graded; the test's own code, the chapter's other cells and the
    library keep the member.
    """
    test_file = _cell_file()
    members = _declared.pop(test_file, [])
    _declared.clear()  # what another cell declared is not this block's
    if members and not answers:
        raise TypeError(f"{exercise_id}: a test that withholds members names the answer's functions: "
                        f"visible_checks({exercise_id!r}, answers=(...))")
    answer_files = {getattr(getattr(fn, "__code__", None), "co_filename", None) for fn in answers} - {None, test_file}
    try:
        with _withheld(members, test_file, frozenset(answer_files)):  # type: ignore[arg-type]
            yield
    except NotImplementedError as err:
        match = _STUB.match(str(err))
        if match is None or strict():
            raise
        needed = match.group(1)
        if needed == exercise_id:
            print(f"{exercise_id}: not answered yet. Write your answer in the cell above and run this cell again.")
        else:
            print(f"{exercise_id}: not checked yet: it uses your answer to {needed}, which is not answered yet.")
    else:
        print(passed_message(exercise_id, detail))


def allow(*parts: object) -> None:
    """Declare, in an exercise's test cell, what of scalelib its answer may use while it is graded.

    ``ex.allow(compat, rc.on_mesh)``: whole modules, or top-level functions and classes of a module. In a notebook
    this only checks that each part belongs to scalelib. The autograder reads the declaration and starts the
    student's kernel with that part of the library and nothing else (the rest is not in its file system), so an
    answer cannot hand its work to another scalelib function. Without a declaration, no part of scalelib is
    there; scalelib data objects a test passes to the student's function arrive with their class (properties and
    methods work, except those the test withholds with :func:`withhold`).
    """
    for part in parts:
        if isinstance(part, types.ModuleType):
            ok = part.__name__ == "scalelib" or part.__name__.startswith("scalelib.")
        else:
            ok = callable(part)  # a function or class of a scalelib module (compat.shard_map is jax's own)
        if not ok:
            raise TypeError(f"allow() takes scalelib modules and their functions and classes, got {shown(part)}")


def withhold(*members: object) -> None:
    """Declare, in an exercise's test cell, the members of scalelib classes that compute what the exercise asks for.

    ``ex.withhold(hw.Chip.pod_hosts, hw.Chip.pod_flops_per_s)``: methods or properties (given as ``Class.member``),
    written above the cell's ``visible_checks`` block. An object the test hands the student's function keeps its
    other properties and methods, but not these: the answer must compute them. When graded, the autograder reads
    the declaration before the kernel starts and sends the objects' classes without the members; in the notebook,
    the cell's :func:`visible_checks` block makes an answer that reads one fail the same way, so that a student
    learns it before submitting.
    """
    for member in members:
        fn = member.fget if isinstance(member, property) else member
        qualname = getattr(fn, "__qualname__", "")
        module = getattr(fn, "__module__", "") or ""
        if not (isinstance(fn, types.FunctionType) and "." in qualname
                and (module == "scalelib" or module.startswith("scalelib."))):
            raise TypeError(f"withhold() takes methods and properties of scalelib classes (Class.member), "
                            f"got {shown(member)}")
    _declared.setdefault(_cell_file(), []).extend(members)


# ---------------------------------------------------------------- withheld members in the notebook

_declared: dict[str, list[object]] = {}  # the cell (its code's file name) -> the members it withholds


def _cell_file() -> str:
    """The file name of the code that called into this module (a notebook cell's, in Jupyter)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back  # type: ignore[assignment]
    return frame.f_code.co_filename if frame is not None else ""


def _asked_by_answer(test_file: str, answer_files: frozenset[str]) -> bool:
    """Whether the code reading a withheld member runs for the student's answer: between it and the test cell's
    code, some frame is code of a cell that defines the answer (the answer itself, or a helper of its cell)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name == test_file:
            return False
        if name in answer_files:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _Withheld:
    """A class member, withheld from the student's answer while a visible-checks block runs."""

    def __init__(self, original: Any, owner: str, name: str, test_file: str, answer_files: frozenset[str]) -> None:
        self.original, self.owner, self.name = original, owner, name
        self.test_file, self.answer_files = test_file, answer_files

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is not None and _asked_by_answer(self.test_file, self.answer_files):
            raise ExerciseError(
                f"{self.owner}.{self.name} is what this exercise asks you to compute, so your answer may not read "
                f"it: when graded, the objects your function is handed have no {self.name!r}. Compute it from "
                f"their other attributes.")
        return self.original.__get__(obj, objtype)


@contextlib.contextmanager
def _withheld(members: list[object], test_file: str, answer_files: frozenset[str]) -> Iterator[None]:
    """While the block runs, each of ``members`` raises when the answer reads it (see :class:`_Withheld`)."""
    saved = []
    try:
        for member in members:
            fn: Any = member.fget if isinstance(member, property) else member
            owner_name, _, name = fn.__qualname__.rpartition(".")
            owner: Any = sys.modules[fn.__module__]
            for part in owner_name.split("."):
                owner = getattr(owner, part)
            original = owner.__dict__[name]
            saved.append((owner, name, original))
            setattr(owner, name, _Withheld(original, owner_name, name, test_file, answer_files))
        yield
    finally:
        for owner, name, original in reversed(saved):
            setattr(owner, name, original)


def probe(fn: Callable) -> Callable:
    """Mark a test-cell helper that must run next to the student's code; returns ``fn`` unchanged.

    Some checks trace the student's function (it runs inside ``shard_map`` or ``jax.grad``, or the test
    reads its jaxpr), so the function cannot be called from outside with plain inputs. Such a test
    puts that part in a helper decorated with ``@ex.probe``: self-contained (only its arguments and the
    notebook's set-up names), taking plain values (numbers, strings, tuples, numpy arrays, partition
    specs) and returning plain values (a dict of numbers, strings, lists, numpy arrays), and does every
    comparison outside it. In a notebook the decorator does nothing; the autograder runs the probe in
    the student's kernel, gets back only plain data, and judges that data in its own process.
    """
    return fn


def rng(seed: int) -> random.Random:
    """A seeded random source for hidden-test inputs (same inputs on every grading run)."""
    return random.Random(seed)


def log_uniform(r: random.Random, low: float, high: float) -> float:
    """A value spread evenly in log space between ``low`` and ``high``."""
    return math.exp(r.uniform(math.log(low), math.log(high)))
