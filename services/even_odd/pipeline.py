"""Even/odd sums: the canonical exactly-once recovery example.

Every record of ``numbers`` (key: a string, value: Avro ``demo.Number``) feeds two
running aggregates:

- ``sums``: re-keyed by parity (``"even"`` / ``"odd"``) through the ``parity``
  repartition topic, the running sum of ``n`` per parity, to ``even-odd-sums``;
- ``counts``: the running count of records per source key, to ``number-counts``.

The result is easy to check from the input alone: the last ``even`` and ``odd`` sums must
equal the sums of the even and odd numbers produced, and each key's last count the
number of records with that key. Kill the service at any point (even with SIGKILL),
restart it, and under ``exactly_once`` the outputs and the state are those of a run
without the crash: no number is lost and none is added twice. That makes this pipeline
the reference for recovery tests.

``build_pipeline(suffix)`` builds the same pipeline with the suffix appended to the service
name and every topic name. Run it with ``fw run services.even_odd.pipeline:pipeline``.
"""

from __future__ import annotations

from framework.pipeline import Pipeline, Topic
from framework.serde import AvroSerde, StringSerde, load_schema


def build_pipeline(suffix: str = "") -> Pipeline:
    """The even/odd pipeline; ``suffix`` is appended to the service and topic names."""
    p = Pipeline(f"even-odd{suffix}")
    nums = p.source(
        Topic(f"numbers{suffix}", key_serde=StringSerde(), value_serde=AvroSerde(load_schema("demo.Number"))),
        name="numbers",
    )
    (
        nums.key_by(lambda r: "even" if r["n"] % 2 == 0 else "odd", name="parity")
        .sum(lambda r: r["n"], name="sums")
        .to(Topic(f"even-odd-sums{suffix}"), name="to-sums")
    )
    nums.count(name="counts").to(Topic(f"number-counts{suffix}"), name="to-counts")
    return p


pipeline = build_pipeline()
