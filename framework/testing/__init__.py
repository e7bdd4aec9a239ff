"""Testing a pipeline without a broker."""

from framework.testing.driver import TestDriver, TestRecord

__all__ = ["TestDriver", "TestRecord"]
