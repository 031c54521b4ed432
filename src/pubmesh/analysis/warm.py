"""A warm Spark to come back to: one long-lived local Spark Connect server per user.

Without it, every ``pubmesh analyze`` of a small trace pays for a JVM start and for the JIT
warming up on the same plans again, which is most of its time. ``pubmesh spark start``
starts Spark once, in a background process of its own, with the Spark Connect plugin
(which PySpark 4 ships: ``org.apache.spark.sql.connect.SparkConnectPlugin``); later
``pubmesh analyze`` calls find it and send their plans to it over gRPC instead of starting a
JVM. Each call gets its own server-side session, so one analysis's settings never leak into
the next.

Who can use it (the attacker's view): the server listens on 127.0.0.1 only, on a port the
kernel picks, and refuses every request without the token it was started with (Spark
Connect's ``spark.connect.authenticate.token``, a random 256-bit secret). The token and the
port are kept in ``warm.json`` (mode 0600) in a directory only the user can enter (0700,
owned by the user: ``$PUBMESH_SPARK_STATE``, else ``pubmesh-spark-<uid>`` in the temporary
directory), so another local user can neither read the token nor pass it; the user's own
processes share the server by design. The token travels in the environment, never on a
command line that ``ps`` shows.

Warm-up: right after it listens, the server analyses a small simulated run of its own in
the background (:func:`warm_up`), so that the first real analysis does not pay for the
JIT compilers' and the code generator's first pass.

Lifetime: the server stops by itself after ``--idle`` minutes with no analysis (default
30; every client touches ``used`` in the state directory, and a running Spark job counts as
use), on ``pubmesh spark stop``, or on SIGTERM. ``pubmesh spark status`` says whether it
runs, where, since when and how long until the idle stop.

What it does not serve: ``pubmesh sweep`` and ``pubmesh demo`` run their simulations as
Spark tasks through the RDD API, which Spark Connect does not offer; they start an embedded
Spark of their own. ``--master`` and ``$PUBMESH_SPARK_MASTER`` choose a cluster (or
``sc://host:port``, any Spark Connect server) over the warm one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubmesh.errors import UserError
from pubmesh.private import refuse_open_directory

ENV_STATE = "PUBMESH_SPARK_STATE"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
#: minutes without an analysis after which the server stops itself
DEFAULT_IDLE_MINUTES = 30.0
#: how long ``start`` waits for the JVM and the Connect port
START_TIMEOUT = 120.0
#: what the server process's command line holds (``stop`` signals only such a process)
SERVE_MODULE = "pubmesh.analysis.warm"


def state_dir() -> Path:
    """The user's private directory for the server's address, token and log: created 0700;
    refused if someone else owns it or others can enter it (a planted directory could
    hand us another user's server, or read our token)."""
    given = os.environ.get(ENV_STATE)
    path = Path(given) if given else Path(tempfile.gettempdir()) / f"pubmesh-spark-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{path}: cannot use it for the warm Spark's state ({error})") from None
    refuse_open_directory(
        path,
        "the warm Spark keeps its token there",
        f"remove it or set ${ENV_STATE} to a private directory",
        mask=0o077,
    )
    return path


@dataclass(frozen=True)
class Warm:
    """A running server as ``warm.json`` records it."""

    port: int
    token: str
    pid: int
    started: float
    idle_minutes: float
    pyspark: str

    @property
    def url(self) -> str:
        # "localhost": with a token, PySpark's client uses TLS unless the host is local
        return f"sc://localhost:{self.port}"


def _record(directory: Path) -> Path:
    return directory / "warm.json"


def _used(directory: Path) -> Path:
    return directory / "used"


def log_path(directory: Path | None = None) -> Path:
    return (directory or state_dir()) / "spark.log"


