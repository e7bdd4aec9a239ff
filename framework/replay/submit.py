"""The ``spark-submit`` command of a replay: Spark's Kafka connector resolved once from Maven
Central into the cache, the job script inside this package, and the framework, the service's
own package and ``schemas/`` shipped to the executors with ``--py-files``.

Spark is the installed pyspark (``SPARK_HOME`` is its package directory), so the same command
runs in local mode and against any cluster whose workers have Python, the framework's
dependencies and Java: ``--master spark://host:7077``. Nothing is fetched when the job runs.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from framework.broker.local import require_tool
from framework.classdata import ARCHIVE_DAYS, QUIET, file_identity, remove_unused
from framework.errors import EnvironmentProblem
from framework.home import fw_home

_HERE = Path(__file__).resolve().parent
JOB = _HERE / "job.py"
PROGRESS_ENV = "FW_REPLAY_PROGRESS"  # job.py reads it (it imports nothing of this module)
_CONNECTOR_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def spark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        raise EnvironmentProblem("pyspark is not installed: pip install the framework with its dependencies "
                                 "(scripts/bootstrap.sh does)") from None


def spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise EnvironmentProblem("pyspark is not installed: pip install the framework with its dependencies")
    return Path(spec.origin).parent


def cache_dir() -> Path:
    """The cache root, ``$FW_HOME`` (``framework.home``)."""
    return fw_home()


def connector_jars() -> list[Path]:
    """Spark's Kafka connector for the installed pyspark and what it needs beyond Spark,
    resolved from Maven Central with ``mvn`` into ``$FW_HOME/spark-kafka/<version>`` once."""
    version = spark_version()
    target = cache_dir() / "spark-kafka" / version
    marker = target / ".complete"
    if not marker.exists():
        mvn = require_tool("mvn", "Install Apache Maven (e.g. `apt-get install maven`): it resolves Spark's Kafka "
                                  "connector from Maven Central.")
        target.mkdir(parents=True, exist_ok=True)
        cmd = [mvn, "-q", "-B", "-f", str(_HERE / "pom.xml"), f"-Dspark.version={version}",
               "dependency:copy-dependencies", f"-DoutputDirectory={target}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise EnvironmentProblem(f"mvn could not resolve spark-sql-kafka-0-10_2.13:{version} from Maven Central "
                                     f"(pyspark {version} needs its connector of the same version):\n{tail}")
        marker.write_text(version)
    jars = sorted(p for p in target.glob("*.jar") if p.name.startswith(_CONNECTOR_JARS))
    if len(jars) < len(_CONNECTOR_JARS):
        raise EnvironmentProblem(f"the Spark Kafka connector in {target} is incomplete: delete the directory and "
                                 "run again")
    return jars


def package(target: str, into: Path | None = None, root: Path | None = None) -> Path:
    """A zip for ``--py-files``: the framework, every top-level package (or module) of the
    project that importing ``target`` loaded (the pipeline's own package and what it imports
    beside it, e.g. ``tests`` importing ``services``), and ``schemas/`` (found beside the
    pipeline's package), as the executors import them.

    Named after what goes in (each file's name, size and modification time, and this
    Python's bytecode version) and kept in ``into`` (default ``$FW_HOME/replay/deps``): a
    replay of unchanged code uses the zip the last one made (making one compiles every module,
    0.3 s). Zips unused for 30 days are removed."""
    root = root or Path.cwd()
    into = into or cache_dir() / "replay" / "deps"
    into.mkdir(parents=True, exist_ok=True)
    files = _package_files(target, root)
    identity = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    for source, arcname in files:
        st = source.stat()
        identity.update(f"{arcname}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    out = into / f"deps-{identity.hexdigest()[:16]}.zip"
    if out.is_file():
        os.utime(out)  # used: kept
        return out
    writing = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(writing, "w", zipfile.ZIP_DEFLATED) as z, tempfile.TemporaryDirectory() as scratch:
        pyc = Path(scratch) / "module.pyc"
        for source, arcname in files:
            _add_module(z, source, arcname, pyc)
    os.replace(writing, out)
    remove_unused(into, days=30, keep=out)
    return out


def _package_files(target: str, root: Path) -> list[tuple[Path, str]]:
    """What ``package`` zips: ``(file, its name in the zip)``."""
    top = target.partition(":")[0].split(".")[0]
    spec = importlib.util.find_spec(top)
    files = _tree(Path(__file__).resolve().parents[1], "framework")  # this package, not imported whole
    for name, origin in sorted(_project_modules(top).items()):
        files += _tree(origin.parent, name) if origin.name == "__init__.py" else [(origin, origin.name)]
    if spec is not None and spec.origin is not None and top != "framework":
        origin = Path(spec.origin)
        schemas = (origin.parent.parent if origin.name == "__init__.py" else origin.parent) / "schemas"
    else:
        schemas = root / "schemas"
    schemas = Path(os.environ.get("FW_SCHEMAS_DIR", schemas))
    if schemas.is_dir():
        files += [(f, f"schemas/{f.relative_to(schemas).as_posix()}") for f in sorted(schemas.rglob("*.avsc"))]
    return files


def _project_modules(top: str) -> dict[str, Path]:
    """The loaded top-level packages and modules that live beside ``top`` (not installed
    libraries, not the framework): name -> its ``__init__.py`` or module file."""
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None or top == "framework":
        return {}
    origin = Path(spec.origin).resolve()
    base = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    found = {top: origin}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." in name or name in found or name == "framework" or not file:
            continue
        path = Path(file).resolve()
        if path.name == "__init__.py" and path.parent.parent == base or path.parent == base and path.suffix == ".py":
            found[name] = path
    return found


def _tree(directory: Path, name: str) -> list[tuple[Path, str]]:
    return [(f, f"{name}/{f.relative_to(directory).as_posix()}") for f in sorted(directory.rglob("*"))
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed", ".xml", ".properties")]


def _add_module(z: zipfile.ZipFile, source: Path, arcname: str, pyc: Path) -> None:
    """A file, and beside a module its bytecode (compiled through ``pyc``): zipimport runs a
    ``.pyc`` it finds next to the ``.py`` instead of compiling the source again in every
    Python worker. Unchecked-hash bytecode (PEP 552) needs no timestamps, which a zip keeps
    only to two seconds; a worker on another Python version sees another magic number and
    compiles the ``.py``."""
    z.write(source, arcname)
    if source.suffix == ".py":
        py_compile.compile(str(source), cfile=str(pyc), dfile=arcname, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        z.write(pyc, arcname + "c")


# In local mode the driver's JVM is the executor too. Its JIT compilers (C2) took 5-8 CPU s
# of every 1,000,000-record replay on two cores, compiling code that runs for seconds; with
# C1 alone a replay used about a third less CPU and ran as fast or faster (benchmarks/NOTES.md,
# "Replay on Spark: reads that waited, the JIT, ..."). A cluster's executors are other JVMs,
# long-lived: left to their default.
LOCAL_JIT = "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"


# The driver's JVM loads, parses and verifies Spark's classes before a job can start. Java's
# dynamic class-data sharing keeps them in an archive that later JVMs map instead: with it, a
# 4,000-record replay took 6.6 s from the command to its end instead of 9.3 s, its Spark
# session up 2.5 s sooner (benchmarks/NOTES.md). The first run writes the archive as its JVM
# exits (15-25 s on two cores, once per Java, Spark and connector), after the command has ended
# (``framework.replay.launch``). A JVM that cannot use an archive
# (another build of Java, another class path) starts without it, as it would have.


@dataclass(frozen=True)
class ClassArchive:
    """The driver JVM's class-data archive (``path``), or, while there is none, the file this
    run's JVM writes as it exits (``writing``), which ``keep`` puts in its place. Archives of
    other keys (other Java, Spark or connector) stay: another virtualenv on this machine may
    use them, until they are ``ARCHIVE_DAYS`` unused."""

    path: Path
    writing: Path

    def options(self) -> list[str]:
        use = (f"-XX:SharedArchiveFile={self.path}" if self.path.is_file()
               else f"-XX:ArchiveClassesAtExit={self.writing}")
        # a JVM without the option runs as before; what CDS says of classes it leaves out is not
        # the user's concern (errors still show)
        return ["-XX:+IgnoreUnrecognizedVMOptions", use, QUIET]

    def written_by(self, cmd: list[str]) -> bool:
        """Whether the JVM of ``cmd`` writes this archive (not: maps it, or has options of its own)."""
        return any(f"ArchiveClassesAtExit={self.writing}" in arg for arg in cmd)

    def keep(self, succeeded: bool) -> None:
        """After the run: the archive it wrote takes its key's place (a rename: a JVM never
        maps half a file, and of two runs writing one key the last rename wins whole), or the
        one it used is marked used; then what no run used for ``ARCHIVE_DAYS`` goes."""
        try:
            if self.writing.exists():
                if succeeded:
                    os.replace(self.writing, self.path)
                else:
                    self.writing.unlink()
            elif self.path.is_file():
                os.utime(self.path)  # used: kept
        except OSError:  # another run's archive took its place or went first: nothing is lost
            pass
        directory = self.path.parent
        remove_unused(directory, days=ARCHIVE_DAYS, keep=self.path, named=r".+\.jsa")
        # what a killed run left (a running one's stays)
        remove_unused(directory, days=1 / 24, keep=self.path, named=r".+\.tmp")


def class_archive(jars: list[Path], spark: Path | None = None) -> ClassArchive | None:
    """This machine's archive for its Java and the driver's class path: Spark's jars in
    ``spark`` (default: the installed pyspark's) and ``jars``, in ``$FW_HOME/spark-cds``; None
    without Java, or where the directory cannot be made or named in Java's options (a path
    with spaces).

    Named by what Java checks before it maps an archive: the build of Java, and each jar of
    the class path as the file it is (Java follows links; it compares the file, its size and
    its modification time). ``spark_launch_home`` gives every virtualenv with the same Spark
    one set of jar files, so they share one archive."""
    java = _java_home(os.environ)
    directory = cache_dir() / "spark-cds"
    if java is None or any(c.isspace() for c in str(directory)):
        return None
    binary = os.path.realpath(Path(java) / "bin" / "java")
    classpath = sorted((spark or spark_home()).joinpath("jars").glob("*.jar")) + list(jars)
    key = file_identity([binary, *classpath])
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return ClassArchive(directory / f"{key}.jsa", directory / f"{key}.jsa.{os.getpid()}.tmp")


def spark_launch_home() -> Path:
    """``SPARK_HOME`` for spark-submit: the installed pyspark, but with its ``jars`` the ones
    every virtualenv of this Spark version shares, in ``$FW_HOME/spark-jars/<key>`` (hard links
    to the first installation's jars, copies across file systems; keyed by the version and
    each jar's name and size). The JVM checks a class-data archive against the jar files
    themselves, so two installations of one Spark, each its own files, could not share one:
    each run of the other would write its own. Each installation gets a directory of links in
    ``$FW_HOME/spark-home/`` (its own files, the shared jars); both are removed after
    ``ARCHIVE_DAYS`` unused. The installed pyspark itself where any of this cannot be made."""
    home = spark_home()
    jars = sorted((home / "jars").glob("*.jar"))
    if not jars:
        return home
    shared_key = hashlib.sha256("\n".join([spark_version(), *(f"{j.name}\0{j.stat().st_size}" for j in jars)])
                                .encode()).hexdigest()[:16]
    root = cache_dir()
    shared = root / "spark-jars" / shared_key
    own = root / "spark-home" / hashlib.sha256(f"{home}\0{shared_key}".encode()).hexdigest()[:16]
    try:
        if not shared.is_dir():
            _build(shared, {j.name: j for j in jars}, _link_or_copy)
        if not own.is_dir():
            _build(own, {e.name: shared if e.name == "jars" else e for e in home.iterdir()},
                   lambda source, target: target.symlink_to(source))
        for used in (shared, own):
            os.utime(used)
    except OSError:
        return home
    for cache in (shared.parent, own.parent):
        remove_unused(cache, days=ARCHIVE_DAYS, keep=shared if cache == shared.parent else own)
    return own


def _build(directory: Path, entries: dict[str, Path], make: Callable[[Path, Path], None]) -> None:
    """``directory`` with each entry (its name in it -> the file it is made from by ``make``),
    whole or not at all: filled under a temporary name, then renamed (a concurrent run that
    renamed its own first wins; this one's goes)."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{directory.name}.", suffix=".tmp", dir=directory.parent))
    try:
        for name, source in entries.items():
            make(source, scratch / name)
        os.replace(scratch, directory)
    except OSError:
        if not directory.is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


# A local master's Python workers import pyspark from the installed package, not from Spark's
# pyspark.zip, which every process compiles again (fw_local_daemon's docstring): 0.6 s less
# before a replay's first record. Local masters only (the executors are this machine), and not
# when the command's own settings name a daemon or the workers' path.
# Spark's INFO and WARN lines (its version, the UI's port, a hostname that resolves to
# loopback, Hadoop's native library) are not the user's business on every run: the driver's
# JVM (on a local master, its executors too) logs ERRORs only, through this file, unless
# ``fw replay --verbose``. A cluster's executors log to their workers' files, at the cluster's
# own settings (the file's path here need not exist there).
LOG_CONFIG = Path(__file__).parent / "log4j2.properties"
LOCAL_DAEMON = Path(__file__).parent / "daemon_path" / "fw_local_daemon.py"
_DAEMON_CONFS = ("spark.python.daemon.module=", "spark.python.use.daemon=", "spark.executorEnv.PYTHONPATH=")


def command(plan_path: Path, deps: Path, jars: list[Path], *, master: str, confs: list[str], name: str,
            mode: str = "replay", archive: ClassArchive | None = None, spark: Path | None = None,
            verbose: bool = False) -> list[str]:
    """The spark-submit command of the Spark in ``spark`` (default: the installed pyspark). The
    driver's JVM options are the command's own (``spark.driver.extraJavaOptions``) or else
    ours: C1 alone on a local master, and the class-data ``archive`` where the driver runs here
    (not ``spark.submit.deployMode=cluster``). There, unless ``verbose``, the driver logs
    through ``LOG_CONFIG`` (ERRORs only), added to the command's own options unless they name
    a log4j configuration themselves."""
    cmd = [str((spark or spark_home()) / "bin" / "spark-submit"), "--master", master, "--name", name,
           "--conf", f"spark.pyspark.python={sys.executable}", "--conf", "spark.ui.showConsoleProgress=false"]
    here = "spark.submit.deployMode=cluster" not in confs
    logging = [f"-Dlog4j.configurationFile={LOG_CONFIG}"] if here and not verbose else []
    own = [i for i, c in enumerate(confs) if c.startswith("spark.driver.extraJavaOptions=")]
    if own:  # the last one is what spark-submit takes
        if logging and "log4j" not in confs[own[-1]]:
            confs = [*confs[:own[-1]], f"{confs[own[-1]]} {logging[0]}", *confs[own[-1] + 1:]]
    else:
        driver = [LOCAL_JIT.partition("=")[2]] if master.startswith("local") else []
        if archive is not None and here:
            driver += archive.options()
        if driver or logging:
            cmd += ["--conf", "spark.driver.extraJavaOptions=" + " ".join(driver + logging)]
    if master.startswith("local") and not any(c.startswith(_DAEMON_CONFS) for c in confs):
        cmd += ["--conf", f"spark.python.daemon.module={LOCAL_DAEMON.stem}",
                "--conf", f"spark.executorEnv.PYTHONPATH={LOCAL_DAEMON.parent}"]
    for conf in confs:
        cmd += ["--conf", conf]
    cmd += ["--jars", ",".join(str(j) for j in jars), "--py-files", str(deps), str(JOB), str(plan_path), mode]
    return cmd


def environment(spark: Path | None = None) -> dict[str, str]:
    """spark-submit's environment: this Python for the driver and the workers, the Spark in
    ``spark`` (default: the installed pyspark), and how the job shows its progress
    (``FW_REPLAY_PROGRESS``: ``terminal`` when this command's output is one, else ``lines``;
    a value set before is kept)."""
    env = dict(os.environ)
    home = _java_home(env)
    if home is None:
        raise EnvironmentProblem("Java is not installed (no `java` on PATH, no JAVA_HOME): Spark runs on it. "
                                 "Fix: install Java 17 or later (e.g. `apt-get install openjdk-17-jre-headless`)")
    env["JAVA_HOME"] = home
    env.update(SPARK_HOME=str(spark or spark_home()), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    # the job's output is this command's: it refreshes its progress in place on a terminal only
    env.setdefault(PROGRESS_ENV, "terminal" if sys.stdout.isatty() else "lines")
    return env


def _java_home(env: Mapping[str, str]) -> str | None:
    """``JAVA_HOME`` when it holds a ``bin/java``, else the home of the ``java`` on PATH."""
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return home
    java = shutil.which("java")
    return str(Path(os.path.realpath(java)).parent.parent) if java else None
