"""The grader's helper inside a student's kernel.

This module is not imported by the kernel: the grader sends its source text (:func:`program`) as the first cell a
fresh kernel runs, before any student code, and keeps the object :func:`install` returns as ``__grader__``. It
lives here as a real module so that linters, type checkers and tests see it.

Nothing in it is trusted once the student's code has run: the student can rebind every name here. It can only
ever call the student's own functions and encode what they return; every verdict is reached in the grader, and
what the grader accepts back is capped in size and decoded as plain data (see :func:`autograder.judge.decode`).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import io
import pickle
from pathlib import Path
from typing import Any

MAX_DEPTH = 40
ARRAY_DTYPES = {"b": "|b1", "i": "<i8", "u": "<i8", "f": "<f8"}  # array kinds that travel, and as what


class TooLarge(ValueError):
    pass


class Reply:
    """The value of the grader's user expression. IPython sends ``_repr_json_`` as ``application/json``: the grader
    reads a JSON object, with no ``repr`` to parse."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def _repr_json_(self) -> dict[str, Any]:
        return self.data

    def __repr__(self) -> str:
        return ""


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TooLarge("the value is too large to send to the grader")


def encode(value: Any, budget: _Budget, depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data: None, bool, int, float, str, lists, and tagged tuples, dicts and arrays.

    Anything else becomes ``{"opaque": type name, "repr": ...}``, which the grader never treats as equal to anything.
    """
    import numpy as np

    t = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply")
    budget.take(16)
    if value is None or t in (bool, int, float):
        return value
    if t is str:
        budget.take(len(value))
        return value
    if t is tuple:
        return {"tuple": [encode(x, budget, depth + 1) for x in value]}
    if t is list:
        return [encode(x, budget, depth + 1) for x in value]
    if t is dict:
        return {"dict": [[encode(k, budget, depth + 1), encode(x, budget, depth + 1)] for k, x in value.items()]}
    if isinstance(value, np.generic) and t.__module__ == "numpy" and value.dtype.kind in ARRAY_DTYPES:
        return encode(value.item(), budget, depth + 1)
    if t is np.ndarray or (t.__module__.startswith("jax") and hasattr(value, "shape")):
        a = np.asarray(value)
        if a.dtype.kind in ARRAY_DTYPES:
            raw = np.ascontiguousarray(a, dtype=ARRAY_DTYPES[a.dtype.kind]).tobytes()
            budget.take(len(raw) * 4 // 3)
            return {"array": base64.b64encode(raw).decode(), "dtype": ARRAY_DTYPES[a.dtype.kind],
                    "shape": [int(n) for n in a.shape]}
    try:
        text = repr(value)[:200]
    except BaseException:  # noqa: BLE001 - a hostile __repr__
        text = ""
    return {"opaque": t.__name__, "repr": text}


def resolve(module: str, qualname: str) -> Any:
    """The function object behind ``module.qualname`` (a method, classmethod, staticmethod or property too)."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = obj.__dict__[part] if isinstance(obj, type) else getattr(obj, part)
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    return obj.fget if isinstance(obj, property) else obj


class _Sink(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)


class Helper:
    """Calls the student's functions for the grader; bound to ``__grader__`` in the kernel."""

    def __init__(self, shell: Any, max_reply_bytes: int) -> None:
        self.shell = shell
        self.max_reply_bytes = max_reply_bytes

    def _reply(self, produce: Any) -> Reply:
        try:
            return Reply({"ok": encode(produce(), _Budget(self.max_reply_bytes))})
        except BaseException as err:  # noqa: BLE001 - the student's error, reported as theirs
            return Reply({"err": (type(err).__name__ + ": " + str(err))[:2000]})

    def call(self, name: str, payload: str, forbidden: tuple[tuple[str, str], ...] = ()) -> Reply:
        """Call the student's ``name`` with the grader's pickled ``(args, kwargs)``; printing is swallowed."""

        def run() -> Any:
            fn = self.shell.user_ns[name]
            args, kwargs = pickle.loads(base64.b64decode(payload))  # the grader's own bytes
            off: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if forbidden:
                from scalelib import exercise

                off = exercise.forbid(*[resolve(m, q) for m, q in forbidden])
            with contextlib.redirect_stdout(_Sink()), off:
                return fn(*args, **kwargs)

        return self._reply(run)

    def value(self, name: str) -> Reply:
        return self._reply(lambda: self.shell.user_ns[name])


def install(shell: Any, max_reply_bytes: int) -> Helper:
    """Set the kernel up for grading and return the helper."""
    # Grading keeps text only: figures are drawn on no screen and never rendered to PNG; `%matplotlib inline`
    # in a cell would switch rendering back on.
    shell.register_magic_function(lambda line="": None, "line", "matplotlib")
    return Helper(shell, max_reply_bytes)


def program(max_reply_bytes: int) -> str:
    """The cell that installs the helper in a fresh kernel as ``__grader__`` (this module's source, run there)."""
    source = Path(__file__).read_text(encoding="utf-8")
    return (f"__grader_ns = {{'__name__': 'autograder_inkernel'}}\n"
            f"exec(compile({source!r}, 'autograder/inkernel.py', 'exec'), __grader_ns)\n"
            f"__grader__ = __grader_ns['install'](get_ipython(), {int(max_reply_bytes)})\n"
            "del __grader_ns\n")


__all__ = ["Helper", "Reply", "encode", "install", "program"]
