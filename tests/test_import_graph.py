"""No import circle in scalelib: every import between its modules points one way.

The graph is read from the source with ``ast``, not by importing: every ``import`` and ``from ...
import`` anywhere in a module counts (module level, inside functions, under ``if TYPE_CHECKING``),
since each says the module leans on the other. ``from pkg import name`` counts as an edge to
``pkg.name`` when that is a module, else to ``pkg``. A package's ``__init__`` is a module like any
other; the implicit import of a parent package when a child is imported is not an edge (every
child would otherwise sit in a circle with its package).
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_files(package_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every ``.py`` below ``package_dir`` (a package's name is its folder's)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (None outside them)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package_dir: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports anywhere in its source."""
    modules = module_files(package_dir)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (_known(a.name, modules) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    dep = full if full in modules else _known(base, modules)
                    if dep:
                        deps.add(dep)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_scalelib_has_no_import_cycle():
    graph = import_graph(ROOT / "scalelib")
    assert len(graph) > 50 and {"scalelib.parallel.context", "scalelib.parallel.registry"} <= graph[
        "scalelib.parallel.fsdp"]  # the graph is read, not empty
    cycle = find_cycle(graph)
    assert cycle is None, ("import circle: " + " -> ".join(cycle or []) + "; move what the lower module needs "
                           "into a module below both (as parallel/context.py holds PlanContext for the schemes)")


@pytest.mark.parametrize("source, cyclic", [
    ({"a.py": "from pkg import b\n", "b.py": "def f():\n    from pkg.a import x\n"}, True),  # in a function
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
      "b.py": "import pkg.a\n"}, True),  # type-only imports count
    ({"a.py": "from . import b\n", "b.py": "from .c import y\n", "c.py": "from .a import z\n"}, True),  # relative
    ({"a.py": "from pkg import b\n", "b.py": "import os\n", "__init__.py": "from pkg import a\n"}, False),
])
def test_the_cycle_finder_sees_every_kind_of_import(tmp_path, source, cyclic):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in source.items():
        (pkg / name).write_text(text)
    assert (find_cycle(import_graph(pkg)) is not None) == cyclic


def shared_base_names(package_dir: pathlib.Path) -> dict[str, list[str]]:
    """File name -> the modules that carry it, for every name that more than one module below ``package_dir`` has
    (``__init__.py`` aside: each package has one)."""
    seen: dict[str, list[str]] = {}
    for name, path in module_files(package_dir).items():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(name)
    return {base: names for base, names in seen.items() if len(names) > 1}


def test_every_scalelib_module_has_a_name_of_its_own():
    # Two modules called memory.py or cost.py read alike in imports, tracebacks and aliases (``mem``, ``cost``) while
    # they hold different ideas; a name that says which side it is on keeps one word for one thing.
    assert len(module_files(ROOT / "scalelib")) > 50  # the tree is read, not empty
    shared = shared_base_names(ROOT / "scalelib")
    assert not shared, "module file names used more than once in scalelib (give each a name for its own idea): " + \
        "; ".join(f"{base}: {', '.join(names)}" for base, names in sorted(shared.items()))


