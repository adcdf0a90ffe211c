"""No import circle in ``fairsim/`` or ``calibration/``.

The graph is read from the source with ``ast``: an edge A -> B for every ``import B`` /
``from B import x`` in module A, at module level and inside functions alike (a function-level
import is a dependency all the same, only a later one; a circle through it is still two modules
that cannot be understood, or moved, one without the other). ``from P import x`` where ``P.x``
is a module counts as an import of ``P.x``. Not counted: the package ``__init__`` that Python
runs before a submodule (a package that re-exports its submodules would otherwise form a circle
with each of them), and imports by name at run time (``importlib.import_module``, e.g. the lazy
exports of ``fairsim/sweep/__init__.py``), which ``ast`` cannot see.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fairsim", "calibration")


def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted name -> file of every module of ``packages`` under ``root`` (a package is its
    ``__init__.py``)."""
    found: dict[str, Path] = {}
    for package in packages:
        # A Cython module (.pyx, built into an extension) is a module too: imports of it name it.
        for path in sorted([*(root / package).rglob("*.py"), *(root / package).rglob("*.pyx")]):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` (its source at ``path``) imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    source = path.read_text()
    if path.suffix == ".pyx":  # Cython: not Python syntax; its Python-level import lines are
        source = "\n".join(line.strip() for line in source.splitlines()
                           if re.match(r"\s*(from\s+\S+\s+import\s|import\s)", line)
                           and not line.lstrip().startswith("from libc") and "cimport" not in line)
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` names a.b.c; keep the longest prefix that is one of ours.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                out.add(target)
    return out


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules it imports, for every module of ``packages``."""
    modules = module_names(root, packages)
    return {name: imported(name, path, modules) for name, path in modules.items()}


def tangles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each module of one can reach
    every other through imports), sorted (Tarjan's algorithm; iterative, sorted, so deterministic)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per tangle (``tangles``), as a shortest path ``[a, b, ..., a]`` through its first module."""
    return [path_through(graph, component) for component in tangles(graph)]


def path_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest circle from the first module of ``component`` back to it (breadth-first)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle through {component}")  # a component of >1 always has one


def test_no_import_circle() -> None:
    graph = import_graph()
    found = [f"{' -> '.join(path_through(graph, c))} (modules tangled: {', '.join(c)})" for c in tangles(graph)]
    assert not found, "import circles:\n" + "\n".join(found)


def test_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    # A function-level import (fairsim/cli.py imports the accept command inside build_parser).
    assert "fairsim.accept" in graph["fairsim.cli"]
    # `from fairsim.sim import engine`-style and `from P import name` resolve to the module.
    assert "fairsim.sim.engine" in graph["fairsim.sim.decode_fast"]
    assert "fairsim.sim" not in graph["fairsim.sim.decode_fast"]


def test_a_planted_circle_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")  # re-export: not a circle
    (pkg / "a.py").write_text("import pkg.sub.b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")  # function level, relative
    (pkg / "c.py").write_text("from pkg import a\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # on no circle
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.sub"] == {"pkg.sub.b"}
    assert circles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
