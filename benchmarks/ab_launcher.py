"""Stand-in for ``python -m framework.cli`` for A/B measurements of the framework without
editing framework/:

    git worktree add /tmp/before <commit>
    BENCH_FW_LAUNCHER=benchmarks/ab_launcher.py AB_CHECKOUT=/tmp/before \\
        benchmarks/run --systems fw-1 --phases throughput --no-report --label before
    BENCH_FW_LAUNCHER=benchmarks/ab_launcher.py \\
        benchmarks/run --systems fw-1 --phases throughput --no-report --label after

AB_CHECKOUT=DIR  run the framework of another checkout (its ``framework/`` package first on
                 ``sys.path``); the workloads stay this checkout's ``benchmarks/apps``.
AB_GC=N          gc.set_threshold(N, 50, 1000): fewer generation-0 collections in the hot loop.
AB_FREEZE=1      gc.freeze() once the framework and the workloads are imported: the collector no
                 longer walks the objects of those imports.
"""

import gc
import os
import sys

if os.environ.get("AB_CHECKOUT"):
    checkout = os.path.abspath(os.environ["AB_CHECKOUT"])
    sys.path.insert(0, checkout)
    import framework

    if not os.path.abspath(framework.__file__).startswith(checkout + os.sep):
        raise SystemExit(f"AB_CHECKOUT={checkout}: imported framework from {framework.__file__}")

if os.environ.get("AB_GC"):
    gc.set_threshold(int(os.environ["AB_GC"]), 50, 1000)

from framework.cli import main

if os.environ.get("AB_FREEZE"):
    import benchmarks.apps.fw_app  # noqa: F401

    gc.freeze()

sys.argv = ["fw", *sys.argv[1:]]
main()
