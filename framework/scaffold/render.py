"""Templates shipped as package data (``framework/scaffold/templates``), rendered with Jinja2,
and the set of files they make.

A ``FileSet`` is the files one command would write, as text, relative to a root. Nothing
is written until every file is known and checked: ``changes`` compares the set with the
disk, ``write`` writes what is new or (with ``force``) different.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined


def environment() -> Environment:
    """The Jinja2 environment of the scaffold templates: undefined names are errors, text is
    not HTML-escaped, files keep their final newline."""
    return Environment(loader=PackageLoader("framework.scaffold", "templates"), undefined=StrictUndefined,
                       autoescape=False, keep_trailing_newline=True)


def render_tree(prefix: str, context: dict[str, Any]) -> dict[str, str]:
    """Every template under ``prefix/`` rendered, by its path below ``prefix`` without ``.j2``."""
    env = environment()
    out = {}
    for name in env.list_templates(filter_func=lambda n: n.startswith(prefix + "/") and n.endswith(".j2")):
        out[name[len(prefix) + 1:-3]] = env.get_template(name).render(**context)
    return out


@dataclass
class Changes:
    """What writing a ``FileSet`` would do, by relative path."""

    new: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)


@dataclass
class FileSet:
    """Files to write below ``root``: relative path -> text; ``executable`` paths get +x."""

    root: Path
    files: dict[str, str] = field(default_factory=dict)
    executable: set[str] = field(default_factory=set)

    def changes(self) -> Changes:
        found = Changes()
        for rel, text in sorted(self.files.items()):
            path = self.root / rel
            if not path.exists():
                found.new.append(rel)
            elif path.is_file() and path.read_text() == text and self._mode_ok(rel):
                found.same.append(rel)
            else:
                found.different.append(rel)
        return found

    def write(self, changes: Changes, *, force: bool) -> list[str]:
        """Write the new files, and the different ones when ``force``; returns what was written."""
        written = changes.new + (changes.different if force else [])
        for rel in written:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.files[rel])
            if rel in self.executable:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return written

    def _mode_ok(self, rel: str) -> bool:
        return rel not in self.executable or os.access(self.root / rel, os.X_OK)
