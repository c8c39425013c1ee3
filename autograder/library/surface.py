"""What of scalelib an exercise may use while it is graded, and the library a kernel gets for it.

An exercise declares its surface in its test cell: ``ex.allow(hw, rc.on_mesh)`` names whole modules or top-level
functions and classes of a module. The grader reads the declaration without running anything
(:func:`declared`), closes it over what the declared items need (:func:`closure`: their module's own helpers and
the scalelib names they import) and writes a ``scalelib/`` folder holding exactly that (:meth:`Surface.write`):
whole modules copied, other modules reduced to the needed top-level statements, packages given an empty
``__init__``. The student's kernel is started with that folder mounted where scalelib lives, so the rest of the
library is not in its file system at all (see ``sandbox.py``).
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autograder import pysource
from autograder.library.library_errors import SurfaceError
from autograder.library.module_reader import (
    PACKAGE,
    Item,
    is_lib,
    is_package,
    kept_names,
    library_root,
    module_file,
    module_imports,
    parsed,
    shake,
    statements,
)

__all__ = [
    "ALWAYS",
    "PACKAGE",
    "Item",
    "Surface",
    "SurfaceError",
    "chapter_aliases",
    "closure",
    "declared",
    "library_root",
    "withheld",
]

@dataclass(frozen=True)
class Surface:
    declared: frozenset[Item]
    whole: frozenset[str]
    partial: tuple[tuple[str, frozenset[str]], ...]  # (module, top-level names kept), sorted
    unrestricted: bool = False  # all of scalelib (the real folder): only for tests that prove a delegation works

    @classmethod
    def everything(cls) -> Surface:
        return cls(frozenset(), frozenset(), (), unrestricted=True)

    @property
    def key(self) -> str:
        text = repr((sorted(self.whole), self.partial, self.unrestricted))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def modules(self) -> set[str]:
        """Every module file the tree holds, packages included."""
        if self.unrestricted:
            return set(_all_modules())
        mods = set(self.whole) | {m for m, _ in self.partial}
        for m in list(mods):
            parts = m.split(".")
            mods |= {".".join(parts[:k]) for k in range(1, len(parts))}
        return mods | {PACKAGE}

    def allows(self, module: str, qualname: str) -> bool:
        """Whether ``module.qualname`` (a class, function or attribute path) exists in the tree."""
        if self.unrestricted or module in self.whole:
            return True
        top = qualname.split(".")[0]
        return any(m == module and top in names for m, names in self.partial)

    def describe(self) -> str:
        if self.unrestricted:
            return "all of scalelib"
        parts = sorted(self.declared)
        return ", ".join(map(str, parts)) if parts else "nothing of scalelib"

    def write(self, dest: Path) -> Path:
        """Write the tree to ``dest/scalelib`` (read-only); returns that folder."""
        root = dest / PACKAGE
        for module in sorted(self.modules):
            rel = Path(*module.split(".")[1:])
            package = module == PACKAGE or is_package(module)
            target = root / rel / "__init__.py" if package else (root / rel).with_suffix(".py")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(self._source(module), encoding="utf-8")
        for path in sorted(root.rglob("*"), reverse=True):
            path.chmod(0o555 if path.is_dir() else 0o444)
        root.chmod(0o555)
        return root

    def _source(self, module: str) -> str:
        f = module_file(module)
        assert f is not None
        if module in self.whole:
            return f.read_text(encoding="utf-8")
        names = next((n for m, n in self.partial if m == module), frozenset())
        kept, _ = shake(module, set(names)) if names else ([], [])
        doc = ast.get_docstring(parsed(module)) or ""
        declared = sorted(str(i.name) for i in self.declared if i.module == module and i.name)
        allowed = ", ".join(declared) or "only what other allowed parts need"
        head = (f'"""{module}, reduced by the grader to what this exercise may use: {allowed}.\n\n'
                f'{_quote(doc)}\n"""\n\n')
        body = "\n\n".join(ast.unparse(n) for n in kept)
        tail = ("\n\n\ndef __getattr__(name):\n"
                f"    raise AttributeError(f'{module}.{{name}} is not available while this exercise is graded "
                f"(it may use {allowed} of {module})')\n")
        return head + body + tail


def _all_modules() -> set[str]:
    root = library_root()
    out = {PACKAGE}
    for f in root.rglob("*.py"):
        rel = f.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out.add(".".join([PACKAGE, *parts]))
    return out


