"""Throughput of one service process on the local broker (not part of the test suite).

    .venv/bin/python benchmarks/throughput.py [--records 200000] [--guarantee exactly_once]

Produces JSON numbers to a fresh topic (4 partitions), then runs in-process:
  stateless: filter → map → to(topic)
  keyed:     count per source key (10,000 keys) → to(topic)
  repartition: key_by parity → sum → to(topic)
and prints records/s of the service loop (start-up and group join excluded).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid

from framework.broker import LocalBroker
from framework.config import Config
from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from framework.kafka.io import produce_values
from framework.pipeline import Pipeline, Topic
from framework.runtime.service import Service


def build(kind: str, src: str, suffix: str) -> tuple[Pipeline, int]:
    p = Pipeline(f"bench-{kind}-{suffix}")
    s = p.source(Topic(src))
    if kind == "stateless":
        s.filter(lambda n: n % 3 != 0).map(lambda n: n * 2).to(Topic(f"bench-out-{kind}-{suffix}"))
        return p, 1
    if kind == "keyed":
        s.count(name="counts").to(Topic(f"bench-out-{kind}-{suffix}"))
        return p, 1
    s.key_by(lambda n: "even" if n % 2 == 0 else "odd", name="parity").sum(name="sums").to(Topic(f"bench-out-{kind}-{suffix}"))
    return p, 2  # every record is processed twice: from the source and from the repartition topic


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--guarantee", default="exactly_once", choices=["exactly_once", "at_least_once"])
    ap.add_argument("--kinds", default="stateless,keyed,repartition")
    args = ap.parse_args()
    bootstrap = LocalBroker().start().bootstrap
    suffix = uuid.uuid4().hex[:6]
    src = f"bench-in-{suffix}"
    ensure_topics(admin_client({"bootstrap.servers": bootstrap}), [TopicSpec(src, 4)])
    produce_values(bootstrap, src, ((str(i % 10_000).encode(), json.dumps(i).encode())
                                    for i in range(args.records)))
    for kind in args.kinds.split(","):
        pipeline, factor = build(kind, src, suffix)
        cfg = Config.load(env={"FW_BOOTSTRAP_SERVERS": bootstrap, "FW_GUARANTEE": args.guarantee},
                          state={"dir": tempfile.mkdtemp()})
        svc = Service(pipeline, cfg, "bench")
        marks: dict[str, float] = {}

        # svc.run calls it only within this iteration, so marks and factor are this kind's
        def until(s: Service) -> bool:
            if s.records_processed and "first" not in marks:  # noqa: B023 - called at once
                marks["first"] = time.perf_counter()  # noqa: B023 - called at once
            return s.records_processed >= args.records * factor  # noqa: B023 - called at once

        svc.run(until=until)
        elapsed = time.perf_counter() - marks["first"]
        print(f"{kind:<12} {args.guarantee:<14} {args.records * factor / elapsed:>10,.0f} records/s "
              f"({args.records * factor} records in {elapsed:.2f}s)")


if __name__ == "__main__":
    main()
