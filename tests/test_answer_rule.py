"""One rule for what an answer may be, in the visible checks and the hidden ones alike (issue 49).

The rule lives in ``scalelib/exercise.py`` (``unpack``, ``sequence``, ``plain_number``, ``plain_bool``): several
values returned together may be a tuple, a list or a 1-D array; a yes/no may be a Python or NumPy bool. A test
cell that judged the container itself (``type(got) is not tuple``) or took the answer apart with Python's own
unpacking (``low, high = f(...)``, which accepts any iterable, or ``got[0]``, which accepts a longer tuple) would
let an answer pass in the notebook and lose its points when graded, or the reverse. This test reads every test
cell of every solution notebook, visible and hidden part, without running it, and finds those places:

* a type check of an answer's container or truth value (``type(x) is tuple``, ``type(x) not in (tuple, list)``,
  ``isinstance(x, tuple)``, ``type(x) is bool``): use ``ex.unpack``, ``ex.sequence`` or ``ex.plain_bool``;
* a student's function's result unpacked by an assignment (``a, b = f(...)``): use ``ex.unpack(f(...), 2, ...)``;
* a name bound to a student's function's result (``got = f(...)``) that the cell then indexes with a constant
  (``got[1]``), zips or loops over: unpack it first.

A student's function is one an answer cell of the chapter defines (``align``'s ``Exercise.names``). The body of an
``@ex.probe`` helper is not read: it runs in the student's kernel in the notebook and when graded alike, and returns
plain data that the test then takes apart by the rule.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import nbformat
import numpy as np
import pytest

from autograder import course
from autograder.instructor import chapter_model
from scalelib import exercise as ex

_CONTAINERS = {"tuple", "list", "bool"}


@dataclass(frozen=True)
class Breach:
    chapter: str
    test: str
    line: str
    why: str

    def __str__(self) -> str:
        return f"{self.chapter} {self.test}: {self.why}: {self.line.strip()[:100]}"


def _names_in(node: ast.expr) -> set[str]:
    """The bare names in a type, or tuple of types: ``tuple`` or ``(tuple, list)``."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return {i.id for i in items if isinstance(i, ast.Name)}


def _container_check(node: ast.AST) -> bool:
    """``type(x) is tuple``, ``type(x) not in (tuple, list)``, ``isinstance(x, (tuple, list))`` and the like."""
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call) \
            and isinstance(node.left.func, ast.Name) and node.left.func.id == "type":
        return any(_names_in(c) & _CONTAINERS for c in node.comparators)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
            and len(node.args) == 2:
        return bool(_names_in(node.args[1]) & _CONTAINERS)
    return False


def _student_call(node: ast.AST, student: set[str]) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in student:
        return node.func.id
    return None


def _bindings(node: ast.Assign, student: set[str]):
    """(target, value) pairs of an assignment, ``a, b = f(x), g(x)`` taken element by element."""
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                and len(target.elts) == len(node.value.elts):
            yield from zip(target.elts, node.value.elts)
        else:
            yield target, node.value


def breaches_in(source: str, student: set[str]) -> list[tuple[int, str]]:
    """(line number, why) for each place in a test cell's ``source`` that breaks the rule."""
    tree = ast.parse(source)
    for probe in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and any(
            isinstance(d, ast.Attribute) and d.attr == "probe" for d in n.decorator_list)]:
        probe.body = [ast.Pass()]  # runs beside the answer, the same in the notebook and when graded
    out = []
    bound: list[tuple[int, str, str | None]] = []  # (line, name, the student's function whose result it holds)
    for node in ast.walk(tree):
        if _container_check(node):
            out.append((node.lineno, "judges the answer's container or truth value itself (use ex.unpack, "
                                     "ex.sequence or ex.plain_bool)"))
        if isinstance(node, ast.Assign):
            for target, value in _bindings(node, student):
                fn = _student_call(value, student)
                if fn and isinstance(target, (ast.Tuple, ast.List)):
                    out.append((node.lineno, f"unpacks {fn}'s result with Python's own unpacking (use ex.unpack)"))
                elif isinstance(target, ast.Name):
                    bound.append((node.lineno, target.id, fn))
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            bound += [(node.lineno, a.arg, None) for a in node.args.args]

    def holds(name: str, line: int) -> str | None:
        """The student's function whose result ``name`` holds at ``line``: its latest binding above decides."""
        before = [(at, fn) for at, n, fn in bound if n == name and at < line]
        return max(before)[1] if before else None

    for node in ast.walk(tree):
        used = None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            used = node.value.id, "indexes", node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zip":
            used = next(((a.id, "zips", node.lineno) for a in node.args
                         if isinstance(a, ast.Name) and holds(a.id, node.lineno)), None)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name):
            used = node.iter.id, "loops over", node.iter.lineno
        fn = holds(used[0], used[2]) if used else None
        if used and fn:
            out.append((used[2], f"{used[1]} {fn}'s result without ex.unpack or ex.sequence"))
    return sorted(set(out))


def breaches(chapter: str) -> list[Breach]:
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    student = {name for e in chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb").exercises.values()
               for name in e.names}
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            lines = cell.source.splitlines()
            out += [Breach(chapter, meta["grade_id"], lines[n - 1], why)
                    for n, why in breaches_in(cell.source, student)]
    return out


