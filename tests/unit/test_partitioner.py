"""Kafka's default partitioner: ``murmur2`` must equal the Java client's ``Utils.murmur2`` and
``partition_for`` must equal ``toPositive(murmur2(key)) % partitions``, so the TestDriver and
the Spark replay put every key in the partition a Kafka producer would."""

from __future__ import annotations

import random

import pytest

from framework.engine.partitioner import murmur2, partition_for

# Kafka's own test vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
# testMurmur2 (the byte arrays there are the UTF-8 encodings of these strings).
KAFKA_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]


def _java_int(x: int) -> int:
    """Wrap to a Java ``int`` (signed 32-bit, two's complement)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _ushr(x: int, n: int) -> int:
    """Java's ``x >>> n`` on an ``int``."""
    return _java_int((x & 0xFFFFFFFF) >> n)


def java_murmur2(data: bytes) -> int:
    """A line-by-line transliteration of Java's ``Utils.murmur2`` on signed ints (reference)."""
    length = len(data)
    seed = _java_int(0x9747B28C)
    m = 0x5BD1E995
    r = 24
    h = _java_int(seed ^ length)
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (data[i4] & 0xFF) + ((data[i4 + 1] & 0xFF) << 8) + ((data[i4 + 2] & 0xFF) << 16) \
            + ((data[i4 + 3] & 0xFF) << 24)
        k = _java_int(k)
        k = _java_int(k * m)
        k ^= _ushr(k, r)
        k = _java_int(k * m)
        h = _java_int(h * m)
        h = _java_int(h ^ k)
    rest = length % 4
    base = length & ~3
    # the switch falls through: case 3, then 2, then 1
    if rest >= 3:
        h = _java_int(h ^ ((data[base + 2] & 0xFF) << 16))
    if rest >= 2:
        h = _java_int(h ^ ((data[base + 1] & 0xFF) << 8))
    if rest >= 1:
        h = _java_int(h ^ (data[base] & 0xFF))
        h = _java_int(h * m)
    h = _java_int(h ^ _ushr(h, 13))
    h = _java_int(h * m)
    h = _java_int(h ^ _ushr(h, 15))
    return h


@pytest.mark.parametrize(("text", "expected"), KAFKA_VECTORS)
def test_murmur2_equals_kafka_utils_murmur2_test_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode("utf-8")) == expected


def test_murmur2_returns_a_signed_32_bit_int() -> None:
    rng = random.Random(7)
    for _ in range(500):
        data = rng.randbytes(rng.randrange(0, 40))
        h = murmur2(data)
        assert -(1 << 31) <= h < (1 << 31)


def test_murmur2_equals_a_java_transliteration_on_random_bytes_of_every_tail_length() -> None:
    rng = random.Random(12345)
    for length in range(33):  # every remainder mod 4, including the empty key
        for _ in range(25):
            data = rng.randbytes(length)  # high bytes too: Java's signed bytes are masked
            assert murmur2(data) == java_murmur2(data), data


def test_murmur2_of_non_ascii_utf8_bytes_matches_the_java_transliteration() -> None:
    for text in ["é", "ключ", "日本語キー", "emoji-🎉", "\u00ff\u00fe"]:
        data = text.encode("utf-8")
        assert murmur2(data) == java_murmur2(data)


@pytest.mark.parametrize(("text", "expected"), KAFKA_VECTORS)
@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 7, 12, 100])
def test_partition_for_is_to_positive_murmur2_modulo_partitions(text: str, expected: int,
                                                                partitions: int) -> None:
    # Kafka: Utils.toPositive(n) = n & 0x7fffffff (not abs: abs(MIN_VALUE) is negative).
    assert partition_for(text.encode(), partitions) == (expected & 0x7FFFFFFF) % partitions


def test_partition_for_uses_to_positive_not_abs_for_negative_hashes() -> None:
    # "21" hashes to -973932308; abs() would give a different partition for 7 partitions.
    h = murmur2(b"21")
    assert h < 0
    assert (h & 0x7FFFFFFF) % 7 != abs(h) % 7
    assert partition_for(b"21", 7) == (h & 0x7FFFFFFF) % 7


@pytest.mark.parametrize("partitions", [1, 2, 3, 4, 8, 13])
def test_partition_for_is_in_range_and_stable(partitions: int) -> None:
    rng = random.Random(partitions)
    keys = [rng.randbytes(rng.randrange(0, 24)) for _ in range(400)]
    first = [partition_for(k, partitions) for k in keys]
    assert all(0 <= p < partitions for p in first)
    assert [partition_for(bytes(k), partitions) for k in keys] == first  # same bytes, same partition


def test_partition_for_spreads_keys_over_every_partition() -> None:
    counts = [0] * 4
    for i in range(1000):
        counts[partition_for(f"key-{i}".encode(), 4)] += 1
    assert all(c > 150 for c in counts), counts


def test_one_partition_always_gives_partition_zero() -> None:
    assert {partition_for(f"k{i}".encode(), 1) for i in range(100)} == {0}
