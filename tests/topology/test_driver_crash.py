"""Crash and restore in the TestDriver (``auto_checkpoint=False``): a crash loses everything
since the last checkpoint, the state comes back from the changelogs, the uncommitted input is
processed again, and the end result equals a run without the crash (exactly once)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import pytest

from framework.pipeline import Pipeline, ProcessFunction, Topic
from framework.serde import JsonSerde
from framework.state.cache import decode_value
from framework.testing import TestDriver, TestRecord

STORES = ["count", "total", "recent"]


class Recent(ProcessFunction):
    """List, value and map state with deletes: a negative value clears the key's list."""

    def open(self, ctx):  # type: ignore[no-untyped-def]
        self.items = ctx.list_state("items")
        self.seen = ctx.value_state("seen", default=0)
        self.signs = ctx.map_state("signs")

    def process(self, key, value, ctx):  # type: ignore[no-untyped-def]
        self.seen.set(self.seen.get() + 1)
        sign = "neg" if value < 0 else "pos"
        self.signs.put(sign, self.signs.get(sign, 0) + 1)
        if value < 0:
            self.items.clear()
            self.signs.remove("pos")
        else:
            self.items.add(value)
            self.items.update(self.items.get()[-4:])
        ctx.emit({"items": self.items.get(), "seen": self.seen.get(),
                  "signs": {k.decode(): n for k, n in self.signs.items()}})


def build() -> Pipeline:
    p = Pipeline("crashy")
    s = p.source(Topic("in"))
    s.map(lambda e: e["i"], name="ids").to(Topic("ids"))  # stateless, straight from the source
    by_user = s.key_by(lambda e: e["user"], name="by-user")
    by_user.count(name="count").to(Topic("counts"))
    by_user.sum(lambda e: e["x"], name="total").to(Topic("totals"))
    by_user.map(lambda e: e["x"]).process(Recent(), name="recent").to(Topic("recent"))
    # a second hop: re-key the running counts by parity
    by_user.count(name="count2").key_by(lambda n: n % 2, name="by-parity").count(name="parity").to(
        Topic("parity", key_serde=JsonSerde()))
    return p


ALL_STORES = ["count", "total", "recent", "count2", "parity"]
KEYED_OUTPUTS = ["counts", "totals", "recent", "parity"]


def records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        if rng.random() < 0.04:
            out.append({"i": i, "bad": True})  # no "user": key_by raises -> dead letter
        else:
            out.append({"i": i, "user": f"u{rng.randrange(6)}", "x": rng.randrange(-10, 30)})
    return out


def per_key(recs: list[TestRecord]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = defaultdict(list)
    for r in recs:
        out[r.key].append(r.value)
    return dict(out)


def drain(d: TestDriver) -> None:
    """Process and commit until nothing is left (each round moves records one hop)."""
    for _ in range(4):
        d.run()
        d.checkpoint()


def pipe(d: TestDriver, recs: list[dict[str, Any]]) -> None:
    """Keyed by user, so each user's records are in one source partition: Kafka orders records
    within a partition only, and re-processing after a crash goes partition by partition."""
    for r in recs:
        d.pipe("in", r, key=r.get("user", f"bad{r['i']}"), timestamp=r["i"])


def snapshot(d: TestDriver) -> dict[str, Any]:
    """Every observable result: per-key output sequences, keyless outputs as a multiset, dead
    letters, and each store's committed contents."""
    return {
        "keyed": {t: per_key(d.output(t)) for t in KEYED_OUTPUTS},
        "ids": sorted(d.values("ids")),
        "dead": sorted((m.value(), dict(m.headers() or ())["fw.source.offset"]) for m in d.dead_letters()),
        "stores": durable_state(d),
    }


def durable_state(d: TestDriver) -> dict[str, dict[bytes, Any]]:
    """Each store's contents in the backend (what a checkpoint made durable), over all partitions."""
    out: dict[str, dict[bytes, Any]] = {}
    for store in ALL_STORES:
        merged: dict[bytes, Any] = {}
        for p in range(d.partitions):
            part = d.backend.open(d.pipeline.name, store, p)
            merged.update({k: decode_value(v) for k, v in part.iter_range(b"", None)})
        out[store] = merged
    return out


def reference(recs: list[dict[str, Any]], partitions: int) -> TestDriver:
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs)
    drain(d)
    return d


