"""Every function an exercise's answer calls is shown working on the page before the exercise (issue 49).

A student has only the page. When the reference answer of an exercise calls ``jax.lax.ppermute`` or
``chip.has_wraparound``, some code cell above the exercise must call it too, so that the student has seen what
it takes and what it returns before having to use it. This test reads the solution notebooks without running
them: for each exercise it parses the reference answer (the lines between ``### BEGIN SOLUTION`` and
``### END SOLUTION``) with ``ast``, names each call in it, and looks for a call of the same name in the code
cells above the exercise that a student sees: demo cells and the visible part of earlier test cells, not the
folded set-up cell, not a hidden test, not another answer (the student's copy has a stub there), and not
markdown (a name in the text is not a demonstration of what it returns).

How a call is named:

* a call through an imported module or name is named by its full path, aliases resolved:
  ``lax.ppermute(...)`` after ``from jax import lax`` is ``jax.lax.ppermute``, ``P(...)`` after
  ``from jax.sharding import PartitionSpec as P`` is ``jax.sharding.PartitionSpec``; a cell above must call the
  same path;
* a method call on a value (``chip.has_wraparound(shape)``, ``spec.split(",")``) is named by the method,
  ``.has_wraparound``; a cell above must call a method of that name on anything (``hw.TPU_V5P.has_wraparound``);
* a call of a function the notebook itself defines (an earlier answer, a helper in the cell) needs nothing.

What needs no demonstration is stated in ``KNOWN`` (Python and NumPy) and ``SHOWN_IN_TEXT`` below, each with
the reason.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable
from dataclasses import dataclass

import nbformat
import numpy as np
import pytest

from autograder import course

BEGIN, END, HIDDEN = "### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS"

# What the chapters take as known, so that an answer may call it without a demonstration: (why, names). A
# method name (".split") stands for a method of that name on any value. Kept to Python and NumPy: JAX's own API
# (jax.lax, jax.nn, jax.tree, jit, shard_map, ``.at[...]``) and every scalelib function are what the course
# teaches, and none of them is here.
_NDARRAY = {f".{name}" for name in dir(np.ndarray) if not name.startswith("_")}
KNOWN: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("Python's built-in functions (sum, range, isinstance...): the course is for people who write Python",
     lambda name: name in dir(builtins)),
    ("methods of Python's built-in types (str.split, list.append, dict.items...), for the same reason",
     lambda name: name in {f".{m}" for kind in (str, list, dict, tuple, set, int, float) for m in dir(kind)}),
    ("Python's math and re modules and the methods of a regex match (.group, .start): its standard library for "
     "arithmetic and text, which the exercises that parse HLO text (chapter 9) leave to the student",
     lambda name: name.split(".")[0] in ("math", "re") or name in {f".{m}" for m in dir(re.Match)}),
    ("NumPy and the methods of its arrays (np.where, np.exp, .reshape, .astype...): every chapter computes "
     "with NumPy from chapter 1 on and takes it as known",
     lambda name: name.startswith("numpy.") or name in _NDARRAY),
    ("jax.numpy's functions that NumPy has under the same name (jnp.dot, jnp.stack, jnp.einsum): jax.numpy is "
     "NumPy's interface on JAX arrays; JAX's own additions are not here",
     lambda name: name.startswith("jax.numpy.") and hasattr(np, name.split(".")[2])),
)


def taken_as_known(name: str) -> str | None:
    """Why an answer may call ``name`` without a demonstration above it, or None."""
    return next((why for why, holds in KNOWN if holds(name)), None)


# Calls that no cell can usefully show before the exercise, each with the exercise text that names it instead:
# {(exercise id, call name): why}. Empty: every call an answer needs is demonstrated.
SHOWN_IN_TEXT: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Need:
    chapter: str
    exercise: str
    call: str
    line: str  # the answer's line that makes the call

    def __str__(self) -> str:
        return f"{self.chapter} {self.exercise}: {self.call}  ({self.line.strip()[:90]})"


def _tree(source: str) -> ast.Module:
    """``source`` parsed; a cell with IPython syntax (``%magic``, ``!cmd``) is first turned into Python, line for
    line, as IPython runs it."""
    try:
        return ast.parse(source)
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager

        return ast.parse(TransformerManager().transform_cell(source))


def _imports(tree: ast.AST) -> dict[str, str]:
    """The names that ``tree``'s imports bind, with the dotted path each stands for."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _defined(tree: ast.AST) -> set[str]:
    """The names ``tree`` binds to values of its own, at any depth: functions and classes it defines, names it
    assigns (``up = lambda ...``) and parameters. Calling one of them calls the notebook's code (or a value the
    code was handed), which needs no demonstration."""
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}


