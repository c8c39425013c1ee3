"""What crosses into a student's kernel as pickles: which classes and functions a pickle refers to, and pickling
that sends scalelib objects outside a surface without the rest of the library.

A scalelib dataclass (a ``Chip``, an ``OpRun``) or named tuple that a test hands a student's function, whose class
the exercise does not declare, travels *with its class* (:class:`Shipper`): the object's field values and the source
of its class, reduced to that class and what its methods need in its own module
(:func:`autograder.library.module_reader.shake`), rebuilt in the kernel by the grader's helper
(:func:`autograder.kernel.inside.make_object`). So whatever the student could use on the object in a visible check (a
property such as ``OpRun.end_s``, a method such as ``Chip.flops_per_s``) works when graded too. Two things keep that
from handing an answer to the library:

* the members the exercises of the kernel's group withhold (``ex.withhold(Chip.pod_hosts)`` in a hidden test: what
  the exercise asks the student to compute) travel as stubs that raise ``NotAvailable``;
* a class whose methods need scalelib beyond its own module and the exercise's surface does not travel: the test
  cannot be judged, and the instructor is told to declare what it needs (``ex.allow``).

Values bound by the instructor's set-up and demo cells travel the same way (:mod:`autograder.judging.trusted`), except
that an object whose class cannot travel becomes a *record* there: its field values under its class name
(:func:`autograder.kernel.inside.make_record`, :func:`~autograder.kernel.inside.make_tuple`), none of its methods.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import pickle
import pickletools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autograder.kernel import inside
from autograder.library.module_reader import is_lib, kept_names, shake

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


class Unshippable(ValueError):
    """A scalelib class whose code cannot go to a kernel with this surface (the message says what to declare)."""


@dataclass(frozen=True)
class ClassCode:
    module: str
    name: str
    source: str  # the module reduced to the class and what it needs, withheld members stubbed
    names: frozenset[str]  # the module's top-level names the source defines


class Shipper:
    """Which scalelib classes travel with their code, and that code (once per class), for one kernel.

    ``allowed(module, qualname)``: the kernel's surface (what it holds already). ``withheld``: ``(module, qualname)``
    of functions, methods and property getters that must not reach the kernel (what its exercises withhold); they
    travel as stubs that raise ``NotAvailable``. ``sent`` gathers ``(module, name)`` of every top-level name whose
    code was shipped, so a judge can tell whether something a test withholds reached the kernel. ``lenient``: an
    object whose class cannot travel becomes a record instead of raising :class:`Unshippable`.
    """

    def __init__(self, allowed: Callable[[str, str], bool], withheld: frozenset[tuple[str, str]] = frozenset(),
                 lenient: bool = False) -> None:
        self.allowed, self.withheld, self.lenient = allowed, withheld, lenient
        self.sent: set[tuple[str, str]] = set()
        self._code: dict[type, ClassCode] = {}

    def code(self, cls: type) -> ClassCode:
        found = self._code.get(cls)
        if found is None:
            found = self._code[cls] = class_code(cls, self.withheld, self.allowed)
        self.sent |= {(found.module, n) for n in found.names}
        return found


def class_code(cls: type, withheld: frozenset[tuple[str, str]], allowed: Callable[[str, str], bool]) -> ClassCode:
    """The source that defines ``cls`` in a kernel: its module reduced to it (and what its methods need there), with
    every member in ``withheld`` replaced by a stub that raises."""
    module, name = cls.__module__, cls.__qualname__
    if "." in name or "<" in name:
        raise Unshippable(f"{module}.{name} is not a top-level class of its module")
    try:
        kept, external = shake(module, {name})
    except ValueError as err:
        raise Unshippable(f"{module}.{name}: {err}") from None
    missing = sorted(str(e) for e in external if not allowed(e.module, e.name or ""))
    if missing:
        raise Unshippable(f"{module}.{name} needs {', '.join(missing[:3])} for its methods, which the exercise does "
                          "not declare; name them in ex.allow(...)")
    body = [_stub_withheld(node, module, withheld) for node in kept]
    source = "\n\n".join(ast.unparse(n) for n in body) + "\n"
    return ClassCode(module, name, source, kept_names(module, {name}))


def _stub(node: ast.FunctionDef | ast.AsyncFunctionDef, what: str) -> ast.stmt:
    """``node`` with a body that raises ``NotAvailable`` (its decorators kept: a property stays a property)."""
    stub = copy.deepcopy(node)
    call = ast.Call(func=ast.Name(id="__withheld__", ctx=ast.Load()), args=[ast.Constant(what)], keywords=[])
    stub.body = [ast.Raise(exc=call, cause=None)]
    return ast.fix_missing_locations(stub)


def _stub_withheld(node: ast.stmt, module: str, withheld: frozenset[tuple[str, str]]) -> ast.stmt:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (module, node.name) in withheld:
        return _stub(node, node.name)
    if isinstance(node, ast.ClassDef) and any(m == module and q.startswith(node.name + ".") for m, q in withheld):
        cls = copy.copy(node)
        cls.body = [_stub(b, f"{node.name}.{b.name}")
                    if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and (module, f"{node.name}.{b.name}") in withheld else b
                    for b in node.body]
        return cls
    return node


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, allowed: Callable[[str, str], bool], shipper: Shipper | None) -> None:
        super().__init__(file, protocol=4)
        self.allowed, self.shipper = allowed, shipper

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        module = getattr(cls, "__module__", "") or ""
        if not is_lib(module) or self.allowed(module, cls.__qualname__):
            return NotImplemented
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            values = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            code = self._code(cls)
            if code is not None:
                return (inside.make_object, (code.module, code.name, code.source, values))
            return (inside.make_record, (cls.__name__, values))
        if isinstance(obj, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
            code = self._code(cls)
            if code is not None:
                return (inside.make_object, (code.module, code.name, code.source, tuple(obj)))
            return (inside.make_tuple, (cls.__name__, tuple(cls._fields), tuple(obj)))
        return NotImplemented

    def _code(self, cls: type) -> ClassCode | None:
        if self.shipper is None:
            return None
        try:
            return self.shipper.code(cls)
        except Unshippable:
            if self.shipper.lenient:
                return None
            raise


def dumps(obj: Any, allowed: Callable[[str, str], bool], shipper: Shipper | None = None) -> bytes:
    """``obj`` pickled for a kernel. Scalelib data classes that ``allowed(module, qualname)`` refuses travel with their
    class's code where a ``shipper`` is given (raises :class:`Unshippable` where that cannot be), else as records."""
    buf = io.BytesIO()
    _Pickler(buf, allowed, shipper).dump(obj)
    return buf.getvalue()


def never(module: str, qualname: str) -> bool:
    return False
