"""Pipeline definitions (pure data)."""

from framework.pipeline.definition import Pipeline, Stream, Topic
from framework.pipeline.steps import CoProcessFunction, ProcessFunction

__all__ = ["CoProcessFunction", "Pipeline", "ProcessFunction", "Stream", "Topic"]
