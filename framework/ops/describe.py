"""``fw describe``: a service's topology (``Pipeline.describe()``) in the format asked for.

The data and its drawings are ``framework.pipeline.topology``'s; this module names the
formats and renders one. Nothing here reaches a cluster: the topology is the code's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from framework.pipeline import topology as T
from framework.pipeline.definition import Pipeline


def _json(topology: Mapping[str, Any]) -> str:
    return json.dumps(topology, indent=2, ensure_ascii=False)


FORMATS: dict[str, Callable[[Mapping[str, Any]], str]] = {"text": T.text, "json": _json, "mermaid": T.mermaid}
"""Each format ``fw describe --format`` takes, with what renders it."""


def render(pipeline: Pipeline, fmt: str = "text") -> str:
    """``pipeline``'s topology as ``fmt`` (one of ``FORMATS``)."""
    return FORMATS[fmt](pipeline.describe())