def users(recs: list[dict[str, Any]]) -> set[str]:
    return {r["user"] for r in recs if "user" in r}


N = 60
CRASH_POINTS = [
    # (records before the checkpoint, how that checkpoint is taken, records piped before the crash)
    (0, "none", 0),        # crash before anything happened
    (0, "none", 25),       # crash before the first checkpoint: everything is redone
    (20, "drain", 0),      # crash right after a checkpoint: nothing to redo
    (20, "drain", 1),
    (20, "drain", 25),
    (20, "once", 25),      # one checkpoint: repartitioned records visible, processed after it
    (35, "once", 0),
    (59, "drain", 1),
    (60, "once", 0),       # everything piped, the second hop not yet committed
]


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize(("before", "mode", "during"), CRASH_POINTS)
def test_a_crash_gives_the_outputs_and_state_of_a_run_without_it(partitions: int, before: int, mode: str,
                                                                  during: int) -> None:
    recs = records(N, seed=before * 7 + during)
    expected = snapshot(reference(recs, partitions))

    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs[:before])
    if mode == "drain":
        drain(d)
    elif mode == "once":
        d.checkpoint()
    committed = snapshot(d)
    pipe(d, recs[before:before + during])
    d.run()
    d.crash()
    assert snapshot(d) == committed  # nothing of the aborted interval is visible or durable
    pipe(d, recs[before + during:])
    drain(d)

    assert snapshot(d) == expected
    for u in users(recs):
        assert d.state("count", u) == expected["keyed"]["counts"][u][-1]
        assert d.state("total", u) == expected["keyed"]["totals"][u][-1]
        assert d.state("recent", u, state="items") == (expected["keyed"]["recent"][u][-1]["items"] or None)


@pytest.mark.parametrize("partitions", [1, 2])
def test_outputs_of_the_aborted_interval_are_never_committed(partitions: int) -> None:
    recs = records(40, seed=11)
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs[:20])
    drain(d)
    before = {t: d.output(t) for t in [*KEYED_OUTPUTS, "ids"]}
    pipe(d, recs[20:])
    d.run()
    d.run()
    assert {t: d.output(t) for t in before} == before  # uncommitted outputs are invisible
    d.crash()
    assert {t: d.output(t) for t in before} == before
    drain(d)
    after = {t: d.output(t) for t in before}
    # committed records never change: each partition's log before is a prefix of it after
    for t, recs_before in before.items():
        for p in range(partitions):
            old = [r for r in recs_before if r.partition == p]
            assert [r for r in after[t] if r.partition == p][: len(old)] == old
    expected = snapshot(reference(recs, partitions))
    assert snapshot(d)["keyed"] == expected["keyed"]
    assert snapshot(d)["ids"] == expected["ids"] == list(range(40))


@pytest.mark.parametrize("partitions", [1, 3])
def test_repeated_crashes_still_give_the_crash_free_result(partitions: int) -> None:
    recs = records(80, seed=5)
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    rng = random.Random(9)
    i = 0
    while i < len(recs):
        step = rng.randrange(1, 12)
        pipe(d, recs[i:i + step])
        i += step
        action = rng.random()
        if action < 0.3:
            d.checkpoint()
        elif action < 0.5:
            drain(d)
        elif action < 0.8:
            d.crash()
            if rng.random() < 0.3:
                d.crash()  # a crash during recovery
    drain(d)
    assert snapshot(d) == snapshot(reference(recs, partitions))


def test_an_auto_checkpointing_driver_equals_the_manual_reference() -> None:
    recs = records(50, seed=3)
    auto = TestDriver(build(), partitions=2)
    pipe(auto, recs)
    assert snapshot(auto) == snapshot(reference(recs, 2))


