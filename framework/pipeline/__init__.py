"""Pipeline definitions (pure data)."""

from framework.pipeline.calls import AsyncCall, AsyncFunction, Retry
from framework.pipeline.definition import Pipeline, Stream, Table, Topic
from framework.pipeline.functions import CoProcessFunction, ProcessContext, ProcessFunction

__all__ = ["AsyncCall", "AsyncFunction", "CoProcessFunction", "Pipeline", "ProcessContext", "ProcessFunction",
           "Retry", "Stream", "Table", "Topic"]
