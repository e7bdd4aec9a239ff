"""Pipeline definitions (pure data)."""

from framework.pipeline.definition import Pipeline, Stream, Table, Topic
from framework.pipeline.functions import CoProcessFunction, ProcessContext, ProcessFunction

__all__ = ["CoProcessFunction", "Pipeline", "ProcessContext", "ProcessFunction", "Stream", "Table", "Topic"]
