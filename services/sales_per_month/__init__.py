"""The sales-per-month service (keyed template): run it with ``fw run services.sales_per_month.pipeline:pipeline``."""
