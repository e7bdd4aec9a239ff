"""Shared fixtures. Integration tests get the real broker through ``kafka_bootstrap``
(``FW_BOOTSTRAP_SERVERS`` when set, the broker ``scripts/test`` started, or one started
through the same code as ``fw broker start`` and stopped at the end) and fresh topic and
group names through ``unique``: the fixtures the framework gives every project."""

from framework.testing.fixtures import kafka_bootstrap, unique

__all__ = ["kafka_bootstrap", "unique"]