def _quote(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace('"""', "'''")


# In every surface, whatever an exercise declares: the argument checks (``validate.positive_int`` and kin). Many
# scalelib classes call them when an object is built (a TransformerConfig checks its counts), so an object a test
# hands the student's function can only be rebuilt in the kernel with them there; they compute no answer.
ALWAYS: tuple[Item, ...] = (Item(f"{PACKAGE}.validate"),)


def closure(declared: Iterable[Item]) -> Surface:
    """The declared items and everything they need, as whole modules and reduced ones, plus ``ALWAYS``."""
    declared = frozenset(declared)
    whole: set[str] = set()
    need: dict[str, set[str]] = {}
    work = list(declared) + list(ALWAYS)
    while True:
        while work:
            item = work.pop()
            if module_file(item.module) is None:
                raise SurfaceError(f"{item.module} is not a scalelib module")
            if item.name is None:
                if item.module not in whole:
                    whole.add(item.module)
                    work += module_imports(item.module)
            elif item.module not in whole:
                need.setdefault(item.module, set()).add(item.name)
        grown = False
        for module, names in list(need.items()):
            if module in whole:
                continue
            _, external = shake(module, set(names))
            for ext in external:
                known = ext.module in whole or (ext.name is not None and ext.name in need.get(ext.module, set()))
                if not known:
                    work.append(ext)
                    grown = True
        if not grown and not work:
            break
    partial = tuple(sorted((m, kept_names(m, n)) for m, n in need.items() if m not in whole))
    return Surface(declared, frozenset(whole), partial)


# -- declarations -----------------------------------------------------------------------------------------------------

def chapter_aliases(sources: Iterable[str]) -> dict[str, Item]:
    """Names the chapter's set-up and demo cells import from scalelib: alias -> module or top-level item."""
    out: dict[str, Item] = {}
    for src in sources:
        try:
            tree = pysource.parse(_strip_magics(src))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if is_lib(a.name):
                        out[a.asname or a.name] = Item(a.name) if a.asname else Item(PACKAGE)
            elif isinstance(node, ast.ImportFrom) and node.module and is_lib(node.module) and not node.level:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out[a.asname or a.name] = Item(sub) if module_file(sub) else Item(node.module, a.name)
    return out


def _strip_magics(src: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in src.splitlines())


def declared(test_source: str, aliases: dict[str, Item]) -> frozenset[Item]:
    """The items named by every ``ex.allow(...)`` (or ``allow(...)``) call in a test cell."""
    tree = pysource.parse(_strip_magics(test_source))
    out: set[Item] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "allow")
                or (isinstance(node.func, ast.Name) and node.func.id == "allow"))):
            continue
        for arg in node.args:
            out.add(_resolve(arg, aliases))
    return frozenset(out)


def _resolve(expr: ast.expr, aliases: dict[str, Item]) -> Item:
    chain: list[str] = []
    while isinstance(expr, ast.Attribute):
        chain.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or expr.id not in aliases:
        raise SurfaceError(f"ex.allow({ast.unparse(expr)}...): name a scalelib module the chapter imports, "
                           "or a function or class of one")
    item = aliases[expr.id]
    for part in chain:
        if item.name is not None:
            raise SurfaceError(f"ex.allow: {item}.{part} is not a top-level item of a module")
        sub = f"{item.module}.{part}"
        item = Item(sub) if module_file(sub) else Item(item.module, part)
    if item.name is not None and not any(item.name in st.binds for st in statements(item.module)):
        raise SurfaceError(f"ex.allow: {item.module} has no top-level {item.name}")
    return item


# -- what a test withholds --------------------------------------------------------------------------------------------

