"""What crosses into a student's kernel as pickles: which classes and functions a pickle refers to, and pickling
that sends scalelib objects outside a surface as plain data.

A scalelib dataclass (a ``Chip``, a ``TransformerConfig``) or named tuple whose class the exercise does not declare
travels as a *record*: its field values under its class name, rebuilt in the kernel by the grader's helper
(:func:`autograder.inkernel.make_record`, :func:`~autograder.inkernel.make_tuple`). The student's code reads the
fields; the class's methods and properties (which may compute an exercise's answer) are not there.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import pickletools
from collections.abc import Callable
from typing import Any

from autograder import inkernel
from autograder.shake import is_lib

_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def pickle_globals(data: bytes) -> set[tuple[str, str]]:
    """(module, qualname) of every class or function a pickle refers to, found without unpickling it."""
    out: set[tuple[str, str]] = set()
    memo: dict[int, object] = {}
    stack: list[object] = []  # only the recent pushes matter: STACK_GLOBAL takes two strings
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        name = op.name
        if name == "GLOBAL" or name == "INST":
            module, qual = str(arg).split(" ", 1)
            out.add((module, qual))
            stack.append(None)
        elif name == "STACK_GLOBAL":
            qual_, module_ = (stack.pop() if stack else None), (stack.pop() if stack else None)
            if not (isinstance(module_, str) and isinstance(qual_, str)):
                raise ValueError("a pickle whose globals cannot be read")
            out.add((module_, qual_))
            stack.append(None)
        elif name in _STRING_OPS:
            stack.append(arg if isinstance(arg, str) else None)
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1] if stack else None
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[int(arg)] = stack[-1] if stack else None  # type: ignore[arg-type]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo.get(int(arg)))  # type: ignore[arg-type]
        else:
            stack.append(None)
        if len(stack) > 64:
            del stack[:-8]
    return out


def library_refs(data: bytes) -> set[tuple[str, str]]:
    """The scalelib classes and functions (and ``__main__`` names) a pickle would need to load."""
    return {(m, q) for m, q in pickle_globals(data) if is_lib(m) or m == "__main__"}


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, allowed: Callable[[str, str], bool]) -> None:
        super().__init__(file, protocol=4)
        self.allowed = allowed

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        module = getattr(cls, "__module__", "") or ""
        if not is_lib(module) or self.allowed(module, cls.__qualname__):
            return NotImplemented
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            return (inkernel.make_record, (cls.__name__, values))
        if isinstance(obj, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
            return (inkernel.make_tuple, (cls.__name__, tuple(cls._fields), tuple(obj)))
        return NotImplemented


def dumps(obj: Any, allowed: Callable[[str, str], bool]) -> bytes:
    """``obj`` pickled for a kernel: scalelib data classes that ``allowed(module, qualname)`` refuses become records."""
    buf = io.BytesIO()
    _Pickler(buf, allowed).dump(obj)
    return buf.getvalue()


def never(module: str, qualname: str) -> bool:
    return False