def _read(directory: Path) -> Warm | None:
    try:
        data = json.loads(_record(directory).read_text())
        return Warm(
            port=int(data["port"]),
            token=str(data["token"]),
            pid=int(data["pid"]),
            started=float(data["started"]),
            idle_minutes=float(data["idle_minutes"]),
            pyspark=str(data["pyspark"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(directory: Path, warm: Warm) -> None:
    """Atomically, 0600 from the first byte (the token is in it)."""
    target = _record(directory)
    temporary = target.with_suffix(".tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(warm.__dict__, out)
    temporary.replace(target)


def is_server(pid: int) -> bool:
    """Whether ``pid`` is alive and is our server (a recycled pid is someone else's)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return SERVE_MODULE.encode() in command


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def running(directory: Path | None = None) -> Warm | None:
    """The user's warm server if one is recorded, alive, of this PySpark, and listening;
    a stale record (the process died) is removed."""
    from pyspark.version import __version__

    directory = directory or state_dir()
    warm = _read(directory)
    if warm is None:
        return None
    if not is_server(warm.pid):
        with contextlib.suppress(FileNotFoundError):
            _record(directory).unlink()
        return None
    if warm.pyspark != __version__ or not _listening(warm.port):
        return None
    return warm


def touch(directory: Path | None = None) -> None:
    """Mark the server used now (its idle clock restarts)."""
    _used(directory or state_dir()).touch()


def connect(warm: Warm) -> Any:
    """A new Spark Connect session on ``warm`` (the token through the environment, where
    PySpark's client reads it)."""
    os.environ[TOKEN_ENV] = warm.token
    touch()
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(warm.url).getOrCreate()


def start(
    *,
    idle_minutes: float = DEFAULT_IDLE_MINUTES,
    memory: str | None = None,
    prewarm: bool = True,
) -> Warm:
    """Start the server in the background (or find it running) and wait until it listens;
    ``prewarm``: it then warms itself up (:func:`warm_up`)."""
    from pubmesh.analysis.spark import check_java

    directory = state_dir()
    found = running(directory)
    if found is not None:
        return found
    check_java()
    stop(directory)  # a server this PySpark cannot use (another version), or a stale record
    _warmed(directory).unlink(missing_ok=True)
    log = log_path(directory)
    env = dict(os.environ)
    env[TOKEN_ENV] = secrets.token_urlsafe(32)
    if memory:
        env["PUBMESH_SPARK_MEMORY"] = memory
    command = [sys.executable, "-m", SERVE_MODULE, "--state", str(directory)]
    command += ["--idle", str(idle_minutes)] + ([] if prewarm else ["--no-warm-up"])
    with log.open("ab") as out:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
            start_new_session=True, cwd="/",
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        warm = running(directory)
        if warm is not None and warm.pid == child.pid:
            return warm
        if child.poll() is not None:
            raise UserError(f"the warm Spark did not start (exit {child.returncode}); see {log}")
        time.sleep(0.2)
    child.terminate()
    raise UserError(f"the warm Spark did not listen within {START_TIMEOUT:.0f} s; see {log}")


def stop(directory: Path | None = None, *, timeout: float = 30.0) -> Warm | None:
    """Stop the recorded server (SIGTERM, then SIGKILL after ``timeout``); the stopped
    server's record, or None when none ran."""
    directory = directory or state_dir()
    warm = _read(directory)
    if warm is None or not is_server(warm.pid):
        _record(directory).unlink(missing_ok=True)
        return None
    os.kill(warm.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_server(warm.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_server(warm.pid):
        os.kill(warm.pid, signal.SIGKILL)
    _record(directory).unlink(missing_ok=True)
    return warm


def idle_for(directory: Path, warm: Warm) -> float:
    """Seconds since the last analysis (or since the start)."""
    try:
        last = max(_used(directory).stat().st_mtime, warm.started)
    except OSError:
        last = warm.started
    return max(0.0, time.time() - last)


def _connect_port(session: Any) -> int:
    """The port the Connect plugin bound (we asked for any free one): its service object's
    ``localPort``, a Scala ``object``, reached through Java reflection."""
    jvm = session._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    service = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.connect.service.SparkConnectService$", True, loader
    )
    return int(service.getField("MODULE$").get(None).localPort())


#: the run :func:`warm_up` analyses: the smallest shipped gossip reproduction, shortened
WARM_UP_RUN = ("paper004", ["workload.publications=20", "run.duration=60"])


def _warmed(directory: Path) -> Path:
    return directory / "warmed"


def warmed_up(directory: Path) -> bool:
    return _warmed(directory).exists()


def warm_up(session: Any, directory: Path) -> None:
    """One whole analysis of a small simulated run inside the server, in the background,
    right after it starts listening: the JVM's compilers see Spark's planning and execution
    code, and the classes Spark generates for the analysis's plans (the same for any trace)
    land in the codegen cache, so the user's first analysis runs as warm as a later one
    (otherwise the server's first call costs what an embedded one does). On a
    session of its own; a failure is logged and changes nothing else."""
    from pubmesh.analysis.job import analyze
    from pubmesh.catalog import find
    from pubmesh.scenario.model import load_scenario
    from pubmesh.sim.runner import run_scenario

    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="pubmesh-warm-up-") as tmp:
            name, overrides = WARM_UP_RUN
            run_scenario(load_scenario(find(name), overrides), Path(tmp) / "run")
            analyze(session.newSession(), [Path(tmp) / "run"], Path(tmp) / "out", report=False)
    except Exception as error:  # the server still serves; the first call is merely colder
        print(f"warm-up failed: {type(error).__name__}: {error}", flush=True)
        return
    _warmed(directory).touch()
    print(f"warmed up in {time.perf_counter() - started:.1f} s", flush=True)


def serve(directory: Path, idle_minutes: float, *, prewarm: bool = True) -> int:
    """The server process: Spark with the Connect plugin, until idle, stopped or killed."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    from pyspark.version import __version__

    from pubmesh.analysis.spark import session_conf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if TOKEN_ENV not in os.environ:  # started by hand: make one, never run open
        os.environ[TOKEN_ENV] = secrets.token_urlsafe(32)
    conf = SparkConf(loadDefaults=False)
    conf.setAll(session_conf("local[*]", app="pubmesh-warm", small=False))
    conf.setAll(
        [
            ("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin"),
            ("spark.connect.grpc.binding.address", "127.0.0.1"),
            ("spark.connect.grpc.binding.port", "0"),
        ]
    )
    session = SparkSession(SparkContext.getOrCreate(conf))
    session.sparkContext.setLogLevel("ERROR")
    warm = Warm(
        port=_connect_port(session),
        token=os.environ[TOKEN_ENV],
        pid=os.getpid(),
        started=time.time(),
        idle_minutes=idle_minutes,
        pyspark=__version__,
    )
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda number, _frame: stopping.append(number))
    signal.signal(signal.SIGINT, lambda number, _frame: stopping.append(number))
    _write(directory, warm)
    print(f"pubmesh warm Spark: {warm.url} (pid {warm.pid})", flush=True)
    if prewarm:
        threading.Thread(target=warm_up, args=(session, directory), daemon=True).start()
    tracker = session.sparkContext.statusTracker()
    try:
        while not stopping:
            time.sleep(0.5)
            if tracker.getActiveJobsIds():
                touch(directory)
            elif idle_for(directory, warm) > idle_minutes * 60:
                print(f"idle for {idle_minutes:g} min: stopping", flush=True)
                break
    finally:
        if _read(directory) == warm:
            _record(directory).unlink(missing_ok=True)
        session.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {SERVE_MODULE}")
    parser.add_argument("--state", required=True)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE_MINUTES)
    parser.add_argument("--no-warm-up", dest="prewarm", action="store_false")
    args = parser.parse_args(argv)
    return serve(Path(args.state), args.idle, prewarm=args.prewarm)


if __name__ == "__main__":
    sys.exit(main())
