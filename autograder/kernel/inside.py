"""The grader's helper inside a student's kernel.

This module is not imported by the kernel: the grader sends its source text (:func:`program`) as the first cell a
fresh kernel runs, before any student code, and keeps the object :func:`install` returns as ``__grader__``. It
lives here as a real module so that linters, type checkers and tests see it.

Nothing in it is trusted once the student's code has run: the student can rebind every name here. It can only
ever call the student's own functions and encode what they return; every verdict is reached in the grader, and
what the grader accepts back is capped in size and decoded as plain data (see :func:`autograder.judging.judge.decode`).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import io
import pickle
import sys
import types
from pathlib import Path
from typing import Any

MODULE = "autograder.kernel.inside"  # this module's name, in the grader and (as a stand-in) in the kernel
FILENAME = "autograder/kernel/inside.py"  # the file name tracebacks of the helper show in the kernel
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
    except BaseException:
        text = ""
    return {"opaque": t.__name__, "repr": text}


class NotAvailable(LookupError):
    """A part of scalelib (or a value made with it) that the exercise being graded does not allow."""


class Poison:
    """Stands for a name the kernel may not have while this exercise is graded; any use raises NotAvailable."""

    def __init__(self, message: str) -> None:
        object.__setattr__(self, "_message", message)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise NotAvailable(object.__getattribute__(self, "_message"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)  # numpy, pickle and IPython probe such names; they must fail quietly
        raise NotAvailable(object.__getattribute__(self, "_message"))

    __call__ = __getitem__ = __iter__ = __len__ = __float__ = __int__ = __index__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _refuse
    __setattr__ = __setitem__ = __bool__ = __array__ = _refuse

    def __repr__(self) -> str:
        return f"<not available: {object.__getattribute__(self, '_message')}>"


class Record:
    """A scalelib object that travelled as data (see ``autograder.kernel.transfer``): its fields, none of its
    methods."""

    __slots__ = ("_fields", "_kind")

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_fields", dict(fields))

    def __getattr__(self, name: str) -> Any:
        fields = object.__getattribute__(self, "_fields")
        if name in fields:
            return fields[name]
        if name.startswith("_"):
            raise AttributeError(name)
        kind = object.__getattribute__(self, "_kind")
        raise NotAvailable(f"{kind}.{name} is not available while this exercise is graded: this {kind} carries its "
                           f"fields only ({', '.join(fields)})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: the object is frozen")

    def __eq__(self, other: object) -> bool:
        return type(other) is Record and (self._kind, self._fields) == (other._kind, other._fields)

    def __hash__(self) -> int:
        return hash((self._kind, tuple(self._fields.items())))

    def __repr__(self) -> str:
        return f"{self._kind}({', '.join(f'{k}={v!r}' for k, v in self._fields.items())})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (make_record, (self._kind, self._fields))


def make_record(kind: str, fields: dict[str, Any]) -> Record:
    return Record(kind, fields)


_CLASSES: dict[tuple[str, str, str], type] = {}


def _withheld(what: str) -> NotAvailable:
    return NotAvailable(f"{what} is not available while this exercise is graded: it is what the exercise asks you to "
                        "compute (its test disables it, as it does in the notebook's hidden checks)")


def make_object(module: str, name: str, source: str, values: Any) -> Any:
    """A scalelib object that travelled with its class (see ``autograder.kernel.transfer.Shipper``): the class is
    defined here from the grader's source (once per kernel), the object gets the field values without running any of
    it."""
    key = (module, name, source)
    cls = _CLASSES.get(key)
    if cls is None:
        home = types.ModuleType(module)
        home.__dict__["__withheld__"] = _withheld
        absent = sys.modules.get(module) is None
        if absent:  # dataclasses reads the module of a class it decorates; only while the class is made
            sys.modules[module] = home
        try:
            exec(compile(source, f"<{module}, as sent by the grader>", "exec"), home.__dict__)
        finally:
            if absent:
                sys.modules.pop(module, None)
        cls = _CLASSES[key] = home.__dict__[name]
    if isinstance(values, tuple):
        return cls(*values)
    obj = object.__new__(cls)
    for field, value in values.items():
        object.__setattr__(obj, field, value)
    return obj


_TUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def make_tuple(kind: str, fields: tuple[str, ...], values: tuple[Any, ...]) -> tuple:
    """A named tuple with the same fields (a JAX pytree like the original), without the original's methods."""
    import collections

    cls = _TUPLES.get((kind, fields))
    if cls is None:
        cls = _TUPLES[(kind, fields)] = collections.namedtuple(kind, fields)
    return cls(*values)


