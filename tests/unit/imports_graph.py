"""Import statements read from the source (AST) and the import graph of a package, for the
structure tests (``test_layering``, ``test_structure``).

Reading the source rather than importing finds every import: those inside functions and under
``if TYPE_CHECKING:`` too, which importing a module never runs but which still tie the modules
together (a lazy import is a cycle put off until the call, and a type-only one a cycle in what
a reader has to hold in mind).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["cycles", "import_graph", "import_statements", "imports_in", "package_modules"]


def import_statements(path: Path, package: str | None = None) -> list[tuple[int, str, list[str]]]:
    """Every import statement in a source file, wherever it is: its line, the module it names
    and the names it imports from that module (none for ``import m``).

    A relative import is resolved against ``package`` (the package the file is in) when given;
    without it, it is read as ``partsync.<module>``."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names = [a.name for a in node.names]
            if package is None:
                found.append((node.lineno, "partsync." + (node.module or ""), names))
            else:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
                found.append((node.lineno, module, names))
    return found


def imports_in(path: Path) -> list[tuple[int, str]]:
    """Every imported module name in a source file, wherever the import statement is."""
    return [(line, module) for line, module, _ in import_statements(path)]


def package_modules(package_dir: Path) -> dict[str, Path]:
    """The modules of the package in ``package_dir`` (and its subpackages), by dotted name."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Which of the package's modules each of its modules imports, counting imports inside
    functions and under ``if TYPE_CHECKING:``. ``from a.b import c`` is an import of module
    ``a.b.c`` when that is a module, else of ``a.b``. Importing a module also runs its parent
    packages' ``__init__``; that is not counted (a package re-exporting its modules would be
    a cycle with every one of them)."""
    modules = package_modules(package_dir)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for _, module, names in import_statements(path, package):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            if len(targets) < len(names) or not names:
                targets.append(module)  # a name defined in the module itself, or ``import m``
            edges.update(t for t in targets if t in modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The import cycles: the strongly connected components of more than one module (Tarjan's
    algorithm, iterative), each as the set of its modules, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return sorted(found, key=sorted)
