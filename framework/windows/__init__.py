"""Windows: definitions (what users write) and their operators (the logic per task)."""

from framework.windows.definitions import (
    CountTrigger,
    CountWindows,
    GlobalWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    Window,
)

__all__ = ["CountTrigger", "CountWindows", "GlobalWindows", "SessionWindows", "SlidingWindows",
           "TumblingWindows", "Window"]
