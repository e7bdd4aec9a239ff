"""Event time: timestamps, watermark strategies, task clocks and timers."""

from framework.time.watermarks import MAX_WATERMARK, NO_WATERMARK, WatermarkStrategy

__all__ = ["MAX_WATERMARK", "NO_WATERMARK", "WatermarkStrategy"]
