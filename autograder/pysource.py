"""Parsing and compiling Python source in the grader, safe from threads.

CPython 3.11 before 3.11.8 (and 3.12 before 3.12.2) keeps the recursion counter of the converter from its parser's
tree to ``ast`` objects (``PyAST_mod2obj``) in one interpreter-wide struct. When a garbage collection inside that
conversion runs a finalizer, the thread can lose the GIL; another thread converting a tree meanwhile resets the
shared counter, and one of the two fails with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython#106905, fixed by python/cpython#113035). It is a race between *concurrent* conversions only, so
one process-wide lock around every conversion avoids it: :func:`guard` wraps ``builtins.compile`` so that each
call with ``ast.PyCF_ONLY_AST`` (what ``ast.parse``, ``ast.literal_eval``, ``inspect``, ``traceback``, nbgrader's
and IPython's helpers all end in) holds :data:`AST_LOCK`. The grader installs it when this module is imported;
the helpers below take the same (re-entrant) lock too. Compiling to code objects and running them do not convert
trees to ``ast`` objects and are not serialised.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import sys
import threading
import types
from typing import Any

AST_LOCK = threading.RLock()
_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag
_real_compile = builtins.compile


def _guarded_compile(source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False,
                     optimize: int = -1, **kwargs: Any) -> Any:
    """``compile`` with the caller's ``__future__`` flags (as the builtin inherits them), converting trees to
    ``ast`` objects under :data:`AST_LOCK`."""
    if not dont_inherit:
        flags |= sys._getframe(1).f_code.co_flags & _FUTURE_FLAGS
    if flags & ast.PyCF_ONLY_AST:
        with AST_LOCK:
            return _real_compile(source, filename, mode, flags, True, optimize, **kwargs)
    return _real_compile(source, filename, mode, flags, True, optimize, **kwargs)


_guarded_compile.__wrapped__ = _real_compile  # type: ignore[attr-defined]


def guard() -> None:
    """Serialise every conversion to ``ast`` objects in this process (idempotent; see the module docstring)."""
    if builtins.compile is not _guarded_compile:
        builtins.compile = _guarded_compile


def guarded() -> bool:
    return builtins.compile is _guarded_compile


guard()


def parse(src: str) -> ast.Module:
    with AST_LOCK:
        return ast.parse(src)


def literal_eval(text: str) -> Any:
    with AST_LOCK:
        return ast.literal_eval(text)


def transform(src: str) -> str:
    """A notebook cell (IPython syntax) as plain Python."""
    from IPython.core.inputtransformer2 import TransformerManager

    with AST_LOCK:
        return TransformerManager().transform_cell(src)


def notebook_code(src: str, filename: str) -> types.CodeType:
    """A notebook cell (IPython syntax, magics included) compiled to a code object."""
    from IPython.core.inputtransformer2 import TransformerManager

    with AST_LOCK:
        return compile(TransformerManager().transform_cell(src), filename, "exec")


def decorated_functions(src: str, decorator: str) -> dict[str, str]:
    """Top-level ``def``s of a cell decorated with ``@<anything>.<decorator>``: name -> source without it."""
    from IPython.core.inputtransformer2 import TransformerManager

    with AST_LOCK:
        tree = ast.parse(TransformerManager().transform_cell(src))
        out = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(
                    (isinstance(d, ast.Attribute) and d.attr == decorator)
                    or (isinstance(d, ast.Name) and d.id == decorator)
                    for d in node.decorator_list):
                node.decorator_list = []
                out[node.name] = ast.unparse(node)
        return out