def _chain(node: ast.expr) -> tuple[str | None, list[str]]:
    """A callee as (root name or None, attributes): ``jax.lax.ppermute`` -> ("jax", ["lax", "ppermute"]),
    ``f(x).sum`` -> (None, ["sum"])."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def call_name(func: ast.expr, imports: dict[str, str], defined: set[str]) -> str | None:
    """What a call of ``func`` is named by (see the module's docstring); None for the notebook's own functions."""
    root, attrs = _chain(func)
    if root is not None and root in imports:
        return ".".join([imports[root], *attrs])
    if attrs:
        return "." + attrs[-1]
    if root is None or root in defined:
        return None
    return root  # a bare name bound by no import and no def: a builtin, or a value called (a lambda)


def _calls(tree: ast.AST, imports: dict[str, str], defined: set[str], lines: set[int] | None = None):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (lines is None or node.lineno in lines):
            name = call_name(node.func, imports, defined)
            if name is not None:
                yield name, node.lineno


def _solution_lines(source: str) -> set[int]:
    """The 1-based numbers of the lines strictly between each ``### BEGIN SOLUTION`` and its ``### END SOLUTION``
    (a cell may hold several answers, e.g. two functions)."""
    inside, out = False, set()
    for number, line in enumerate(source.splitlines(), 1):
        if line.strip() in (BEGIN, END):
            inside = line.strip() == BEGIN
        elif inside:
            out.add(number)
    return out


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _shown_part(cell) -> str | None:
    """What the student's copy of a code cell shows and runs, or None: a test cell without its hidden tests,
    neither an answer (a stub there) nor the set-up cell (folded, and not a demonstration)."""
    meta = _meta(cell)
    if cell.cell_type != "code" or meta.get("solution") or meta.get("grade_id") == "setup" \
            or "setup" in cell.metadata.get("tags", []):
        return None
    return cell.source.split(HIDDEN)[0]


def needs_not_shown(chapter: str) -> list[Need]:
    """The calls of each exercise's reference answer that no cell above the exercise makes: above its text (the
    markdown cell that names its id), not merely above its answer cell."""
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    trees = [_tree(c.source) if c.cell_type == "code" else None for c in nb.cells]
    imports: dict[str, str] = {}
    defined: set[str] = set()
    for tree in trees:
        if tree is not None:
            imports.update(_imports(tree))
            defined |= _defined(tree)
    shown_before: list[frozenset[str]] = []  # [i]: the calls the cells above cell i show
    shown: set[str] = set()
    for cell, tree in zip(nb.cells, trees):
        shown_before.append(frozenset(shown))
        part = _shown_part(cell) if tree is not None else None
        if part is not None:
            names = {name for name, _ in _calls(_tree(part), imports, defined)}
            shown |= names | {"." + n.rsplit(".", 1)[1] for n in names if "." in n[1:]}  # a method, on anything
    missing = []
    for i, (cell, tree) in enumerate(zip(nb.cells, trees)):
        if tree is None or not _meta(cell).get("solution"):
            continue
        exercise = course.exercise_of_answer(_meta(cell)["grade_id"]) or _meta(cell)["grade_id"]
        text = [j for j in range(i) if nb.cells[j].cell_type == "markdown" and f"`{exercise}`" in nb.cells[j].source]
        before = shown_before[text[-1] if text else i]
        lines, seen = cell.source.splitlines(), set()
        for name, lineno in sorted(_calls(tree, imports, defined, _solution_lines(cell.source)), key=lambda c: c[1]):
            if name in before or name in seen or taken_as_known(name) or (exercise, name) in SHOWN_IN_TEXT:
                continue
            seen.add(name)
            missing.append(Need(chapter, exercise, name, lines[lineno - 1]))
    return missing


def test_the_parser_names_calls_as_the_rule_says():
    src = ("import jax\nfrom jax import lax\nfrom jax.sharding import PartitionSpec as P\n"
           "def f(chip, x):\n    helper = lambda v: v\n    jax.lax.ppermute(x, 'y', [(0, 1)])\n    lax.axis_index('y')\n"
           "    chip.has_wraparound((4,))\n    P('x')\n    f(chip, x)\n    sum([1])\n    x.sum().item()\n    helper(1)\n")
    tree = ast.parse(src)
    names = [n for n, _ in _calls(tree, _imports(tree), _defined(tree))]
    assert sorted(names) == sorted(["jax.lax.ppermute", "jax.lax.axis_index", ".has_wraparound",
                                    "jax.sharding.PartitionSpec", "sum", ".sum", ".item"])  # f, helper: its own


def test_a_call_made_only_in_an_answer_or_a_hidden_test_is_not_shown(tmp_path, monkeypatch):
    """The check itself, on a made-up chapter: a call counts as shown only in a visible cell above."""
    cells = [nbformat.v4.new_code_cell("import jax"),
             nbformat.v4.new_code_cell("print(jax.lax.axis_size)\n" + HIDDEN + "\njax.lax.psum(1, 'x')"),
             nbformat.v4.new_code_cell(f"def ans(x):\n    {BEGIN}\n    a = jax.lax.psum(x, 'x')\n"
                                       f"    return jax.lax.axis_size('x') + jax.lax.pmax(a, 'x')\n    {END}"),
             nbformat.v4.new_code_cell("jax.lax.pmax(1, 'x')")]
    cells[2].metadata["nbgrader"] = {"solution": True, "grade_id": "ch99-x-answer"}
    (tmp_path / "99_x.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    monkeypatch.setattr(course, "SOLUTIONS", tmp_path)
    assert [n.call for n in needs_not_shown("99_x")] == ["jax.lax.psum", "jax.lax.axis_size", "jax.lax.pmax"]


def test_what_is_taken_as_known_is_python_and_numpy_only():
    for name in ("sum", ".split", "math.prod", "re.findall", ".group", "numpy.where", ".reshape", "jax.numpy.dot"):
        assert taken_as_known(name), name
    for name in ("jax.lax.ppermute", "jax.lax.axis_index", "jax.lax.dynamic_slice_in_dim", "jax.jit", "jax.nn.softmax",
                 "jax.tree.map", ".set", ".has_wraparound", ".axes_of", "scalelib.compat.shard_map", "jax.numpy.isin_ring"):
        assert taken_as_known(name) is None, name
    assert all(why.strip() for why in SHOWN_IN_TEXT.values())
    assert not [call for _, call in SHOWN_IN_TEXT if call.startswith("jax.lax.ppermute")]


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_every_call_an_answer_needs_is_shown_above_its_exercise(chapter):
    missing = needs_not_shown(chapter)
    assert not missing, ("calls that an exercise's answer makes and no cell above it shows (add a demo cell, or "
                         "see SHOWN_IN_TEXT):\n" + "\n".join(map(str, missing)))
