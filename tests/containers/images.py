"""The images docker-compose.yml needs, built here from Debian's packages and Maven Central.

No image registry can be reached from this machine, so the images the compose file names are
built locally and tagged with those names; a user's machine pulls the real ones:

- ``localhost/fw-debian:bookworm``: the base of the others, a minimal Debian bookworm root
  file system made by ``debootstrap --variant=minbase`` and ``podman import``ed (the official
  images are Debian bookworm too). Documentation, manual pages and translations are left out,
  as Debian's slim images do.
- ``python:3.11-slim``: a stand-in for the official image, Debian's Python 3.11 and pip, with
  ``python`` and ``pip`` on the PATH and pip free to install into the system's Python (the
  official image's Python is its own, outside Debian's packages).
- the services' image: built by podman-compose from the repository's own ``Dockerfile``,
  ``FROM python:3.11-slim`` (the stand-in above), as ``docker compose build`` would.
- ``apache/kafka``: a small stand-in (``tests/containers/kafka/``) that reproduces the official
  image's interface the compose file uses, the ``KAFKA_*`` variables and
  ``/opt/kafka/bin/kafka-broker-api-versions.sh``, over the same broker jars ``fw broker`` runs.
  The compose file keeps the official image, not one built from the jars: it is the image the
  Kafka project maintains and patches, whose variables are its documented interface, and a
  user deploying the services should not take on the upkeep of a broker image of ours.
- ``prom/prometheus``: Debian's ``prometheus`` package, started as the official image starts
  it (``--config.file=/etc/prometheus/prometheus.yml --storage.tsdb.path=/prometheus``).
  Debian's is an older release than the tag; the scrape configuration and the HTTP API
  (``/api/v1/targets``) the tests use are the same.

Every image carries a label ``fw.inputs``, a hash of what it is built from (its recipe, the
files it copies, its base's hash): an image whose label matches is not rebuilt, so a warm run
takes seconds. The base's root file system is also kept as a tar under the cache
(``$FW_HOME/containers``), so a new image store imports it instead of running debootstrap again.

The services' ``pip install`` reads a local wheelhouse (``$FW_HOME/containers/wheels``): the
project's dependencies as this machine's pip resolves them from PyPI, mounted into the build
with a pip configuration of its own. The Dockerfile is unchanged; only the place pip finds the
same releases is, so editing the framework does not download pyspark again.

``python -m tests.containers.images`` builds (or checks) every image and prints each one's tag,
size and build time.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from framework.broker.local import KAFKA_VERSION, LocalBroker
from tests.containers.engine import engine_dir, engine_env, machine_lock, podman

__all__ = ["BASE_TAG", "STACK_PROJECT", "Built", "build_all", "build_services", "compose_images", "ensure_base",
           "service_images"]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
KAFKA_CONTEXT = Path(__file__).resolve().parent / "kafka"
LABEL = "fw.inputs"
BASE_TAG = "localhost/fw-debian:bookworm"
PYTHON_TAG = "localhost/python:3.11-slim"  # the Dockerfile's FROM, as the tests' podman finds it (engine.py)
# The compose project the tests run (podman-compose -p): the services' images are named after it.
STACK_PROJECT = "fwstack"
# One build at a time on a machine: two container tests (on two pytest-xdist workers) would
# otherwise both find an image out of date and build the same tags at once. A cold build of
# every image takes minutes.
BUILD_LOCK = "images"
BUILD_WAIT_S = 1800.0

_DEBOOTSTRAP = ["debootstrap", "--variant=minbase", "bookworm"]
# What Debian's slim images leave out, for the packages installed later too.
_SLIM_DPKG = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
"""
# apt keeps neither the packages it downloaded nor its caches, as in Debian's own images.
_SLIM_APT = """\
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
"""
_APT = "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends"

PYTHON_RECIPE = f"""\
# A stand-in for the official python:3.11-slim, which cannot be pulled here.
FROM {BASE_TAG}
RUN {_APT} python3.11 python3-pip \\
    && rm -rf /var/lib/apt/lists/* /usr/lib/python3.11/EXTERNALLY-MANAGED \\
    && ln -s /usr/bin/python3 /usr/local/bin/python && ln -s /usr/bin/pip3 /usr/local/bin/pip
ENV LANG=C.UTF-8
CMD ["python3"]
"""

PROMETHEUS_RECIPE = f"""\
# A stand-in for the official prom/prometheus image: Debian's package, started the same way.
FROM {BASE_TAG}
RUN {_APT} prometheus \\
    && rm -rf /var/lib/apt/lists/* \\
    && mkdir -p /prometheus && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
"""

# pip's configuration inside the services' build: the wheelhouse, mounted at /wheels, only.
_BUILD_PIP_CONF = "[global]\nno-index = true\nfind-links = /wheels\n"
# The files of the repository the Dockerfile copies (.dockerignore leaves out the rest).
_APP_INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "framework", "schemas",
               "services")