@pytest.mark.parametrize("partitions", [1, 3])
def test_state_right_after_a_crash_equals_the_last_checkpoints_state(partitions: int) -> None:
    recs = records(60, seed=21)
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs[:30])
    drain(d)
    at_checkpoint = {(s, u): d.state(s, u) for s in ["count", "total"] for u in users(recs)}
    at_checkpoint.update({("recent", u): d.state("recent", u, state="items") for u in users(recs)})
    sizes = d.state_sizes()
    pipe(d, recs[30:])  # the source records since the checkpoint are processed; their
    # repartitioned records are not committed, so the keyed steps have not seen them yet
    d.crash()
    after = {(s, u): d.state(s, u) for s in ["count", "total"] for u in users(recs)}
    after.update({("recent", u): d.state("recent", u, state="items") for u in users(recs)})
    assert after == at_checkpoint
    assert d.state_sizes() == sizes
    drain(d)
    assert snapshot(d) == snapshot(reference(recs, partitions))


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_crash_rebuilds_every_store_partition_from_its_changelog(partitions: int) -> None:
    """Uncommitted writes (puts and deletes) are lost from the stores; the durable contents and
    the changelog offset they reflect equal the last checkpoint's."""
    recs = records(70, seed=4)
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs[:30])
    drain(d)
    pipe(d, recs[30:50])
    d.checkpoint()  # commits a second changelog interval on top of the first
    durable = durable_state(d)
    offsets = {(s, p): d.backend.open(d.pipeline.name, s, p).changelog_offset()
               for s in ALL_STORES for p in range(partitions)}
    pipe(d, recs[50:])
    d.run()  # the keyed steps now change (and delete) state in their write caches
    assert any(t.stores[s].dirty for t in d.tasks for s in ALL_STORES)
    d.crash()
    assert durable_state(d) == durable
    for (store, p), offset in offsets.items():
        changelog = d.topics.log(d.pipeline.changelog_topic(store))[p]
        restored = d.backend.open(d.pipeline.name, store, p).changelog_offset()
        assert restored == (len(changelog) or None) == offset
    drain(d)
    assert snapshot(d) == snapshot(reference(recs, partitions))


def test_dead_letters_of_the_aborted_interval_are_written_once() -> None:
    recs: list[dict[str, Any]] = [{"i": 0, "user": "a", "x": 1}, {"i": 1, "bad": True}, {"i": 2, "user": "a", "x": 2}]
    d = TestDriver(build(), auto_checkpoint=False)
    pipe(d, recs[:1])
    drain(d)
    pipe(d, recs[1:])
    d.crash()
    assert d.dead_letters() == []
    drain(d)
    [dead] = d.dead_letters()
    assert dict(dead.headers() or ())["fw.source.offset"] == b"1"
    assert per_key(d.output("counts")) == {"a": [1, 2]}


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("point", ["after_changelogs", "after_commit", "after_state_write"])
def test_a_crash_at_each_step_of_a_checkpoint_gives_the_crash_free_result(partitions: int, point: str) -> None:
    """As ``FW_CRASH_POINT`` does to a real process. At ``after_commit`` the changelogs and
    positions are committed but the local stores were not written: the restore reads each
    changelog from the stored offset and applies its tail."""
    recs = records(60, seed=13)
    d = TestDriver(build(), partitions=partitions, auto_checkpoint=False)
    pipe(d, recs[:30])
    drain(d)
    pipe(d, recs[30:45])
    d.run()
    d.checkpoint(crash_at=point)  # type: ignore[arg-type]
    for store in ALL_STORES:
        for p in range(partitions):
            changelog = d.topics.log(d.pipeline.changelog_topic(store))[p]
            assert d.backend.open(d.pipeline.name, store, p).changelog_offset() == (len(changelog) or None)
    pipe(d, recs[45:])
    drain(d)
    assert snapshot(d) == snapshot(reference(recs, partitions))