def test_shared_base_names_finds_a_repeated_name(tmp_path):
    for rel in ("pkg/__init__.py", "pkg/a/__init__.py", "pkg/a/cost.py", "pkg/b/__init__.py", "pkg/b/cost.py",
                "pkg/b/plan.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert shared_base_names(tmp_path / "pkg") == {"cost.py": ["pkg.a.cost", "pkg.b.cost"]}


def imports_between(graph: dict[str, set[str]], importer: str, imported: str) -> set[tuple[str, str]]:
    """(module, what it imports) for every import from package ``importer`` (or its modules) of package
    ``imported`` (or its modules)."""
    def inside(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    return {(m, d) for m, deps in graph.items() if inside(m, importer) for d in deps if inside(d, imported)}


# Each package owns its checks: the collective matmuls' are scalelib/kernels/matmul_selfcheck.py, which the parallel
# selfcheck finds on disk without importing it. parallel takes from kernels only the online-softmax step its ring
# attention shares with flash attention, never the collective matmuls or their checks.
PARALLEL_FROM_KERNELS = {("scalelib.parallel.sequence", "scalelib.kernels.flash_attention")}


def test_parallel_imports_no_collective_matmul_nor_check_from_kernels():
    graph = import_graph(ROOT / "scalelib")
    assert "scalelib.parallel.compare" in graph["scalelib.kernels.matmul_selfcheck"]  # the graph is read, not empty
    extra = imports_between(graph, "scalelib.parallel", "scalelib.kernels") - PARALLEL_FROM_KERNELS
    assert not extra, ("scalelib.parallel imports from scalelib.kernels: " +
                       "; ".join(f"{m} -> {d}" for m, d in sorted(extra)) + " (a package's checks stay in its own "
                       "<subject>_selfcheck module, which scalelib.parallel.selfcheck.suites finds on disk)")


def test_imports_between_sees_packages_and_their_modules(tmp_path):
    for rel, text in {"pkg/__init__.py": "", "pkg/a/__init__.py": "", "pkg/a/x.py": "from pkg import b\n",
                      "pkg/a/y.py": "def f():\n    from pkg.b.z import g\n", "pkg/b/__init__.py": "",
                      "pkg/b/z.py": "from pkg.a import x\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    assert imports_between(graph, "pkg.a", "pkg.b") == {("pkg.a.x", "pkg.b"), ("pkg.a.y", "pkg.b.z")}
    assert imports_between(graph, "pkg.b", "pkg.a") == {("pkg.b.z", "pkg.a.x")}


# ---------------------------------------------------------------------------------------------------- autograder
# The grader's layers, lowest first, as autograder/__init__.py lists them. A module at the package's root belongs to
# none of them and may import nothing of autograder (``__main__`` aside: it is the entry point and calls cli).
AUTOGRADER_LAYERS = ("sandbox", "library", "instructor", "intake", "kernel", "judging", "outputs", "grading", "cli")


def layer_of(module: str, layers: tuple[str, ...]) -> int:
    """1 + the index of ``module``'s sub-package in ``layers``; 0 for a module at the root (the package itself too)."""
    parts = module.split(".")
    return layers.index(parts[1]) + 1 if len(parts) > 1 and parts[1] in layers else 0


def layer_breaches(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import that does not point down: from a layer to a higher one, from a module at the root to anything of
    the package (the root's modules are shared leaves), and every module of a sub-package that is not a layer.
    ``__main__`` modules are entry points and stand above every layer; the package itself is no import (a module
    may read its ``__file__``)."""
    top = next(iter(graph)).split(".")[0]
    out = []
    for module, deps in sorted(graph.items()):
        parts = module.split(".")
        if parts[-1] == "__main__":
            continue
        if len(parts) > 2 and parts[1] not in layers:
            out.append(f"{module} is in no layer ({parts[0]}.{parts[1]} is not one of {', '.join(layers)})")
            continue
        here = layer_of(module, layers)
        for dep in sorted(deps - {top}):
            there = layer_of(dep, layers)
            if here == 0:
                out.append(f"{module} -> {dep} (a module at the root of {top} imports nothing of it)")
            elif there > here:
                out.append(f"{module} -> {dep} (layer {layers[here - 1]} imports {layers[there - 1]}, above it)")
    return out


def test_autograder_has_no_import_cycle_and_every_import_points_down():
    graph = import_graph(ROOT / "autograder")
    assert "autograder.kernel.session" in graph["autograder.judging.judge"]  # the graph is read, not empty
    cycle = find_cycle(graph)
    assert cycle is None, "import circle in autograder: " + " -> ".join(cycle or [])
    breaches = layer_breaches(graph, AUTOGRADER_LAYERS)
    assert not breaches, ("imports against autograder's layers (move what a lower layer needs down, or the module "
                          "up): " + "; ".join(breaches))
    sub_packages = {m.split(".")[1] for m in graph if m.count(".") >= 1 and (ROOT / "autograder" /
                                                                            m.split(".")[1]).is_dir()}
    assert sub_packages == set(AUTOGRADER_LAYERS), sub_packages ^ set(AUTOGRADER_LAYERS)


@pytest.mark.parametrize("source, breach", [
    ({"low/__init__.py": "", "low/a.py": "from pkg.high import b\n", "high/__init__.py": "", "high/b.py": ""},
     "pkg.low.a -> pkg.high.b"),  # a lower layer imports a higher one
    ({"low/__init__.py": "", "low/a.py": "", "shared.py": "from pkg.low import a\n"},
     "pkg.shared -> pkg.low.a"),  # a root module imports a layer
    ({"low/__init__.py": "", "low/a.py": "def f():\n    from pkg.high.b import x\n", "high/__init__.py": "",
      "high/b.py": ""}, "pkg.low.a -> pkg.high.b"),  # in a function too
    ({"low/__init__.py": "", "low/a.py": "", "high/__init__.py": "", "high/b.py": "from pkg.low import a\n",
      "shared.py": "", "__main__.py": "from pkg.high import b\n"}, None),  # down, and the entry point
])
def test_layer_breaches_sees_an_import_that_points_up(tmp_path, source, breach):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in source.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    found = layer_breaches(import_graph(pkg), ("low", "high"))
    assert [b for b in found if breach and b.startswith(breach)] if breach else not found, found


def test_every_autograder_module_has_a_name_of_its_own():
    # ``__main__.py`` is a package's entry point by Python's rule, as ``__init__.py`` is its body
    shared = {base: names for base, names in shared_base_names(ROOT / "autograder").items() if base != "__main__.py"}
    assert len(module_files(ROOT / "autograder")) > 40  # the tree is read, not empty
    assert not shared, "module file names used more than once in autograder: " + \
        "; ".join(f"{base}: {', '.join(names)}" for base, names in sorted(shared.items()))


def test_autograder_docstring_lists_its_layers_in_order():
    doc = ast.get_docstring(ast.parse((ROOT / "autograder" / "__init__.py").read_text())) or ""
    listed = re.findall(r"^\d+\. ``(\w+)``", doc, re.MULTILINE)
    assert tuple(listed) == AUTOGRADER_LAYERS, listed
    for layer in AUTOGRADER_LAYERS:  # each layer says what it holds
        assert ast.get_docstring(ast.parse((ROOT / "autograder" / layer / "__init__.py").read_text())), layer
