"""The fraud-detection service (process template): run it with ``fw run services.fraud_detection.pipeline:pipeline``."""
