"""The click-sessions service (windowed template): run it with ``fw run services.click_sessions.pipeline:pipeline``."""
