"""A Spark standalone cluster on this machine: one master and one or more workers, started from
the installed PySpark (its ``spark-class``), bound to 127.0.0.1 on ephemeral ports.

It is what the tests use to check that ``--master spark://...`` takes the same jobs to a real
cluster, and what a user can use to try it::

    python -m pubmesh.analysis.standalone            # prints the master URL, Ctrl-C stops it
    pubmesh sweep GRID.toml --master spark://127.0.0.1:PORT

The master and workers are JVM processes of their own (not the driver's), each with its own
log and a worker directory under one scratch directory. They are always stopped: by
:meth:`StandaloneCluster.stop` (SIGTERM, then SIGKILL), at interpreter exit, and by the kernel
when the process that started them dies, even by SIGKILL (``PR_SET_PDEATHSIG``). The master's
REST submission server (fixed port 6066) is off, so two clusters can run side by side.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from pubmesh.analysis.spark import check_java
from pubmesh.errors import UserError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
REGISTERED = "Successfully registered with master"
#: JVM options of the master and worker daemons (see :meth:`StandaloneCluster._spawn`)
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
PR_SET_PDEATHSIG = 1


def spark_class() -> Path:
    """The ``spark-class`` launcher of the installed PySpark."""
    import pyspark

    launcher = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not launcher.exists():
        raise UserError(f"{launcher}: not found; this PySpark has no launcher scripts")
    return launcher


def _die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` that asks the kernel to SIGKILL the child when its parent dies."""
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return arm


class StandaloneCluster:
    """One master and ``workers`` workers of ``cores`` cores and ``memory`` each.

    ``env`` is added to the environment the daemons (and so the executors and their Python
    workers) run in; the driver's ``PYSPARK_PYTHON`` decides which Python the tasks use.
    """

    def __init__(
        self,
        *,
        workers: int = 1,
        cores: int = 2,
        memory: str = "2g",
        directory: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self._own_dir = directory is None
        self.dir = Path(directory or tempfile.mkdtemp(prefix="pubmesh-spark-"))
        self.env = dict(env or {})
        self.url = ""
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> str:
        """Start the master, then the workers; return the master URL once every worker has
        registered. Raises :class:`UserError` (with the log's last lines) if one does not."""
        check_java()
        atexit.register(self.stop)
        try:
            master_log = self._spawn(
                "master",
                [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            )
            found = self._wait_for(master_log, MASTER_URL, self._procs[0])
            self.url = found.group(1)
            for index in range(self.workers):
                work = self.dir / f"worker-{index}"
                work.mkdir(parents=True, exist_ok=True)
                log = self._spawn(
                    f"worker-{index}",
                    [
                        WORKER_CLASS,
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "0",
                        "--webui-port",
                        "0",
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--work-dir",
                        str(work),
                        self.url,
                    ],
                )
                self._wait_for(log, re.compile(re.escape(REGISTERED)), self._procs[-1])
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop every daemon (workers first) and remove the scratch directory if it is ours."""
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in reversed(self._procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.stop)

    def pids(self) -> list[int]:
        return [proc.pid for proc in self._procs]

    def running(self) -> bool:
        """Whether every daemon started is still alive."""
        return bool(self._procs) and all(proc.poll() is None for proc in self._procs)

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> Path:
        log = self.dir / f"{name}.log"
        env = {
            **os.environ,
            **self.env,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.dir / "logs"),
            "SPARK_PID_DIR": str(self.dir),
            "SPARK_WORKER_DIR": str(self.dir),
            # no REST submission server: it would take the fixed port 6066
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # the daemons only schedule and launch: the client compiler and one GC thread are
            # all they need, where C2 and a parallel collector spent CPU seconds at start-up
            # that the executors beside them wanted
            "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(spark_class()), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.dir,
                preexec_fn=_die_with_parent(),  # only prctl: safe between fork and exec
            )
        self._procs.append(proc)
        self._logs.append(log)
        return log

    def _wait_for(
        self, log: Path, pattern: re.Pattern[str], proc: subprocess.Popen[bytes]
    ) -> re.Match[str]:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            found = pattern.search(text)
            if found:
                return found
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        state = f"exited with {proc.returncode}" if proc.poll() is not None else "timed out"
        raise UserError(f"Spark standalone {log.stem} {state} before it was ready: {tail}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m pubmesh.analysis.standalone",
        description="Run a Spark standalone master and workers on 127.0.0.1 (ephemeral ports) "
        "until Ctrl-C; point pubmesh at it with --master URL.",
    )
    parser.add_argument("--workers", type=int, default=1, help="workers (default 1)")
    parser.add_argument("--cores", type=int, default=2, help="cores per worker (default 2)")
    parser.add_argument("--memory", default="2g", help="memory per worker (default 2g)")
    args = parser.parse_args(argv)
    cluster = StandaloneCluster(workers=args.workers, cores=args.cores, memory=args.memory)
    try:
        url = cluster.start()
    except UserError as error:
        print(f"pubmesh: {error}", file=sys.stderr)
        return 2
    print(f"Spark standalone master {url} ({args.workers} worker(s)); Ctrl-C stops it")
    print(f"  e.g. pubmesh sweep scenarios/grids/paper004_failures.toml --master {url}")
    with contextlib.suppress(KeyboardInterrupt):
        while cluster.running():
            time.sleep(0.5)
    cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
