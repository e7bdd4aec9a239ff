"""Operator logic: pure functions of records, state and time; no I/O, no Kafka, no Spark."""