@dataclass(frozen=True)
class Built:
    """One image: its tag, size in bytes, and the seconds it took (built or found)."""

    tag: str
    size: int
    seconds: float
    rebuilt: bool


def compose_images() -> dict[str, str]:
    """The ``image:`` of each compose service that names one (not built from the Dockerfile),
    as the tests' podman stores it: a local image (``apache/kafka:4.1.1`` -> ``localhost/apache/kafka:4.1.1``)."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return {name: _qualified(entry["image"]) for name, entry in services.items() if "image" in entry}


def service_images(project: str) -> dict[str, str]:
    """The image podman-compose builds for each service with a ``build:`` entry."""
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return {name: f"localhost/{project}_{name}" for name, entry in services.items() if "build" in entry}


def build_all(project: str, log: Callable[[str], None] = print) -> list[Built]:
    """Every image the compose stack needs, each built only when its inputs changed."""
    images = compose_images()
    kafka = images["kafka"]
    if not kafka.startswith("localhost/apache/kafka:"):
        raise RuntimeError(f"docker-compose.yml's kafka image is {kafka}; the stand-in imitates apache/kafka")
    with machine_lock(BUILD_LOCK, BUILD_WAIT_S):
        built = [ensure_base(), _ensure(PYTHON_TAG, PYTHON_RECIPE, {})]
        built.append(_ensure(kafka, (KAFKA_CONTEXT / "Containerfile").read_text(), _kafka_context()))
        built.append(_ensure(images["prometheus"], PROMETHEUS_RECIPE, {}))
        built.append(_ensure_services(project))
    _log(built, log)
    return built


def build_services(project: str, log: Callable[[str], None] = print) -> list[Built]:
    """Only the services' images (and the base and Python images they are built on): what a
    test that runs services without the compose file's broker and Prometheus needs. The same
    images, tags and labels as ``build_all``'s, so neither builds what the other built."""
    with machine_lock(BUILD_LOCK, BUILD_WAIT_S):
        built = [ensure_base(), _ensure(PYTHON_TAG, PYTHON_RECIPE, {}), _ensure_services(project)]
    _log(built, log)
    return built


def _log(built: list[Built], log: Callable[[str], None]) -> None:
    for b in built:
        log(f"{b.tag}: {b.size / 1e6:.0f} MB, {'built' if b.rebuilt else 'cached'} in {b.seconds:.1f}s")


def ensure_base() -> Built:
    """The Debian base image, from the cached root file system (made once by debootstrap)."""
    started = time.monotonic()
    inputs = _digest([" ".join(_DEBOOTSTRAP), _SLIM_DPKG, _SLIM_APT])
    if _label(BASE_TAG) != inputs:
        rootfs = engine_dir() / f"debian-bookworm-minbase-{inputs[:12]}.tar"
        if not rootfs.exists():
            _debootstrap(rootfs)
        podman("import", "--change", f"LABEL {LABEL}={inputs}", "--change", 'CMD ["bash"]',
               str(rootfs), BASE_TAG)
        return _built(BASE_TAG, started, True)
    return _built(BASE_TAG, started, False)


def _debootstrap(rootfs: Path) -> None:
    """A minbase bookworm root file system, trimmed as the slim images are, as a tar."""
    with tempfile.TemporaryDirectory(dir=engine_dir(), prefix="rootfs-") as tmp:
        target = Path(tmp) / "root"
        _run([*_DEBOOTSTRAP, str(target)])
        (target / "etc/dpkg/dpkg.cfg.d/slim").write_text(_SLIM_DPKG)
        (target / "etc/apt/apt.conf.d/slim").write_text(_SLIM_APT)
        leftovers = [p for p in (target / "usr/share/doc").glob("*/*") if p.name != "copyright"]
        for folder in ("usr/share/man", "usr/share/info", "usr/share/locale", "var/lib/apt/lists",
                       "var/cache/apt"):
            leftovers += (target / folder).glob("*")
        for path in leftovers:
            _remove(path)
        _run(["tar", "-C", str(target), "--numeric-owner", "-cf", f"{rootfs}.part", "."])
        Path(f"{rootfs}.part").rename(rootfs)


def _remove(path: Path) -> None:
    # A package's doc directory may be a link into another's, already emptied: missing is fine.
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _ensure(tag: str, recipe: str, files: dict[str, Path]) -> Built:
    """``tag`` built from ``recipe`` (a Containerfile) with ``files`` (context name -> path)
    in its context, unless the image's label says it was built from the same inputs."""
    started = time.monotonic()
    inputs = _digest([recipe, _label(BASE_TAG) or "", *_tree_digests(files.items())])
    if _label(tag) == inputs:
        return _built(tag, started, False)
    with tempfile.TemporaryDirectory(dir=engine_dir(), prefix="context-") as tmp:
        context = Path(tmp)
        (context / "Containerfile").write_text(recipe)
        for name, source in files.items():
            (shutil.copytree if source.is_dir() else shutil.copy2)(source, context / name)
        podman("build", "--network", "host", "--label", f"{LABEL}={inputs}", "-t", tag,
               "-f", str(context / "Containerfile"), str(context), timeout_s=1800)
    _prune()
    return _built(tag, started, True)