class LazyModule(types.ModuleType):
    """A module bound by a demo cell, imported the first time it is used (most answers never touch most of them)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_target"] = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__dict__["_lazy_target"]), attr)

    def __repr__(self) -> str:
        return f"<module {self.__dict__['_lazy_target']!r} (imported on first use)>"


class _Unavailable:
    """Last on sys.meta_path: an import of a part of scalelib the kernel does not hold says why."""

    def __init__(self, allowed: str) -> None:
        self.allowed = allowed

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.startswith("scalelib."):
            raise ModuleNotFoundError(f"{name} is not available while this exercise is graded; it may use "
                                      f"{self.allowed}", name=name)


PROBE_PREFIX = "__grader_probe_"


def _text(err: BaseException) -> str:
    return (type(err).__name__ + ": " + str(err))[:2000]


def _library_dirs() -> tuple[str, ...]:
    import os

    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    lib = sys.modules.get("scalelib")
    if lib is not None and getattr(lib, "__file__", None):
        dirs.add(os.path.dirname(str(lib.__file__)))
    return tuple(d.rstrip("/") + "/" for d in dirs | {os.path.realpath(d) for d in dirs})


def culprit(err: BaseException, probe_file: str) -> str:
    """Whose code raised ``err`` in a probe's call: "test" when the innermost frame that is the probe's (code from
    ``probe_file``, the cell the grader defined it in) or the student's (not a library's, nor this helper's) is the
    probe's, else "student"."""
    lib = _library_dirs()
    frames = []
    tb = err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    for filename in reversed(frames):
        if filename == probe_file:
            return "test"
        if filename.startswith(lib) or filename.startswith("<frozen ") or filename.endswith(FILENAME):
            continue
        return "student"
    return "test"  # raised before the probe's first line ran (its arguments did not fit it)


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
        except BaseException as err:
            return Reply({"err": _text(err)})

    def call(self, name: str, payload: str) -> Reply:
        """Call the student's ``name`` (or a probe of the test's, ``__grader_probe_*``) with the grader's pickled
        ``(args, kwargs)``; printing is swallowed. A failure says whose it is (``by``): the student's, or the test's
        (a probe that raised outside the student's code, arguments this kernel cannot recreate)."""
        probe = name.startswith(PROBE_PREFIX)
        try:
            args, kwargs = pickle.loads(base64.b64decode(payload))  # the grader's own bytes
        except BaseException as err:
            return Reply({"err": f"the test's arguments could not be recreated in your kernel ({_text(err)})",
                          "by": "grader"})
        fn = self.shell.user_ns.get(name)
        if fn is None:
            if probe:
                return Reply({"err": f"the test's helper {name[len(PROBE_PREFIX):]} is not defined", "by": "test"})
            return Reply({"err": f"NameError: {name} is not defined in your notebook", "by": "student"})
        try:
            with contextlib.redirect_stdout(_Sink()):
                value = fn(*args, **kwargs)
        except BaseException as err:
            if probe and culprit(err, getattr(getattr(fn, "__code__", None), "co_filename", "")) == "test":
                return Reply({"err": f"the test's helper {name[len(PROBE_PREFIX):]} raised {_text(err)}",
                              "by": "test"})
            return Reply({"err": _text(err), "by": "student"})
        try:
            return Reply({"ok": encode(value, _Budget(self.max_reply_bytes))})
        except BaseException as err:
            return Reply({"err": f"{_text(err)} (what your function returned could not be sent)", "by": "student"})

    def bind(self, path: str) -> Reply:
        """Bind what the instructor's set-up and demo cells bound, as the grader wrote it to ``path`` in the
        kernel's scratch folder (see trusted.py; a file, not the cell's text: set-up arrays can be large)."""
        with open(path, "rb") as f:
            payload = f.read()
        ns = self.shell.user_ns
        unreadable = []
        for kind, name, data in pickle.loads(payload):  # the grader's own bytes
            if kind == "delete":
                ns.pop(name, None)
            elif kind == "module":
                ns[name] = LazyModule(data)
            elif kind == "poison":
                ns[name] = Poison(data)
            else:
                try:
                    ns[name] = pickle.loads(data)
                except Exception as err:
                    ns[name] = Poison(f"{name} could not be recreated in this kernel ({type(err).__name__}: {err})")
                    unreadable.append(name)
        return Reply({"ok": unreadable})

    def value(self, name: str) -> Reply:
        return self._reply(lambda: self.shell.user_ns[name])


def install(shell: Any, max_reply_bytes: int, allowed: str = "") -> Helper:
    """Set the kernel up for grading and return the helper. ``allowed`` says what of scalelib the kernel holds."""
    sys.meta_path.append(_Unavailable(allowed or "nothing of scalelib"))
    # Records and shipped objects are pickled by the grader as autograder.kernel.inside.make_record / make_object:
    # resolve them here (the packages above it are empty stand-ins: nothing else of the grader is in the kernel).
    here = types.ModuleType(MODULE)
    here.__dict__.update({k: v for k, v in globals().items() if not k.startswith("__")})
    parts = MODULE.split(".")
    for n in range(1, len(parts)):
        sys.modules.setdefault(".".join(parts[:n]), types.ModuleType(".".join(parts[:n])))
    sys.modules[MODULE] = here
    # Grading keeps text only: figures are drawn on no screen and never rendered to PNG; `%matplotlib inline`
    # in a cell would switch rendering back on.
    shell.register_magic_function(lambda line="": None, "line", "matplotlib")
    return Helper(shell, max_reply_bytes)


def program(max_reply_bytes: int, allowed: str = "") -> str:
    """The cell that installs the helper in a fresh kernel as ``__grader__`` (this module's source, run there)."""
    source = Path(__file__).read_text(encoding="utf-8")
    return (f"__grader_ns = {{'__name__': {MODULE!r}}}\n"
            f"exec(compile({source!r}, {FILENAME!r}, 'exec'), __grader_ns)\n"
            f"__grader__ = __grader_ns['install'](get_ipython(), {int(max_reply_bytes)}, {allowed!r})\n"
            "del __grader_ns\n")


__all__ = ["PROBE_PREFIX", "Helper", "LazyModule", "NotAvailable", "Poison", "Record", "Reply", "culprit", "encode",
           "install", "make_object", "make_record", "make_tuple", "program"]
