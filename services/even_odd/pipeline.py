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

Run it with ``fw run services.even_odd.pipeline:pipeline``.
"""

from __future__ import annotations

from framework.pipeline import Pipeline, Topic
from framework.serde import AvroSerde, StringSerde, load_schema

pipeline = Pipeline("even-odd")

nums = pipeline.source(
    Topic("numbers", key_serde=StringSerde(), value_serde=AvroSerde(load_schema("demo.Number")))
)

(
    nums.key_by(lambda r: "even" if r["n"] % 2 == 0 else "odd", name="parity")
    .sum(lambda r: r["n"], name="sums")
    .to(Topic("even-odd-sums"))
)

nums.count(name="counts").to(Topic("number-counts"))
