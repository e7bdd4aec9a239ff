"""The import structure: no module of ``framework/`` imports itself back through others (the
layers of docs/architecture.md), and the services use only the public API."""

from __future__ import annotations

import ast
from pathlib import Path

import framework

ROOT = Path(framework.__file__).resolve().parent
REPO = ROOT.parent


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str) -> list[tuple[str, list[str]]]:
    """``(imported module, names)`` of every import in the file, wherever it is (module level,
    inside functions, under TYPE_CHECKING): each is a dependency of the design."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names]))
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the framework modules it imports (``from a import b`` names ``a.b`` when
    that is a module, else ``a``)."""
    modules = _modules(ROOT)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for base, names in _imports(path, module):
            for name in names or [None]:
                full = f"{base}.{name}" if name else base
                target = full if full in modules else base if base in modules else None
                if target is not None and target != module:
                    graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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


def test_framework_has_no_import_cycles() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles (each list imports itself back): " + "; ".join(map(str, cycles))


def test_the_cycle_check_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_pipeline_definitions_do_not_know_their_operators() -> None:
    """Definitions are data; the compile step (framework.engine.compile) maps them to operators."""
    graph = _graph()
    for module in ("framework.pipeline.steps", "framework.pipeline.definition", "framework.pipeline.functions"):
        assert not {m for m in graph[module] if m.startswith(("framework.operators", "framework.engine"))}, module


def _public(module: str, name: str) -> bool:
    """A name is public when the package it is imported from exports it in ``__all__``."""
    if module == "framework" or module.startswith("framework.") and module.count(".") == 1:
        package = __import__(module, fromlist=["__all__"])
        return name in getattr(package, "__all__", ())
    return False


def test_services_import_nothing_private() -> None:
    private = []
    for path in sorted((REPO / "services").rglob("*.py")):
        for base, names in _imports(path, "services." + path.parent.name):
            if base != "framework" and not base.startswith("framework."):
                continue
            for name in names or [""]:
                if not _public(base, name):
                    private.append(f"{path.relative_to(REPO)}: from {base} import {name}")
    assert private == [], "services must use framework's public API:\n" + "\n".join(private)
