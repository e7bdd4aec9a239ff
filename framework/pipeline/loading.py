"""``module:attribute`` to a Pipeline, as ``fw run``, ``fw replay`` and the operations commands
name one, with every way the target can be wrong as one line. Apart from the command line,
which would import every command with it: a replay's Python workers load the pipeline too."""

from __future__ import annotations

import difflib
import importlib
import sys
import traceback
from pathlib import Path

from framework.errors import ConfigError, FrameworkError
from framework.pipeline.definition import Pipeline


def load_pipeline(target: str) -> Pipeline:
    """Import ``module:attribute`` (a Pipeline, or a function returning one). Every way the
    target can be wrong is one ``ConfigError`` line: no such module (with close matches among
    the packages of ``services/``), a module that fails to import (the import error's own
    message: a missing dependency, a syntax error, its file and line), no such attribute, not
    a pipeline."""
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ConfigError(f"expected module:pipeline, got {target!r} (e.g. services.even_odd.pipeline:pipeline)")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):  # the target's own
            raise ConfigError(f"cannot import {module_name!r} for {target!r} ({exc}): {_services_hint(target)} "
                              "(run fw from the project's root, or put the module on PYTHONPATH)") from None
        raise ConfigError(f"importing {module_name!r} for {target!r} failed: {type(exc).__name__}: {exc}{_where(exc)} "
                          "(install the missing package, or fix the import)") from None
    except FrameworkError:
        raise  # the module's own pipeline definition said what is wrong
    except Exception as exc:  # noqa: BLE001 - the user's module failed while it was imported
        raise ConfigError(f"importing {module_name!r} for {target!r} failed: {type(exc).__name__}: {exc}"
                          f"{_where(exc)}") from None
    obj = getattr(module, attr, None)
    if obj is None:
        names = [n for n, v in vars(module).items() if isinstance(v, Pipeline)]
        raise ConfigError(f"{module_name} has no attribute {attr!r}; pipelines there: {names}")
    pipeline = obj() if callable(obj) and not isinstance(obj, Pipeline) else obj
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(f"{target} is a {type(pipeline).__name__}, not a Pipeline")
    pipeline.target = target
    return pipeline


def _services_hint(target: str) -> str:
    known = [f"services.{p.parent.name}.pipeline:pipeline" for p in sorted(Path("services").glob("*/pipeline.py"))]
    near = difflib.get_close_matches(target, known, n=3, cutoff=0.5)
    return f"did you mean {', '.join(near)}?" if near else f"services here: {', '.join(known) or 'none'}"


def _where(exc: BaseException) -> str:
    """`` at file:line`` of the user's code where ``exc`` was raised (a syntax error's own)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" at {exc.filename}:{exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if "importlib" not in f.filename and "<frozen" not in f.filename]
    return f" at {mine[-1].filename}:{mine[-1].lineno}" if mine else ""