def _kafka_context() -> dict[str, Path]:
    """The stand-in's files and its jars: the broker's (``fw broker fetch``) and Kafka's tools
    jar for ``kafka-broker-api-versions.sh``, both from Maven Central, cached under FW_HOME."""
    libs = engine_dir() / f"kafka-libs-{KAFKA_VERSION}"
    if not (libs / ".complete").exists():
        broker_jars = LocalBroker().fetch()
        libs.mkdir(parents=True, exist_ok=True)
        for jar in broker_jars.glob("*.jar"):
            shutil.copy2(jar, libs / jar.name)
        _run(["mvn", "-q", "-B", "dependency:copy",
              f"-Dartifact=org.apache.kafka:kafka-tools:{KAFKA_VERSION}", f"-DoutputDirectory={libs}"])
        (libs / ".complete").write_text(KAFKA_VERSION)
    files = {p.name: p for p in KAFKA_CONTEXT.iterdir() if p.name != "Containerfile"}
    return {**files, "log4j2.properties": ROOT / "framework/broker/log4j2.properties", "libs": libs}


def _ensure_services(project: str) -> Built:
    """The services' images, built by podman-compose from the repository's Dockerfile."""
    started = time.monotonic()
    wheels = _wheelhouse()
    inputs = _digest([_label(PYTHON_TAG) or "", wheels.name,
                      *_tree_digests((name, ROOT / name) for name in _APP_INPUTS)])
    tags = service_images(project)
    if all(_label(tag) == inputs for tag in tags.values()):
        return _built(next(iter(tags.values())), started, False)
    pip_conf = engine_dir() / "build-pip.conf"
    pip_conf.write_text(_BUILD_PIP_CONF)
    build_args = (f"--network=host --label={LABEL}={inputs} --volume={wheels}:/wheels:ro "
                  f"--volume={pip_conf}:/etc/pip.conf:ro")
    # One build at a time: the first fills podman's layer cache, the other services' builds
    # of the same Dockerfile and context take their layers from it.
    _run([sys.executable, "-m", "podman_compose", "--parallel", "1", "-p", project,
          "-f", str(COMPOSE_FILE), f"--podman-build-args={build_args}", "build"], cwd=ROOT)
    _prune()
    return _built(next(iter(tags.values())), started, True)


def _prune() -> None:
    """Remove the images a rebuild left without a tag (the previous build's layers): the store
    would otherwise grow by a services' image (about 1 GB) at every edit of the framework."""
    podman("image", "prune", "--force")


def _wheelhouse() -> Path:
    """The project's dependencies (and the build's setuptools and wheel) as wheels for
    Python 3.11 on Linux, from PyPI through this machine's pip, in a directory named by the
    hash of the requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    wheels = engine_dir() / "wheels" / _digest(requirements)[:16]
    if not (wheels / ".complete").exists():
        _run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), *requirements])
        (wheels / ".complete").write_text("\n".join(requirements))
    return wheels


def _tree_digests(items: Iterable[tuple[str, Path]]) -> list[str]:
    """One digest per (name, file or directory) pair, over the relative paths, modes and
    contents of its files; bytecode caches are not inputs."""
    digests = []
    for name, path in sorted(items):
        h = hashlib.sha256(name.encode())
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.name != ".complete":
                h.update(f"{f.relative_to(path.parent)}:{f.stat().st_mode & 0o111}".encode())
                h.update(f.read_bytes() if f.stat().st_size < 1 << 20 else str(f.stat().st_size).encode())
        digests.append(h.hexdigest())
    return digests


def _digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _label(tag: str) -> str | None:
    """The image's ``fw.inputs`` label; None when the image is missing."""
    proc = podman("image", "inspect", "--format", f'{{{{index .Labels "{LABEL}"}}}}', tag, check=False)
    return proc.stdout.decode().strip() if proc.returncode == 0 else None


def _built(tag: str, started: float, rebuilt: bool) -> Built:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.decode().strip())
    return Built(tag, size, time.monotonic() - started, rebuilt)


def _qualified(image: str) -> str:
    """A short name as the tests' podman resolves it: no registry is searched (engine.py)."""
    first = image.split("/")[0]
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"localhost/{image}"


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=engine_env(), cwd=cwd, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-3000:]}")


if __name__ == "__main__":
    build_all(sys.argv[1] if len(sys.argv) > 1 else STACK_PROJECT)
