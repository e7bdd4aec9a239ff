"""A savepoint's manifest (``manifest.json``) and where savepoints are kept.

The manifest is small JSON a person can read and another tool can write: the service, when
the savepoint was made, its format, the pipeline it was made with (a description of every
step, its serdes and its state signature, and a hash of that description), each store's entry
counts per partition and the step signature its entries were written by, the group's committed
offsets, each repartition topic's committed and end offsets (the records between them are
in flight: ``in-flight/``), and each Parquet file's SHA-256 and row count (``files``: a restore
reads every file it writes from and checks it against them before it changes anything,
``framework.savepoint.verify``). Partition numbers are JSON object keys, so text in the file and
``int`` here.

Savepoints are kept under ``FW_SAVEPOINT_DIR`` (default ``./savepoints``, beside the project's
``./state``), as ``<service>/<created, UTC, to the millisecond>/``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from framework.errors import RuntimeProblem
from framework.pipeline.definition import Pipeline
from framework.state.base import STATE_FORMAT

SAVEPOINT_FORMAT = 1
MANIFEST = "manifest.json"
STORES = "stores"
IN_FLIGHT = "in-flight"


@dataclass
class StoreInfo:
    """One store of the savepoint: its entries per partition, where they are (``path``,
    relative to the savepoint), its changelog (None: a table read from its own topic, restored
    from that topic) and the step signature its entries were written by (None: the time store)."""

    entries: dict[int, int]
    path: str
    changelog: str | None
    signature: Any = None

    @property
    def total(self) -> int:
        return sum(self.entries.values())


@dataclass
class RepartitionInfo:
    """A repartition topic as the savepoint found it: per partition the group's committed
    offset and the end; ``records``: how many of the user's committed records lay between them
    (in flight, kept under ``path``); ``control``: how many watermark control records the files
    hold besides (None in savepoints of earlier releases, whose ``records`` counts them too)."""

    committed: dict[int, int]
    end: dict[int, int]
    records: int
    path: str
    control: int | None = None

    @property
    def rows(self) -> int:
        """The rows of its files: the records in flight and the control records."""
        return self.records + (self.control or 0)


@dataclass
class FileInfo:
    """One Parquet file of the savepoint (the key of ``Manifest.files``: its path relative to
    the savepoint): the SHA-256 of its bytes (hex) and its rows."""

    sha256: str
    rows: int


@dataclass
class SourceInfo:
    """A source topic as the savepoint found it: its topic id (another id later: the topic was
    created anew), the end of each partition, and the committed records each held past the
    group's offset (``unprocessed``; not the offsets between: a transaction's commit marker takes
    one and is no record). A rescale needs every one processed (docs/savepoints.md)."""

    id: str
    ends: dict[int, int]
    unprocessed: dict[int, int]


@dataclass
class Manifest:
    service: str
    target: str
    created: str  # ISO 8601, UTC
    partitions: int
    pipeline: dict[str, Any]  # describe_pipeline's
    stores: dict[str, StoreInfo]
    offsets: dict[str, dict[int, int]]  # the group's committed offsets: topic -> partition -> offset
    repartition: dict[str, RepartitionInfo]
    format: int = SAVEPOINT_FORMAT
    state_format: int = STATE_FORMAT
    notes: list[str] = field(default_factory=list)
    sources: dict[str, SourceInfo] = field(default_factory=dict)  # empty in savepoints of earlier releases
    held: list[str] = field(default_factory=list)  # the members held while it was read (none: the service stopped)
    # the end of each topic the service writes (sinks, dead letters), read_committed, as of the savepoint:
    # what it had written then (a rollback's outputs follow these offsets)
    outputs: dict[str, dict[int, int]] = field(default_factory=dict)
    files: dict[str, FileInfo] = field(default_factory=dict)  # empty in savepoints of earlier releases

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)  # in the order of the fields, signatures as the steps give them

    @classmethod
    def from_json(cls, text: str, where: str = "manifest") -> Manifest:
        try:
            data = json.loads(text)
            if data.get("format") != SAVEPOINT_FORMAT:
                raise Unreadable(f"{where} is of savepoint format {data.get('format')!r}; this version reads format "
                                 f"{SAVEPOINT_FORMAT}. Fix: restore it with the release that made it",
                                 f"its manifest is of savepoint format {data.get('format')!r}, this version reads "
                                 f"format {SAVEPOINT_FORMAT}", "list and restore it with the release that made it")
            data["stores"] = {name: StoreInfo(**{**s, "entries": _int_keys(s["entries"])})
                              for name, s in data["stores"].items()}
            data["offsets"] = {t: _int_keys(parts) for t, parts in data["offsets"].items()}
            data["repartition"] = {t: RepartitionInfo(**{**r, "committed": _int_keys(r["committed"]),
                                                         "end": _int_keys(r["end"])})
                                   for t, r in data["repartition"].items()}
            data["outputs"] = {t: _int_keys(parts) for t, parts in data.get("outputs", {}).items()}
            data["sources"] = {t: SourceInfo(r["id"], _int_keys(r["ends"]), _int_keys(r["unprocessed"]))
                               for t, r in data.get("sources", {}).items()}
            data["files"] = {f: FileInfo(**info) for f, info in data.get("files", {}).items()}
            return cls(**data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            said = str(exc).splitlines()[0] if str(exc) else ""
            raise Unreadable(f"savepoint manifest {where} is damaged ({type(exc).__name__}: {said}): the savepoint "
                             "cannot be read or restored. Fix: restore another savepoint (fw savepoint list shows "
                             "them), or create a new one (fw savepoint create)",
                             f"its manifest is damaged ({type(exc).__name__}: {said})", _COPY_AGAIN) from None

    def save(self, directory: Path) -> None:
        (directory / MANIFEST).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        try:
            text = path.read_text()
        except OSError as exc:
            raise Unreadable(f"{directory} is not a savepoint: {path} cannot be read ({exc.strerror}). Fix: name a "
                             "directory fw savepoint create wrote (fw savepoint list shows them)",
                             f"its manifest cannot be read ({exc.strerror})", _COPY_AGAIN) from None
        return cls.from_json(text, str(path))


_COPY_AGAIN = "copy it again from where it was made, or delete its directory"


class Unreadable(RuntimeProblem):
    """A manifest this release cannot read: damaged, unreadable, or of another savepoint format.
    Besides the whole message (what a restore or describe refuses with), ``reason`` and ``fix``
    say it for ``fw savepoint list``, which names the savepoint itself."""

    def __init__(self, message: str, reason: str, fix: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.fix = fix


def _int_keys(parts: Mapping[str, Any]) -> dict[int, Any]:
    return {int(p): v for p, v in parts.items()}


def describe_pipeline(pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline as the savepoint records it: every step (kind, parents, serdes, topic, the
    state signature of a stateful one), its stores, and a hash of all that (``hash``: two
    savepoints with the same hash were made by the same definition)."""
    steps = [_describe_step(step) for step in pipeline.steps.values()]
    body = {"name": pipeline.name, "steps": steps, "stores": pipeline.store_names(),
            "repartition_topics": pipeline.repartition_topics(), "state_format": STATE_FORMAT}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return {**body, "hash": f"sha256:{digest}"}


