"""Dead letters through the TestDriver: the same origin headers and readable values as a
live service (tests/integration/test_dead_letters.py runs the same pipeline on the broker),
and the dead-letter topic read through ``output``."""

from __future__ import annotations

import os

import pytest

from framework.testing import TestDriver


@pytest.fixture
def pipeline():  # type: ignore[no-untyped-def]
    os.environ.setdefault("FW_TEST_SUFFIX", "td")
    from tests.integration.pipelines import traced_orders
    return traced_orders()


def test_dead_letters_name_their_input_record_at_any_depth(pipeline) -> None:  # type: ignore[no-untyped-def]
    d = TestDriver(pipeline, partitions=2)
    source, dead = pipeline.sources()[0].topic.name, pipeline.dead_letter.name
    d.pipe_raw(source, b'{"user": "ann", "amount": 5}', key=b"k", timestamp=10, partition=0)
    d.pipe_raw(source, b"not json", key=b"k", timestamp=11, partition=0)
    d.pipe_raw(source, b'{"user": "bob", "amount": -1}', key=b"k", timestamp=12, partition=0)
    d.pipe_raw(source, b'{"user": "cyd", "amount": 13}', key=b"k", timestamp=13, partition=0)
    letters = {r.timestamp: r for r in d.output(dead)}
    assert sorted(letters) == [11, 12, 13]
    headers = {ts: dict(r.headers) for ts, r in letters.items()}
    assert [(h["fw.origin.topic"], h["fw.origin.partition"], h["fw.origin.offset"]) for _, h in sorted(headers.items())] \
        == [(source.encode(), b"0", b"1"), (source.encode(), b"0", b"2"), (source.encode(), b"0", b"3")]
    assert [h["fw.step"] for _, h in sorted(headers.items())] == [b"orders", b"check", b"band"]
    assert [h["fw.source.topic"] for _, h in sorted(headers.items())] == [
        source.encode(), f"{pipeline.name}-by-user-repartition".encode(), f"{pipeline.name}-by-band-repartition".encode()]
    assert [(r.key, r.value) for _, r in sorted(letters.items())] == [
        (b"k", b"not json"), (b'"bob"', {"user": "bob", "amount": -1}), (b'"medium"', {"user": "cyd", "amount": 13})]
    assert [h["fw.value.encoding"] for _, h in sorted(headers.items())] == [b"original", b"json", b"json"]
    message = headers[13]["fw.error.message"].decode()
    through = f"{pipeline.name}-by-band-repartition[{headers[13]['fw.source.partition'].decode()}]@" \
              f"{headers[13]['fw.source.offset'].decode()}"
    assert message.startswith(f"{source}[0]@3 (through {through}) in step 'band': ValueError: unlucky amount 13 Fix: ")


def _fail(value: object) -> object:
    raise ValueError("no")


def test_a_value_without_a_json_form_is_a_dead_letter_in_repr() -> None:
    from framework import Pipeline, Topic
    from framework.serde import JsonSerde

    p = Pipeline("reprs", partitions=1)
    p.source(Topic("in", value_serde=JsonSerde())).map(lambda v: {"raw": v["s"].encode(), "n": v["n"]}) \
        .key_by(lambda v: v["n"], name="by-n").map(_fail, name="fail").to(Topic("out"))
    d = TestDriver(p, partitions=1)
    d.pipe("in", {"s": "é", "n": 1}, key="k")
    [letter] = d.output("reprs-dead-letter")
    assert letter.value == "{'raw': b'\\xc3\\xa9', 'n': 1}"
    assert dict(letter.headers)["fw.value.encoding"] == b"repr"
