"""The public surface is explicit: everything in ``framework.__all__`` and nothing private."""

import framework


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
