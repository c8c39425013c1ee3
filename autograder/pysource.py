"""Parsing and compiling Python source from the grader's worker threads, one thread at a time.

CPython 3.11 keeps the recursion counter of its AST converter in shared interpreter state, so two
threads running ``ast.parse`` / ``ast.literal_eval`` at once can fail with "AST constructor
recursion depth mismatch" (CPython gh-106905). The grader parses notebooks, compiles instructor
cells and decodes kernel replies in several threads; all of that goes through this lock. Running
the compiled code does not.
"""

from __future__ import annotations

import ast
import threading
import types

_LOCK = threading.Lock()


def parse(src: str) -> ast.Module:
    with _LOCK:
        return ast.parse(src)


def literal_eval(text: str):
    with _LOCK:
        return ast.literal_eval(text)


def notebook_code(src: str, filename: str) -> types.CodeType:
    """A notebook cell (IPython syntax, magics included) compiled to a code object."""
    from IPython.core.inputtransformer2 import TransformerManager

    with _LOCK:
        return compile(TransformerManager().transform_cell(src), filename, "exec")
