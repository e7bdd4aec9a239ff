"""Pipeline definitions (pure data)."""

from framework.pipeline.definition import Pipeline, Stream, Topic
from framework.pipeline.steps import ProcessFunction

__all__ = ["Pipeline", "ProcessFunction", "Stream", "Topic"]
