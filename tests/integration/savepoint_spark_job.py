"""The Spark side of test_savepoint_spark.py, run as a user runs such a script (spark-submit
--master local[1]): read the ``sums`` store of a savepoint as a DataFrame,
migrate it (every sum times 10, the bad key ``u3`` fixed to ``u9``) into a new savepoint, and
try a value of the wrong shape, which must be refused before anything is written.

    spark-submit --master local[1] tests/integration/savepoint_spark_job.py TARGET SAVED MIGRATED REFUSED OUT.json
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from framework import savepoint
from framework.errors import ConfigError

SHOWN = ("partition", "kind", "state", "key", "window_start", "window_end", "map_key", "timer", "value")


def main(target: str, saved: str, migrated: str, refused: str, out: str) -> None:
    spark = SparkSession.builder.appName("savepoint-state").getOrCreate()  # the master: spark-submit's
    try:
        sums = savepoint.read(spark, saved, "sums")
        read = [{c: r[c] for c in SHOWN} for r in sums.orderBy("partition", "key_bytes").collect()]
        fixed = sums.where("kind = 'state'").selectExpr(
            "CASE WHEN key = 'u3' THEN 'u9' ELSE key END AS key", "CAST(value AS BIGINT) * 10 AS value")
        savepoint.write(migrated, target, {"sums": fixed}, base=saved)
        again = [{c: r[c] for c in SHOWN} for r in
                 savepoint.read(spark, migrated, "sums").orderBy("partition", "key_bytes").collect()]
        bad = sums.selectExpr("kind", "state", "key",
                              "CASE WHEN key = 'u2' THEN '\"ten\"' ELSE value END AS value")
        try:
            savepoint.write(refused, target, {"sums": bad}, base=saved)
            line = None
        except ConfigError as exc:
            line = str(exc)
        raw = savepoint.read(spark, saved, "sums", decoded=False).columns
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump({"read": read, "migrated": again, "refused": line, "raw_columns": raw}, f)


if __name__ == "__main__":
    main(*sys.argv[1:6])
