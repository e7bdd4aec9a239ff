"""The only package that imports confluent_kafka: clients, admin helpers, error classification."""
