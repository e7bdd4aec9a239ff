"""Hashtag counts: a stateless flat_map, a re-key and a rolling count.

Reads ``tweets`` (JSON values ``{"text": ...}``; the key is not used), extracts the
hashtags of each text (whitespace-separated words starting with ``#``, lowercased, with
trailing punctuation removed), re-keys by hashtag through the ``by-hashtag`` repartition
topic and emits the running count per hashtag to ``hashtag-counts`` (key: the hashtag,
value: its count so far as JSON).

``build_pipeline(suffix)`` builds the same pipeline with the suffix appended to the service
name and every topic name. Run it with ``fw run services.hashtags.pipeline:pipeline``.
"""

from __future__ import annotations

import string
from typing import Any

from framework.pipeline import Pipeline, Topic


def hashtags(tweet: dict[str, Any]) -> list[str]:
    """The hashtags of a tweet, lowercased: ``"Go #Kafka, #kafka!"`` -> ``["#kafka", "#kafka"]``."""
    words = (w.rstrip(string.punctuation) for w in str(tweet.get("text") or "").lower().split())
    return [w for w in words if w.startswith("#") and len(w) > 1]


def build_pipeline(suffix: str = "") -> Pipeline:
    """The hashtags pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"hashtags{suffix}")
    (
        p.source(Topic(f"tweets{suffix}"), name="tweets")
        .flat_map(hashtags, name="hashtags")
        .key_by(lambda tag: tag, name="by-hashtag")
        .count(name="counts")
        .to(Topic(f"hashtag-counts{suffix}"), name="to-counts")
    )
    return p


pipeline = build_pipeline()
