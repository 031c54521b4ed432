"""The Spark session the analysis runs on.

Local mode (``local[*]``) is the embedded default: PySpark brings Spark itself, so the only
thing to install is Java 17 or newer. ``--master URL`` or the ``PUBMESH_SPARK_MASTER``
environment variable points the same jobs at a cluster (``spark://host:7077``, ``yarn``, ...).

Before starting the JVM we look for Java ourselves, so a machine without it (or with an older
one) gets one line saying what to install instead of a Py4J stack trace. Logs are kept at
WARN/ERROR, the UI is off, and shuffles use few partitions: traces of a single run are small
enough that Spark's default of 200 shuffle partitions would spend most of its time scheduling
empty tasks. Adaptive query execution then coalesces or splits partitions for the data.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubmesh.errors import UserError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_MASTER = "PUBMESH_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
MIN_JAVA = 17


def resolve_master(master: str | None) -> str:
    """``--master`` wins, then ``PUBMESH_SPARK_MASTER``, then ``local[*]``."""
    return master or os.environ.get(ENV_MASTER) or DEFAULT_MASTER


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    return shutil.which("java")


def java_major_version(java: str) -> int | None:
    """The major version ``java -version`` reports (8 for "1.8.0_392", 17 for "17.0.15")."""
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" is Java 8
        major = int(match.group(2))
    return major


def check_java() -> None:
    """Raise a one-line :class:`UserError` unless Java ≥ 17 is on JAVA_HOME or PATH."""
    java = java_executable()
    if java is None:
        raise UserError(
            f"Spark needs Java {MIN_JAVA} or newer and none was found on JAVA_HOME or PATH; "
            "install it (Debian: apt-get install openjdk-17-jre-headless) or run `make venv`"
        )
    major = java_major_version(java)
    if major is None:
        raise UserError(f"{java}: cannot tell its version (`java -version` failed)")
    if major < MIN_JAVA:
        raise UserError(
            f"{java} is Java {major}; Spark 4 needs Java {MIN_JAVA} or newer "
            "(install openjdk-17 and set JAVA_HOME)"
        )


#: traces up to this many bytes of Parquet are small: their analysis is all fixed costs
SMALL_INPUT_BYTES = 64 * 1024 * 1024


#: generated classes a session keeps compiled (Spark's default 100 is less than one analysis)
CODEGEN_CACHE = 1024
#: a JVM that only starts up and runs one-off plans: the client compiler alone
CLIENT_COMPILER = "-XX:TieredStopAtLevel=1"
#: room for the compiled code of the classes the codegen cache keeps: the client compiler alone
#: reserves 48 MB, and a session that analysed again and again filled it and died of "Out of
#: space in CodeCache for adapters" (reserved address space, not resident memory)
CODE_CACHE = "-XX:ReservedCodeCacheSize=512m"


def driver_java_options(*, local: bool, small: bool) -> str:
    """The driver JVM's options: our log4j settings and, unless the driver itself crunches a
    large input (local mode, not ``small``), the client compiler only
    (``-XX:TieredStopAtLevel=1``). A small analysis is all start-up and one-off plans, where
    C2's background compilations cost more CPU than they ever save: a 124 KB trace took
    91 CPU s and 50 s with C2, 56 CPU s and 41 s without, on two cores."""
    options = f"-Dlog4j.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}"
    if small or not local:
        options += f" {CLIENT_COMPILER}"
    return f"{options} {CODE_CACHE}"


#: JVM logs kept in the per-user log directory (the newest; older ones are removed)
KEPT_LOGS = 20


def jvm_log() -> Path:
    """Where the Spark JVM's own output goes (its start-up warnings, and anything it prints
    later): ``$PUBMESH_SPARK_LOG``, else a file per process in ``pubmesh-spark-logs-<uid>`` in
    the temporary directory, of which the newest :data:`KEPT_LOGS` are kept (one analysis a
    minute for a day would otherwise leave 1,440 files). An error that the JVM explains there
    names the file."""
    given = os.environ.get("PUBMESH_SPARK_LOG")
    if given:
        return Path(given)
    directory = Path(tempfile.gettempdir()) / f"pubmesh-spark-logs-{os.getuid()}"
    directory.mkdir(mode=0o700, exist_ok=True)
    mode = directory.lstat()
    if mode.st_uid != os.getuid() or mode.st_mode & 0o077 or not directory.is_dir():
        # made by someone else (or opened to them): a name in it could be a link to one of
        # our files, so the log is a fresh file of our own instead
        fd, name = tempfile.mkstemp(prefix="pubmesh-spark-", suffix=".log")
        os.close(fd)
        return Path(name)
    logs = sorted(directory.glob("spark-*.log"), key=_mtime, reverse=True)
    for old in logs[KEPT_LOGS - 1 :]:
        with contextlib.suppress(OSError):  # another process's prune got there first
            old.unlink()
    return directory / f"spark-{os.getpid()}.log"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """File descriptor 2 points at ``path`` within the block (a child started inside keeps
    it), and at the terminal again after."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def session_conf(resolved: str, *, app: str, small: bool) -> list[tuple[str, str]]:
    """The Spark settings of every session we start, embedded or warm (:mod:`.warm`)."""
    local = resolved.startswith("local")
    conf = [
        ("spark.master", resolved),
        ("spark.app.name", app),
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.shuffle.partitions", str(max(2, (os.cpu_count() or 2) * 2))),
        ("spark.sql.adaptive.enabled", "true"),
        ("spark.sql.adaptive.coalescePartitions.enabled", "true"),
        # a join may use its sides' partitioning by a subset of its keys: the metrics partition
        # deliveries and expected pairs by publication once, then join them on (publication,
        # node) and aggregate per publication without shuffling them again
        ("spark.sql.requireAllClusterKeysForCoPartition", "false"),
        # broadcast joins only where adaptive execution has measured the small side: plan-time
        # estimates of exploded neighbour lists were far too small and a 16,384-node skipring
        # snapshot table ran the driver out of memory while broadcasting
        ("spark.sql.autoBroadcastJoinThreshold", "-1"),
        ("spark.sql.adaptive.autoBroadcastJoinThreshold", "10MB"),
        ("spark.sql.execution.arrow.pyspark.enabled", "true"),
        # one analysis compiles a few hundred generated classes (whole-stage code, projections,
        # orderings); Spark keeps 100, so a session that analyses again (the warm one, the
        # tests') compiled most of them again with Janino on every call
        ("spark.sql.codegen.cache.maxEntries", str(CODEGEN_CACHE)),
        ("spark.driver.extraJavaOptions", driver_java_options(local=local, small=small)),
    ]
    if local:
        conf.append(("spark.driver.memory", os.environ.get("PUBMESH_SPARK_MEMORY", "4g")))
    elif small:  # a cluster's executors, for a small input: all start-up, as the driver's
        conf.append(("spark.executor.extraJavaOptions", f"{CLIENT_COMPILER} {CODE_CACHE}"))
    return conf


