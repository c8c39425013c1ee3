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
from typing import Any

_LOCK = threading.Lock()


def parse(src: str) -> ast.Module:
    with _LOCK:
        return ast.parse(src)


def literal_eval(text: str) -> Any:
    with _LOCK:
        return ast.literal_eval(text)


def transform(src: str) -> str:
    """A notebook cell (IPython syntax) as plain Python."""
    from IPython.core.inputtransformer2 import TransformerManager

    with _LOCK:
        return TransformerManager().transform_cell(src)


def notebook_code(src: str, filename: str) -> types.CodeType:
    """A notebook cell (IPython syntax, magics included) compiled to a code object."""
    from IPython.core.inputtransformer2 import TransformerManager

    with _LOCK:
        return compile(TransformerManager().transform_cell(src), filename, "exec")


def decorated_functions(src: str, decorator: str) -> dict[str, str]:
    """Top-level ``def``s of a cell decorated with ``@<anything>.<decorator>``: name -> source without it."""
    from IPython.core.inputtransformer2 import TransformerManager

    with _LOCK:
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
