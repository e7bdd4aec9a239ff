"""The public surface is explicit: everything in ``framework.__all__`` and nothing private;
and the packages behind it keep their layers."""

import itertools

import framework
from tests.import_graph import cycle_through, cycles, package_graph


def test_all_is_sorted_and_complete() -> None:
    assert framework.__all__ == sorted(framework.__all__)
    public = {n for n in vars(framework) if not n.startswith("_") and n[0].isupper() or n == "load_schema"}
    modules = {n for n, v in vars(framework).items() if type(v).__name__ == "module"}
    assert public - modules == set(framework.__all__)


def test_layers_keep_their_imports() -> None:
    """Only framework/kafka imports confluent_kafka; only state/rocksdb imports rocksdict."""
    from pathlib import Path

    root = Path(framework.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(root).as_posix()
        if "import confluent_kafka" in text or "from confluent_kafka" in text:
            assert rel.startswith("kafka/"), f"{rel} imports confluent_kafka"
        if "import rocksdict" in text or "from rocksdict" in text:
            assert rel.startswith("state/rocksdb/"), f"{rel} imports rocksdict"
        if "import pyspark" in text or "from pyspark" in text:
            assert rel.startswith("replay/"), f"{rel} imports pyspark"


def _cycle_report(graph: dict[str, dict[str, list[str]]], component: list[str]) -> str:
    """The edges of one cycle of ``component``, each with the imports that make it."""
    path = cycle_through(graph, component)
    edges = [f"  {a} -> {b}: {', '.join(graph[a][b])}" for a, b in itertools.pairwise(path)]
    return "\n".join([f"{' -> '.join(path)}", *edges])


def test_packages_import_no_cycle() -> None:
    """No package of framework imports itself back through others (every import statement:
    module level, in functions, under TYPE_CHECKING). Layers point down (docs/architecture.md):
    the Kafka clients know bytes and headers, not the engine; the operators see their task
    through a protocol of their own, not the engine that compiles them."""
    graph = package_graph()
    found = cycles(graph)
    assert found == [], "package import cycles:\n" + "\n".join(_cycle_report(graph, c) for c in found)


def test_the_package_cycle_check_names_the_imports() -> None:
    graph = {"p.a": {"p.b": ["p/a/x.py:3"]}, "p.b": {"p.c": ["p/b/y.py:5", "p/b/z.py:9"]},
             "p.c": {"p.a": ["p/c/w.py:1"]}, "p.d": {"p.a": ["p/d/v.py:2"]}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert _cycle_report(graph, ["p.a", "p.b", "p.c"]).splitlines() == [
        "p.a -> p.b -> p.c -> p.a", "  p.a -> p.b: p/a/x.py:3", "  p.b -> p.c: p/b/y.py:5, p/b/z.py:9",
        "  p.c -> p.a: p/c/w.py:1"]
