"""The Python daemon of a local Spark master (``spark.python.daemon.module``), which forks
the Python workers: pyspark's own daemon, with pyspark (and py4j) imported from the installed
package instead of the copies in ``$SPARK_HOME/python/lib``.

Spark puts ``pyspark.zip`` first on the workers' path, and Python compiles every module it
imports from a zip again in every process (it writes no bytecode there): 0.5 s of the daemon's
start and more of each worker's, before a replay's first record. When the zip lies inside
the installed pyspark package (pyspark from PyPI: ``SPARK_HOME`` is that package) it is the
same code, so the installed copy, whose bytecode was compiled at install, is imported
instead. Otherwise nothing changes.

A top-level module, so that ``python -m fw_local_daemon`` imports nothing else first (the
daemon must not start threads before it forks). ``fw replay`` adds its directory to the
workers' path (``spark.executorEnv.PYTHONPATH``) for local masters only.
"""

from __future__ import annotations

import os
import re
import sys
from importlib.machinery import PathFinder


def _installed_copies(path: list[str]) -> list[str]:
    """The entries of ``path`` that are Spark's zips of an installed pyspark and py4j."""
    zips = [p for p in path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    rest = [p for p in path if p not in zips]
    spark = PathFinder.find_spec("pyspark", rest)
    if spark is None or spark.origin is None:
        return []
    home = os.path.dirname(os.path.realpath(spark.origin)) + os.sep
    drop = []
    for z in zips:
        if not os.path.realpath(z).startswith(home):
            continue
        name = os.path.basename(z)
        if name == "pyspark.zip":
            drop.append(z)
            continue
        py4j = PathFinder.find_spec("py4j", rest)
        version = re.fullmatch(r"py4j-(.+)-src\.zip", name)
        if py4j is not None and py4j.origin is not None and version is not None:
            installed = os.path.join(os.path.dirname(py4j.origin), "version.py")
            try:
                with open(installed, encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            if f"'{version.group(1)}'" in text or f'"{version.group(1)}"' in text:
                drop.append(z)
    return drop


def main() -> None:
    try:
        for entry in _installed_copies(sys.path):
            sys.path.remove(entry)
    except Exception as exc:  # noqa: BLE001 - never keep the workers from starting: Spark's path as it was
        print(f"fw_local_daemon: pyspark from Spark's zip ({type(exc).__name__}: {exc})", file=sys.stderr)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
