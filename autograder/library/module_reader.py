"""Reading scalelib's modules without importing their code, and reducing one to some of its top-level names.

:func:`shake` keeps the statements a set of names needs (their definitions, the module-level names those use,
transitively, and the imports they rely on) and says which scalelib items elsewhere they need in turn. Annotations
are left out of "uses": scalelib modules postpone them (``from __future__ import annotations``).
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from autograder import pysource
from autograder.library.library_errors import SurfaceError

PACKAGE = "scalelib"




@dataclass(frozen=True, order=True)
class Item:
    module: str  # 'scalelib.ring_collectives'
    name: str | None = None  # a top-level name of it, or None for the whole module

    def __str__(self) -> str:
        return self.module if self.name is None else f"{self.module}.{self.name}"


@cache
def module_file(module: str) -> Path | None:
    """The source file of a scalelib module (``__init__.py`` for a package), or None if there is none."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def is_package(module: str) -> bool:
    f = module_file(module)
    return f is not None and f.name == "__init__.py"


def library_root() -> Path:
    """The folder of the scalelib package the grader uses (what a sandbox replaces)."""
    f = module_file(PACKAGE)
    if f is None:
        raise SurfaceError("scalelib is not importable by the grader")
    return f.parent


@cache
def parsed(module: str) -> ast.Module:
    f = module_file(module)
    if f is None:
        raise SurfaceError(f"{module} is not a scalelib module")
    return pysource.parse(f.read_text(encoding="utf-8"))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package(module) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def is_lib(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


@dataclass
class _Stmt:
    node: ast.stmt
    binds: set[str]
    uses: set[str]
    attrs: dict[str, set[str] | None] = field(default_factory=dict)  # alias -> attributes used (None: used bare)


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not node:
            out.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in sub.names}
        elif isinstance(sub, (ast.Subscript, ast.Attribute)) and isinstance(sub.ctx, ast.Store):
            base = sub.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                out.add(base.id)  # CHIPS["x"] = ... changes CHIPS
    return out


def _uses(node: ast.stmt) -> tuple[set[str], dict[str, set[str] | None]]:
    """Names a statement reads (annotations left out: scalelib modules use postponed annotations), and for each
    name the attributes read from it (None when the name is also used by itself)."""
    skip: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            skip |= {id(n) for a in (*sub.args.args, *sub.args.kwonlyargs, *sub.args.posonlyargs,
                                     sub.args.vararg, sub.args.kwarg) if a is not None and a.annotation is not None
                     for n in ast.walk(a.annotation)}
            if sub.returns is not None:
                skip |= {id(n) for n in ast.walk(sub.returns)}
        elif isinstance(sub, ast.AnnAssign):
            skip |= {id(n) for n in ast.walk(sub.annotation)}
    names: set[str] = set()
    attrs: dict[str, set[str] | None] = {}
    bare: set[int] = set()
    for sub in ast.walk(node):
        if id(sub) in skip:
            continue
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and isinstance(sub.value.ctx, ast.Load):
            seen = attrs.setdefault(sub.value.id, set())
            if seen is not None:
                seen.add(sub.attr)
            bare.add(id(sub.value))
    for sub in ast.walk(node):
        if id(sub) in skip:
            continue
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            names.add(sub.id)
            if id(sub) not in bare:
                attrs[sub.id] = None
    return names, attrs


@cache
def statements(module: str) -> tuple[_Stmt, ...]:
    out = []
    for node in parsed(module).body:
        uses, attrs = _uses(node)
        out.append(_Stmt(node, _bound(node), uses, attrs))
    return tuple(out)


def _lib_imports(module: str, stmt: _Stmt, wanted: set[str]) -> list[Item]:
    """Items of scalelib that an import statement brings in for the names in ``wanted``."""
    node = stmt.node
    out: list[Item] = []
    if isinstance(node, ast.ImportFrom):
        src = _absolute(module, node)
        if not is_lib(src):
            return []
        for a in node.names:
            alias = a.asname or a.name
            if alias not in wanted:
                continue
            sub = f"{src}.{a.name}"
            out.append(Item(sub) if module_file(sub) else Item(src, a.name))
    elif isinstance(node, ast.Import):
        for a in node.names:
            if is_lib(a.name) and (a.asname or a.name.split(".")[0]) in wanted:
                out.append(Item(a.name))
    return out


