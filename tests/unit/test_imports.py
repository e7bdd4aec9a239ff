"""The import structure: no module of ``framework/`` imports itself back through others (the
layers of docs/architecture.md), and the services use only the public API. (No package does
either: tests/unit/test_public_api.py.)"""

from __future__ import annotations

from tests.import_graph import REPO, cycles, imports, module_graph


def test_framework_has_no_import_cycles() -> None:
    found = cycles(module_graph())
    assert found == [], "import cycles (each list imports itself back): " + "; ".join(map(str, found))


def test_the_cycle_check_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_pipeline_definitions_do_not_know_their_operators() -> None:
    """Definitions are data; the compile step (framework.engine.compile) maps them to operators."""
    graph = module_graph()
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
        for base, names, _ in imports(path, "services." + path.parent.name):
            if base != "framework" and not base.startswith("framework."):
                continue
            for name in names or [""]:
                if not _public(base, name):
                    private.append(f"{path.relative_to(REPO)}: from {base} import {name}")
    assert private == [], "services must use framework's public API:\n" + "\n".join(private)
