"""Windows: their definitions, what users write (the logic per task is an operator:
``framework.operators.windows``)."""

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