def withheld(test_source: str, aliases: dict[str, Item]) -> frozenset[tuple[str, str]]:
    """``(module, qualname)`` of the members of scalelib classes a test cell declares with ``ex.withhold(...)``, read
    without running the cell: the objects it hands the student travel without them (what the exercise asks for).

    The arguments are followed through the cell's own names: ``Chip = hw.Chip`` before
    ``ex.withhold(Chip.pod_hosts)``, and ``ex.withhold(*members)`` where the cell binds ``members = (...)``. What
    cannot be followed statically is left out here; the judge notices it when the test runs
    (:meth:`autograder.judging.judge.Judge.withhold`), so nothing a test withholds reaches a kernel unnoticed.
    """
    tree = pysource.parse(_strip_magics(test_source))
    local: dict[str, ast.expr] = {}
    sequences: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, node.value
            if isinstance(value, (ast.Name, ast.Attribute)):
                local[name] = value
            elif isinstance(value, (ast.Tuple, ast.List)):
                sequences.setdefault(name, []).extend(value.elts)
        elif isinstance(node, ast.keyword) and node.arg and isinstance(node.value, (ast.Tuple, ast.List)):
            sequences.setdefault(node.arg, []).extend(node.value.elts)
        elif isinstance(node, ast.ImportFrom) and node.module and is_lib(node.module) and not node.level:
            for a in node.names:
                local[a.asname or a.name] = ast.Attribute(value=_dotted(node.module), attr=a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if is_lib(a.name) and a.asname:
                    local[a.asname] = _dotted(a.name)
    roots = {**aliases, PACKAGE: Item(PACKAGE)}
    out: set[tuple[str, str]] = set()
    for fn, call in _withhold_calls(tree):
        for arg in call.args:
            if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
                exprs = sequences.get(arg.value.id, []) + _passed(tree, fn, arg.value.id, sequences)
            else:
                exprs = [arg]
            for expr in exprs:
                key = _function_key(expr, local, roots)
                if key is not None:
                    out.add(key)
    return frozenset(out)


def _withhold_calls(tree: ast.AST) -> list[tuple[ast.FunctionDef | None, ast.Call]]:
    """Every ``withhold(...)`` call of a cell, with the function of the cell it is written in (None at top level)."""
    out: list[tuple[ast.FunctionDef | None, ast.Call]] = []

    def visit(node: ast.AST, fn: ast.FunctionDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and (
                    (isinstance(child.func, ast.Attribute) and child.func.attr == "withhold")
                    or (isinstance(child.func, ast.Name) and child.func.id == "withhold")):
                out.append((fn, child))
            visit(child, child if isinstance(child, ast.FunctionDef) else fn)

    visit(tree, None)
    return out


def _passed(tree: ast.AST, fn: ast.FunctionDef | None, param: str, sequences: dict[str, list[ast.expr]]
            ) -> list[ast.expr]:
    """What the cell passes for parameter ``param`` of its function ``fn`` (``_check(..., (rl.f, rl.g))``): the
    elements of tuples and lists given in calls of ``fn`` by position or by name, or of the names it binds to them."""
    if fn is None:
        return []
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param not in params and param not in [a.arg for a in fn.args.kwonlyargs]:
        return []
    index = params.index(param) if param in params else None
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn.name):
            continue
        given = [k.value for k in node.keywords if k.arg == param]
        if index is not None and index < len(node.args) and not any(isinstance(a, ast.Starred) for a in node.args):
            given.append(node.args[index])
        for value in given:
            if isinstance(value, (ast.Tuple, ast.List)):
                out += value.elts
            elif isinstance(value, ast.Name):
                out += sequences.get(value.id, [])
    return out


def _dotted(module: str) -> ast.expr:
    parts = module.split(".")
    node: ast.expr = ast.Name(id=parts[0], ctx=ast.Load())
    for p in parts[1:]:
        node = ast.Attribute(value=node, attr=p, ctx=ast.Load())
    return node


def _function_key(expr: ast.expr, local: dict[str, ast.expr], roots: dict[str, Item],
                  depth: int = 0) -> tuple[str, str] | None:
    """The (module, qualname) of the scalelib function a withhold argument names, or None if it cannot be told."""
    import importlib
    import types

    chain: list[str] = []
    while isinstance(expr, ast.Attribute):
        chain.insert(0, expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name) or depth > 8:
        return None
    if expr.id in local and expr.id not in roots:
        inner = local[expr.id]
        for part in chain:
            inner = ast.Attribute(value=inner, attr=part, ctx=ast.Load())
        return _function_key(inner, local, roots, depth + 1)
    item = roots.get(expr.id)
    if item is None:
        return None
    try:
        obj: object = importlib.import_module(item.module)
        for part in ([item.name] if item.name else []) + chain:
            obj = getattr(obj, part)
    except Exception:  # a name the library does not have: ex.withhold itself will say so in the notebook
        return None
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)
    if not isinstance(obj, types.FunctionType) or not is_lib(obj.__module__ or ""):
        return None
    return obj.__module__, obj.__qualname__
