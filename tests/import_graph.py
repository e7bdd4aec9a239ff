"""The import graph of ``framework/``, read from the source with ``ast``: every import
statement counts, wherever it stands (module level, inside functions, under TYPE_CHECKING),
since each is a dependency of the design. ``tests/unit/test_imports.py`` checks the graph of
modules, ``tests/unit/test_public_api.py`` the graph of packages (docs/architecture.md,
"Layers")."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import framework

ROOT = Path(framework.__file__).resolve().parent
REPO = ROOT.parent

Site = str  # "framework/kafka/clients.py:28": where an import stands


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> its file, for every module under ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(path: Path, module: str) -> Iterator[tuple[str, list[str], int]]:
    """``(imported module, names, line)`` of every import in the file, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            yield base, [alias.name for alias in node.names], node.lineno


def _targets(known: Mapping[str, Path], base: str, names: list[str]) -> set[str]:
    """The framework modules an import names: ``from a import b`` names ``a.b`` when that is a
    module, else ``a``."""
    found = set()
    each: list[str | None] = [*names] or [None]  # ``import a``: no names, the module itself
    for name in each:
        full = f"{base}.{name}" if name else base
        target = full if full in known else base if base in known else None
        if target is not None:
            found.add(target)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module -> the framework modules it imports."""
    known = modules()
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, path in known.items():
        for base, names, _ in imports(path, module):
            graph[module] |= _targets(known, base, names) - {module}
    return graph


def package_of(module: str) -> str:
    """``framework.kafka.clients`` -> ``framework.kafka``; a top-level module
    (``framework.errors``) is its own node, and ``framework`` (its ``__init__``) too."""
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, dict[str, list[Site]]]:
    """Package -> the framework packages it imports -> where (``file:line``), in file order."""
    known = modules()
    graph: dict[str, dict[str, list[Site]]] = {package_of(m): {} for m in known}
    for module, path in sorted(known.items()):
        source = package_of(module)
        for base, names, line in imports(path, module):
            for target in sorted({package_of(t) for t in _targets(known, base, names)} - {source}):
                graph[source].setdefault(target, []).append(f"{path.relative_to(REPO)}:{line}")
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycle_through(graph: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """One cycle inside a strongly connected ``component``, as the nodes it passes (the first
    one again at the end): the shortest way back to its first node (breadth first)."""
    start, inside = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(set(graph.get(v, ())) & inside):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise ValueError(f"{component} is not strongly connected")