def get_session(
    master: str | None = None, *, app: str = "pubmesh", small: bool = False, warm: bool = False
) -> SparkSession:
    """The shared Spark session (created on first use, reused after). ``small``: the caller
    knows the input is small (:data:`SMALL_INPUT_BYTES`), see :func:`driver_java_options`.
    ``warm``: the caller's work runs on Spark Connect too (DataFrames only, no RDDs), so with
    no master given it uses the user's warm server when one runs (:mod:`.warm`). A master
    ``sc://host:port`` is any Spark Connect server."""
    resolved = resolve_master(master)
    if resolved.startswith("sc://"):
        return _remote(resolved)
    if warm and master is None and not os.environ.get(ENV_MASTER):
        from pubmesh.analysis import warm as warm_spark

        try:
            server = warm_spark.running()
        except UserError as error:  # a state directory we must not trust: say so, go on
            print(f"warning: not using a warm Spark: {error}", file=sys.stderr)
            server = None
        if server is not None:
            return warm_spark.connect(server)  # type: ignore[no-any-return]
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.config(
        conf=SparkConf(loadDefaults=True).setAll(session_conf(resolved, app=app, small=small))
    )
    log = jvm_log()
    try:
        with _stderr_to(log):  # the JVM inherits it: its warnings go to the log, not here
            session = builder.getOrCreate()
    except Exception as error:  # the JVM did not start: say why in one line
        raise UserError(
            f"cannot start Spark (master {resolved}): {_first(error)} (the JVM's output: {log})"
        ) from None
    session.sparkContext.setLogLevel("ERROR")
    return session


def end_jvm(timeout: float = 60.0) -> None:
    """Stop this process's embedded Spark and wait for its JVM to exit.

    PySpark leaves the JVM to notice on its own that the Python process is gone (its standard
    input closes): the command returns while the JVM is still writing its last files, and
    the JVM then exits as nobody's child, so neither ``time pubmesh analyze`` nor any parent
    sees the CPU it spent (most of an analysis's: a small one showed 4 of its 38 CPU
    seconds), which the test suite's CPU budget must count.
    Called as a command ends (``pubmesh analyze``, ``sweep``, ``demo``): the session
    stops, the JVM's input is closed, and the JVM is waited for, so it is reaped here and its
    time counts as this process's. Nothing to do without an embedded JVM (a Connect session,
    or no Spark at all)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    if gateway is None or proc is None:
        return
    with contextlib.suppress(Exception):  # the JVM may be gone already
        gateway.shutdown()
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


def _first(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _remote(url: str) -> SparkSession:
    """A session on the Spark Connect server at ``url`` (``sc://host:port[/;token=...]``)."""
    from pyspark.sql import SparkSession

    try:
        return SparkSession.builder.remote(url).getOrCreate()
    except Exception as error:
        raise UserError(f"cannot reach Spark Connect at {url}: {_first(error)}") from None


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (it has no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master_of(spark: SparkSession) -> str:
    """Where ``spark`` runs, for a status line: the master URL, or the Connect server's."""
    if is_connect(spark):
        return f"Spark Connect, master {spark.conf.get('spark.master', '?')}"
    return str(spark.sparkContext.master)
