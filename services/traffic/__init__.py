"""The traffic service (windowed template): run it with ``fw run services.traffic.pipeline:pipeline``."""