def _refine(items: list[Item], usage: dict[str, set[str] | None], alias_of: dict[str, str]) -> list[Item]:
    """A whole module imported as an alias becomes the attributes the kept code reads from it, where it can."""
    out = []
    for item in items:
        alias = alias_of.get(item.module)
        used = usage.get(alias) if alias else None
        if item.name is None and used is not None and not is_package(item.module):
            out += [Item(item.module, a) for a in sorted(used)]
        else:
            out.append(item)
    return out


def shake(module: str, names: set[str]) -> tuple[list[ast.stmt], list[Item]]:
    """The top-level statements of ``module`` that ``names`` need, and the scalelib items those need elsewhere."""
    stmts = statements(module)
    binders: dict[str, list[int]] = {}
    for i, st in enumerate(stmts):
        for n in st.binds:
            binders.setdefault(n, []).append(i)
    keep: set[int] = set()
    todo = [n for n in names if n in binders]
    missing = [n for n in names if n not in binders]
    if missing:
        raise SurfaceError(f"{module} has no top-level {', '.join(sorted(missing))}")
    wanted_imports: dict[int, set[str]] = {}
    usage: dict[str, set[str] | None] = {}
    seen: set[str] = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        for i in binders.get(n, []):
            st = stmts[i]
            if isinstance(st.node, (ast.Import, ast.ImportFrom)):
                wanted_imports.setdefault(i, set()).add(n)
            if i in keep:
                continue
            keep.add(i)
            for alias, attrs in st.attrs.items():
                prev = usage.get(alias, set())
                usage[alias] = None if attrs is None or prev is None else prev | attrs
            todo += [u for u in st.uses if u in binders]
    kept: list[ast.stmt] = []
    external: list[Item] = []
    for i in sorted(keep):
        st = stmts[i]
        node = st.node
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            kept.append(node)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            lib = _lib_imports(module, st, wanted_imports.get(i, set()))
            if lib:
                alias_of = {}
                for a in node.names:
                    src = _absolute(module, node) + "." + a.name if isinstance(node, ast.ImportFrom) else a.name
                    alias_of[src] = a.asname or a.name.split(".")[0]
                external += _refine(lib, usage, alias_of)
                node = _only_aliases(node, wanted_imports.get(i, set()))
        kept.append(node)
    futures = [n for n in parsed(module).body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    kept = futures + [n for n in kept if n not in futures]
    return kept, external


def _only_aliases(node: ast.Import | ast.ImportFrom, wanted: set[str]) -> ast.stmt:
    names = [a for a in node.names if (a.asname or a.name.split(".")[0]) in wanted]
    if isinstance(node, ast.ImportFrom):
        return ast.ImportFrom(module=node.module, names=names, level=node.level)
    return ast.Import(names=names)


def kept_names(module: str, names: set[str]) -> frozenset[str]:
    """Every top-level name the reduced module defines: ``names`` and what they need (``Sharding`` for ``parse``)."""
    kept, _ = shake(module, names)
    out: set[str] = set()
    for node in kept:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            out |= _bound(node)
    return frozenset(out)


def module_imports(module: str) -> list[Item]:
    """The scalelib items a whole module imports (at any depth of its code)."""
    out: list[Item] = []
    for node in ast.walk(parsed(module)):
        if isinstance(node, ast.ImportFrom):
            src = _absolute(module, node)
            if is_lib(src):
                for a in node.names:
                    sub = f"{src}.{a.name}"
                    out.append(Item(sub) if module_file(sub) else Item(src, a.name))
        elif isinstance(node, ast.Import):
            out += [Item(a.name) for a in node.names if is_lib(a.name)]
    return out