def _describe_step(step: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": step.name, "kind": step.kind, "parents": list(step.parents)}
    topic = getattr(step, "topic", None)
    if topic is not None:
        out["topic"] = {"name": topic.name, "key_serde": _serde(topic.key_serde),
                        "value_serde": _serde(topic.value_serde)}
    for serde in ("key_serde", "value_serde"):
        if getattr(step, serde, None) is not None:
            out[serde] = _serde(getattr(step, serde))
    if step.stateful:
        out["signature"] = step.state_signature()
    return out


def _serde(serde: Any) -> str:
    """A serde as its ``repr`` when it has one of its own (``JsonSerde()``), else its class
    name: an address in memory would change the hash at every run."""
    shown = repr(serde)
    return type(serde).__name__ if " object at 0x" in shown else shown


def savepoint_root(env: Mapping[str, str] | None = None) -> Path:
    """Where savepoints are kept: ``FW_SAVEPOINT_DIR``, default ``./savepoints``."""
    env = os.environ if env is None else env
    return Path(env.get("FW_SAVEPOINT_DIR") or "savepoints")


def default_path(service: str, created: datetime, root: Path | None = None) -> Path:
    """``<root>/<service>/<created as 20261123T121500.123Z>``: sorted by name, oldest first."""
    stamp = created.astimezone(UTC).strftime("%Y%m%dT%H%M%S.") + f"{created.microsecond // 1000:03d}Z"
    return (savepoint_root() if root is None else root) / service / stamp


@dataclass(frozen=True)
class Listed:
    """A savepoint found under the root: its directory, size on disk (bytes), and its manifest,
    or why it does not read (``unreadable``; ``manifest`` is None then)."""

    path: Path
    manifest: Manifest | None
    size: int
    unreadable: Unreadable | None = None


def list_savepoints(root: Path, service: str | None = None) -> list[Listed]:
    """The savepoints under ``root`` (of ``service`` only, when given), oldest first per
    service: every directory ``<service>/<name>/`` with a manifest, those whose manifest does not
    read included, with the reason (a damaged savepoint left out of a list would be found only
    when a rollback needs it)."""
    if not root.is_dir():
        return []
    found = []
    for manifest in sorted(root.glob(f"{service or '*'}/*/{MANIFEST}")):
        loaded: Manifest | None = None
        unreadable: Unreadable | None = None
        try:
            loaded = Manifest.load(manifest.parent)
        except Unreadable as exc:
            unreadable = exc
        size = sum(f.stat().st_size for f in manifest.parent.rglob("*") if f.is_file())
        found.append(Listed(manifest.parent, loaded, size, unreadable))
    return found
