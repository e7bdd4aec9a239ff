"""The orders-enrich service (enrich template): run it with ``fw run services.orders_enrich.pipeline:pipeline``."""
