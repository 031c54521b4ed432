"""The helpers the network tests share: in-process nodes of the ``nettest`` stack (its
definition, with the simulator's ``probe`` stack, is in :mod:`support.probestacks`), node
processes of the real stacks, the shell on a pseudo-terminal, small clusters.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from pubmesh.net.runtime import NodeRuntime
from pubmesh.net.security import ClusterKey
from pubmesh.net.transport import NetConfig
from pubmesh.proto.core import NodeId
from pubmesh.stacks.base import discovered_stacks
from support.probestacks import NetTestNode

#: the tests' cluster key (a key is 128+ random bits in hex: security.parse_key_text)
KEY_TEXT = "5e7c1d0a9b3f48e2a6d4c8b1f0e9273d"
KEY = ClusterKey.from_text(KEY_TEXT)
OTHER_KEY = ClusterKey.from_text("a0c4e19f7b2d5836c1f0e8a7d9b3c642")

#: a command prefix that runs node processes before the suite's other work (the tests run as
#: root): for tests that time what a protocol does, not what the other xdist worker takes
FIRST = ("nice", "-n", "-10")
FAST = NetConfig(dial_attempts=3, backoff_initial=0.02, backoff_max=0.1, tick=0.1)


async def start_node(
    contacts: tuple[NodeId, ...] = (),
    *,
    key: ClusterKey = KEY,
    config: NetConfig = FAST,
    boot: bool = True,
    **kwargs: Any,
) -> NodeRuntime:
    """A nettest node on a free loopback port (``boot=False``: listening, not yet started)."""
    node = NodeRuntime("nettest", key=key, contacts=contacts, config=config, **kwargs)
    await node.start(boot=boot)
    return node


def stack_of(node: NodeRuntime) -> NetTestNode:
    assert isinstance(node.node, NetTestNode)
    return node.node


async def wait_for(predicate: Any, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


# ------------------------------------------------------------------------------------------
# Node processes (for the CLI, cluster and hostile-input tests)
# ------------------------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parents[2]


def real_stacks() -> list[str]:
    """The stacks the network tests run: every stack of a spec module (the runtime probe
    stacks registered by test modules excluded)."""
    return discovered_stacks()


def node_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PUBMESH_KEY"] = KEY_TEXT
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    env.update(extra)
    return env


class ShellOnPty:
    """``pubmesh node`` with the given arguments on a pseudo-terminal, so it opens its shell:
    :meth:`type_line` types a line, :meth:`read_until` waits for text on the screen (and fails
    naming what it saw). Use as a context manager: the process is killed if still running."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        master, slave = pty.openpty()
        self.master = master
        self.seen = b""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pubmesh", "node", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env if env is not None else node_env(),
            start_new_session=True,
        )
        os.close(slave)

    def read_until(self, needle: bytes, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {needle!r} in {self.seen.decode(errors='replace')[-1500:]}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096)
                except OSError:
                    break

    def type_line(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def __enter__(self) -> ShellOnPty:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        os.close(self.master)


class BackgroundLoop(abc.ABC):
    """A loop on a daemon thread for the length of a ``with`` block: subclasses write
    ``_run`` (checking ``self._stop``) and may extend ``__exit__`` to release what they hold."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @abc.abstractmethod
    def _run(self) -> None:
        """The loop: runs on the thread until ``self._stop`` is set."""

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class NodeProcess:
    """``pubmesh node`` in JSON mode as a child process, with its stdout parsed on a thread."""

    def __init__(
        self,
        args: list[str],
        *,
        log: Path,
        cli: bool = False,
        env: Any = None,
        prefix: Sequence[str] = (),
        cwd: Path | None = None,
    ) -> None:
        """``prefix``: a command that execs the node (``unshare ... sh -c '...; exec "$@"'``),
        so the process is still the node's; ``cwd``: where it runs (relative paths)."""
        module = ["-m", "pubmesh", "node"] if cli else ["-m", "pubmesh.net.node"]
        self.log = log
        with open(log, "wb") as stderr:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, *module, "--json", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env or node_env(),
                start_new_session=True,
                cwd=cwd,
            )
        self.records: list[dict[str, Any]] = []
        self._results: queue.Queue[dict[str, Any]] = queue.Queue()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self.wait_event(lambda r: r.get("event") == "ready", 30, "ready")
        self.node_id: int = ready["node"]
        self.address: str = ready["address"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                continue
            with self._changed:
                self.records.append(record)
                if record.get("event") == "result":
                    self._results.put(record)
                self._changed.notify_all()
        with self._changed:  # the end of its output: a waiter may stop waiting now
            self._changed.notify_all()

    def wait_event(
        self, predicate: Any, timeout: float = 10.0, what: str = "event", after: int = 0
    ) -> Any:
        """The first record from index ``after`` on that satisfies ``predicate``, waiting for
        it up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for record in self.records[after:]:
                    if predicate(record):
                        return record
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._pending()):
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise AssertionError(f"no {what} from node (exit {self.proc.poll()}): {tail}")
                self._changed.wait(min(left, 0.2))

    def _pending(self) -> bool:
        """Whether the node's output may still hold records: the reader has not reached its
        end. A node that has exited may have written its last lines (its ``bye``) to the pipe
        before the reader took them; a waiter that gave up on exit alone missed them."""
        return self._reader.is_alive()

    def mark(self) -> int:
        """How many records there are now: an ``after`` for :meth:`wait_event`."""
        with self._changed:
            return len(self.records)

    def count(self, predicate: Any) -> int:
        return len(self.matching(predicate))

    def matching(self, predicate: Any) -> list[dict[str, Any]]:
        """The records so far that satisfy ``predicate``."""
        with self._changed:
            return [r for r in self.records if predicate(r)]

    def command(self, request: dict[str, Any] | str, timeout: float = 10.0) -> dict[str, Any]:
        assert self.proc.stdin is not None
        line = request if isinstance(request, str) else json.dumps(request)
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        return self._results.get(timeout=timeout)

    def deliveries(self) -> set[int]:
        with self._changed:
            return {r["pub_id"] for r in self.records if r.get("event") == "deliver"}

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
            raise AssertionError("node did not stop in time") from None


def publish_until_delivered(
    publisher: NodeProcess,
    subscribers: Sequence[NodeProcess],
    topic: str,
    timeout: float,
    what: str = "the topic's swarm did not form",
) -> set[int]:
    """Publish a probe on ``topic`` every 0.2 s until each subscriber has delivered one (the
    swarm has formed, or a node is back); the probes' ids. AssertionError ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    probes: set[int] = set()
    while True:
        probes.add(publisher.command({"op": "publish", "topic": topic, "payload": "p"})["pub_id"])
        time.sleep(0.2)
        if all(probes & subscriber.deliveries() for subscriber in subscribers):
            return probes
        assert time.monotonic() < deadline, what


def small_cluster(stack: str, peers: int, tmp: Path, **trace: str) -> list[NodeProcess]:
    """A contact (or the skipring supervisor) and ``peers`` nodes joined through it; node 0
    is the contact. Extra keyword ``trace_dirs=1`` gives every node a --trace-dir."""
    from pubmesh.stacks.base import get_stack

    spec = get_stack(stack)
    roles = spec.infrastructure(peers + 1, spec.params_type())
    first_role = roles.get(0, "peer")
    nodes: list[NodeProcess] = []

    def extra(i: int) -> list[str]:
        return ["--trace-dir", str(tmp / f"trace-{i}")] if trace.get("trace_dirs") else []

    nodes.append(
        NodeProcess(
            ["--stack", stack, "--listen", "127.0.0.1:0", "--role", first_role, *extra(0)],
            log=tmp / "node-0.log",
        )
    )
    for i in range(1, peers + 1):
        nodes.append(
            NodeProcess(
                [
                    "--stack",
                    stack,
                    "--listen",
                    "127.0.0.1:0",
                    "--contact",
                    nodes[0].address,
                    *extra(i),
                ],
                log=tmp / f"node-{i}.log",
            )
        )
    return nodes