def test_the_finder_sees_each_kind_of_breach_and_passes_the_rule():
    student = {"f"}
    bad = ("low, high = f(1)\n"
           "got = f(2)\nif type(got) is not tuple or len(got) != 2: pass\nprint(got[1])\n"
           "other, want = f(3), (1, 2)\nfor g, w in zip(other, want): pass\n"
           "if type(got[1]) is not bool: pass\nisinstance(got, (tuple, list))\nfor v in got: pass\n")
    whys = [why.split(" ")[0] for _, why in breaches_in(bad, student)]
    assert sorted(whys) == sorted(["unpacks", "judges", "indexes", "zips", "indexes", "judges", "judges", "loops"])
    good = ("low, high = ex.unpack(f(1), 2, 'f')\ngot = ex.unpack(f(2), 2, 'f')\nprint(got[1])\n"
            "rows = ex.sequence(f(3), 'f')\nfor r in rows: pass\nex.plain_bool(got[1], 'x')\n"
            "d = f(4)\nprint(d['out'])\nif type(d) is not dict: pass\n")
    assert breaches_in(good, student) == []
    assert breaches_in("@ex.probe\ndef run(x):\n    a, b = f(x)\n    return [a, b]\n", student) == []


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_every_test_cell_takes_answers_apart_by_the_one_rule(chapter):
    found = breaches(chapter)
    assert not found, "test cells that judge an answer's container themselves:\n" + "\n".join(map(str, found))


def test_the_rule_accepts_every_container_it_names_and_refuses_the_rest():
    for pair in ((1.0, 2), [1.0, 2], np.array([1.0, 2.0]), (np.float32(1.0), np.int64(2))):
        low, high = ex.unpack(pair, 2, "bounds")
        assert (ex.plain_number(low), ex.plain_number(high)) == (1.0, 2.0)
    for bad, said in (((1, 2, 3), "got 3 values"), (np.zeros((2, 1)), "got a ndarray"), ("ab", "got a str"),
                      ({1: 2, 3: 4}, "got a dict")):
        with pytest.raises(ex.ExerciseError, match=f"bounds must return 2 values .*{said}"):
            ex.unpack(bad, 2, "bounds")
    assert ex.sequence(np.arange(3), "rows") == [0, 1, 2] and ex.sequence((4,), "rows") == [4]
    with pytest.raises(ex.ExerciseError, match="rows must be a list"):
        ex.sequence({4}, "rows")
    assert ex.plain_bool(np.bool_(True)) is True and ex.plain_bool(np.array(False)) is False
    for bad in (1, 0.0, np.int64(1), None, "True"):
        with pytest.raises(ex.ExerciseError, match="must be True or False"):
            ex.plain_bool(bad)


def test_a_refused_answer_is_quoted_whole_or_says_how_much_was_cut():
    long = tuple(range(100))
    with pytest.raises(ex.ExerciseError) as err:
        ex.unpack(long, 2, "bounds")
    assert "more characters)" in str(err.value) and "0, 1, 2" in str(err.value)
    with pytest.raises(ex.ExerciseError) as err:
        ex.unpack((1.5, 2.5, 3.5), 2, "bounds")
    assert str(err.value).endswith("got 3 values: (1.5, 2.5, 3.5)")


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_a_test_that_withholds_runs_its_visible_checks_under_the_declaration(chapter):
    """What grading withholds, the visible checks withhold too (issue 49): each ``ex.withhold(...)`` is written
    above the cell's visible-checks block (where the notebook runs it; the grader reads it anywhere in the cell),
    and the block names the answer's functions (``answers=``), every function its answer cell defines."""
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    exercises = chapter_model.load_chapter(course.SOLUTIONS / f"{chapter}.ipynb").exercises
    defined = {eid: list(e.names) for eid, e in exercises.items()}
    wrong = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or "ex.withhold(" not in cell.source:
            continue
        visible, _, hidden = cell.source.partition("### BEGIN HIDDEN TESTS")
        blocks = [n for n in ast.walk(ast.parse(visible)) if isinstance(n, ast.Call)
                  and getattr(n.func, "attr", "") == "visible_checks"]
        named = sorted(e.id for b in blocks for k in b.keywords if k.arg == "answers" for e in k.value.elts)
        if "ex.withhold(" in hidden or "ex.withhold(" not in visible.split("with ex.visible_checks(")[0]:
            wrong.append(f"{meta['grade_id']}: ex.withhold(...) belongs above the visible-checks block")
        if len(blocks) != 1 or named != defined[meta["grade_id"]]:
            wrong.append(f"{meta['grade_id']}: answers={named}, its answer cell defines {defined[meta['grade_id']]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("chapter", course.chapter_names())
def test_no_message_cuts_a_value_without_saying_so(chapter):
    """A value quoted in a check's message is shown by ``ex.shown``, whole or with a note of what was cut, never by
    a bare ``{x!r:.80}``, which ends a message mid-number (issue 49)."""
    nb = nbformat.read(course.SOLUTIONS / f"{chapter}.ipynb", as_version=4)
    cuts = [line.strip() for cell in nb.cells if cell.cell_type == "code"
            for line in cell.source.splitlines() if re.search(r"![rs]:\.\d+\}", line)]
    assert not cuts, "\n".join(cuts)
