"""Seeing a running service: Prometheus metrics, health, readiness, status and the status
page (docs/observability.md)."""
