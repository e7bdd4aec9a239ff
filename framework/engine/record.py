"""The record every engine but the Kafka runtime hands to its tasks.

A task reads records through ``framework.records.InputRecord``: the Kafka runtime
passes ``confluent_kafka.Message`` objects as they come; the TestDriver and the Spark job
build ``Record``s (``framework.records``, where an operator can make them too), which have
the same methods.
"""

from framework.records import Record

__all__ = ["Record"]
