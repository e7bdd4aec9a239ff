"""Operations on running services and their topics, behind ``fw topics``, ``fw group`` and
``fw state`` (framework/cli/ops.py renders them):

- ``topics``: list, describe and create topics; ``tail``: read records and decode them with
  a service's serdes, an Avro schema, or as raw bytes;
- ``groups``: a service's consumer group (members, committed offsets, lag) and its reset;
- ``state``: a store's entries, from a stopped member's local RocksDB or rebuilt from the
  store's changelog;
- ``entries``: store keys and values decoded (docs/state-format.md);
- ``targets``: the service a command names (``module:pipeline``) and its settings.

The Kafka calls are in ``framework.kafka.inspect`` and ``framework.kafka.groups``, the
read-only RocksDB access in ``framework.state.rocksdb.readonly``.
"""
