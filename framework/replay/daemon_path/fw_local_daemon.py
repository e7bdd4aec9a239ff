"""The Python daemon of a local Spark master (``spark.python.daemon.module``), which forks
the Python workers: pyspark's own daemon, with pyspark (and py4j) imported from the installed
package instead of the copies in ``$SPARK_HOME/python/lib``.

Spark puts ``pyspark.zip`` first on the workers' path, and Python compiles every module it
imports from a zip again in every process (it writes no bytecode there): 0.5 s of the daemon's
start and more of each worker's, before a replay's first record. When the zip lies inside
the installed pyspark package (pyspark from PyPI: ``SPARK_HOME`` is that package) it is the
same code, so the installed copy, whose bytecode was compiled at install, is imported
instead. Otherwise nothing changes.

The job's Python driver (``job.py``), which Spark starts with the same path on any master,
does the same first (``prefer_installed``): it started 0.9 s sooner.

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
    """The entries of ``path`` that are Spark's zips of the installed pyspark and py4j: lying
    inside the installed pyspark package, and for py4j of the installed py4j's version."""
    zips = [p for p in path if p.endswith(".zip") and os.path.basename(p).startswith(("pyspark", "py4j"))]
    rest = [p for p in path if p not in zips]
    spark = PathFinder.find_spec("pyspark", rest)
    if spark is None or spark.origin is None:
        return []
    home = os.path.dirname(os.path.realpath(spark.origin)) + os.sep
    same = {"pyspark.zip", f"py4j-{_installed_version('py4j', rest)}-src.zip"}
    return [z for z in zips if os.path.realpath(z).startswith(home) and os.path.basename(z) in same]


def _installed_version(name: str, path: list[str]) -> str | None:
    """``__version__`` of the package ``name`` on ``path`` (its ``version.py``), read, not imported."""
    spec = PathFinder.find_spec(name, path)
    if spec is None or spec.origin is None:
        return None
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
            found = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", f.read())
    except OSError:
        return None
    return found.group(1) if found else None


def prefer_installed(path: list[str]) -> None:
    """Takes Spark's zips of the installed pyspark and py4j out of ``path`` (``sys.path``), so
    that importing them loads the installed copies. Never fails: on any error ``path`` stays
    as it was (said on stderr)."""
    try:
        for entry in _installed_copies(path):
            path.remove(entry)
    except Exception as exc:  # noqa: BLE001 - never keep Python from starting: Spark's path as it was
        print(f"fw_local_daemon: pyspark from Spark's zip ({type(exc).__name__}: {exc})", file=sys.stderr)


def main() -> None:
    prefer_installed(sys.path)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
