"""The node processes of a cluster: one :class:`Child` each, and no orphans, ever.

Each child is ``pubmesh node --control`` (run as ``python -m pubmesh.net.node``, which
starts faster than the whole CLI) on 127.0.0.1 with any free port. The controller speaks the
control protocol of :mod:`pubmesh.net.control` with it: commands on its stdin, and a reader
task that follows its stdout — the ``ready`` line with its address, which is its id, the
answers (a node answers in order, so the next ``result`` line answers the oldest command), a
``stats`` line every half second (what the live table shows and the overlay check reads) and
the last ``bye``. Its stderr goes to a log file, the tail of which explains a node that died
before it was ready.

A child goes through the states of :class:`ChildState`: starting → ready (it listens) →
running (booted) → left (after a planned leave; the process stays up) → stopping (told to
exit at the end of the run) → stopped; or killed (a planned crash: SIGKILL); or failed (it
exited on its own, which ``run.json`` reports under ``unexpected_exits``).

No orphans, ever: every child runs in its own process group; Ctrl-C, SIGTERM, an error or a
normal exit of the controller ends them (SIGTERM, then SIGKILL after a grace period; an
``atexit`` hook kills any survivor), and a child whose controller is killed outright hears of
it twice — its stdin closes, and Linux sends it SIGTERM (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import enum
import os
import signal
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pubmesh.net import control

#: seconds a child gets between SIGTERM and SIGKILL, and for answers at the end of a run
GRACE_SECONDS = 5.0

# --------------------------------------------------------------------------------------------
# Process-group supervision
# --------------------------------------------------------------------------------------------
#: every child process still running, by pid (= its process group)
_LIVE_CHILDREN: dict[int, subprocess.Popen[bytes] | asyncio.subprocess.Process] = {}


def _kill_survivors() -> None:
    """atexit: no child outlives its controller."""
    for pid in list(_LIVE_CHILDREN):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _LIVE_CHILDREN.pop(pid, None)


atexit.register(_kill_survivors)


def child_env(key_text: str | None) -> dict[str, str]:
    """The environment of the children: this one, the controller's pid (a child whose parent
    is already gone exits at once), the cluster key if it was generated for this run, and this
    pubmesh first on the path."""
    env = dict(os.environ)
    env["PUBMESH_PARENT_PID"] = str(os.getpid())
    if key_text is not None:
        from pubmesh.net.security import KEY_ENV

        env[KEY_ENV] = key_text
    src = str(Path(__file__).resolve().parents[3])  # .../src of src/pubmesh/net/cluster/
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# --------------------------------------------------------------------------------------------
# A child
# --------------------------------------------------------------------------------------------
class ChildState(enum.Enum):
    STARTING = "starting"  # launched; has not reported its address yet
    READY = "ready"  # listening, waiting for its start command
    RUNNING = "running"  # booted: in the overlay
    LEFT = "left"  # ran the leave protocol (a planned leave); the process is still up
    STOPPING = "stopping"  # told to exit at the end of the run
    STOPPED = "stopped"  # exited after it was told to
    KILLED = "killed"  # SIGKILLed by the controller (a planned crash)
    FAILED = "failed"  # exited on its own (or before it was ready)

    @property
    def alive(self) -> bool:
        """Whether the process takes commands."""
        return self in (ChildState.READY, ChildState.RUNNING, ChildState.LEFT)

    @property
    def label(self) -> str:
        """The word the live table shows."""
        return _LABELS[self]


_LABELS = {
    ChildState.STARTING: "launching",
    ChildState.READY: "ready",
    ChildState.RUNNING: "up",
    ChildState.LEFT: "left",
    ChildState.STOPPING: "stopping",
    ChildState.STOPPED: "exited",
    ChildState.KILLED: "killed",
    ChildState.FAILED: "failed",
}

_A = TypeVar("_A", bound=control.Answer)


@dataclass(eq=False)
class Child:
    """One node process and what the controller knows of it."""

    index: int
    role: str
    process: asyncio.subprocess.Process
    log_path: Path
    node_id: int = 0
    state: ChildState = ChildState.STARTING
    #: the latest stats line (None until the first)
    stats: control.StatsLine | None = None
    bye: control.Bye | None = None
    #: why its trace lost rows (a write error it reported), None while it is whole
    trace_error: str | None = None
    #: run time of its start command's answer
    booted_at: float | None = None
    #: it exited on its own after it was ready
    unexpected_exit: bool = False
    _ready: asyncio.Future[control.Ready] = field(init=False, repr=False)
    _waiting: deque[asyncio.Future[control.Answer]] = field(
        default_factory=deque, init=False, repr=False
    )
    _reader: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    @classmethod
    async def spawn(
        cls,
        index: int,
        role: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
    ) -> Child:
        """Start the process in its own process group and follow its stdout."""
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a run file
        with open(log_fd, "wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
                env=dict(env),
                start_new_session=True,
                limit=1 << 22,
            )
        _LIVE_CHILDREN[process.pid] = process
        child = cls(index, role, process, log_path)
        loop = asyncio.get_running_loop()
        child._ready = loop.create_future()
        child._reader = loop.create_task(child._read())
        return child

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.state.alive

    @property
    def running(self) -> bool:
        """The process has not exited (whatever its state says)."""
        return self.process.returncode is None

    async def wait_ready(self) -> control.Ready:
        """Its ready line (ConnectionError if it exited first)."""
        ready = await self._ready
        self.node_id = ready.node
        self.state = ChildState.READY
        return ready

    # ------------------------------------------------------------------ commands
    def send_nowait(self, command: control.Command) -> asyncio.Future[control.Answer]:
        """Send ``command``; the future is its answer (ConnectionError if the node is gone)."""
        future: asyncio.Future[control.Answer] = asyncio.get_running_loop().create_future()
        stdin = self.process.stdin
        if stdin is None or not self.alive() or stdin.is_closing():
            future.set_exception(ConnectionError(f"node {self.index} is not running"))
            future.exception()  # retrieved: nobody has to await it
            return future
        self._waiting.append(future)
        stdin.write((control.encode(command) + "\n").encode())
        return future

    async def request(self, command: control.Command, answer: type[_A]) -> _A:
        """Send ``command`` and wait for its answer, which must be an ``answer``
        (ConnectionError if the node is gone, ControlError if it refused the command)."""
        stdin = self.process.stdin
        if stdin is None or not self.alive():
            raise ConnectionError(f"node {self.index} is not running")
        future = self.send_nowait(command)
        with contextlib.suppress(ConnectionError):
            await stdin.drain()
        return self.expect(await future, command, answer)

    def expect(self, result: control.Answer, command: control.Command, answer: type[_A]) -> _A:
        """``result`` as the ``answer`` to ``command``, or ControlError."""
        if isinstance(result, answer):
            return result
        if isinstance(result, control.CommandFailed):
            if result.refused is not None:
                raise control.PublishRefused(f"node {self.index}: {result.error}")
            raise control.ControlError(
                f"node {self.index} refused {control.encode(command)}: {result.error}"
            )
        raise control.ControlError(
            f"node {self.index} answered {control.encode(command)} with {control.encode(result)}"
        )

    async def settle(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for the answers to the commands already sent."""
        if self._waiting:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.gather(*self._waiting, return_exceptions=True)

    # ------------------------------------------------------------------ signals
    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def kill(self) -> None:
        """A planned crash: SIGKILL its process group."""
        self.state = ChildState.KILLED
        self.signal_group(signal.SIGKILL)

    def stop(self) -> None:
        """The end of the run: tell it to exit (without leaving) if it still takes commands."""
        if self.alive():
            self.send_nowait(control.Stop())
            self.state = ChildState.STOPPING

    # ------------------------------------------------------------------ stdout
    async def _read(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        async for raw in stdout:
            try:
                reply = control.decode_reply(raw.decode("utf-8", errors="replace"))
            except control.ControlError:
                continue  # not a protocol line (a library printing on stdout): not ours
            self._on_reply(reply)
        # stdout closed: the process is gone (or going)
        await self.process.wait()
        self._on_exit()

    def _on_reply(self, reply: control.Reply) -> None:
        match reply:
            case control.Ready():
                if not self._ready.done():
                    self._ready.set_result(reply)
            case control.StatsLine():
                self.stats = reply
            case control.Bye():
                self.bye = reply
                trace = reply.stats.get("trace") or {}
                if trace.get("complete") is False and self.trace_error is None:
                    self.trace_error = trace.get("error") or f"{trace.get('rows_lost')} rows lost"
            case control.NetEvent(kind="net.trace-error"):
                if self.trace_error is None:
                    self.trace_error = str(reply.detail.get("error", reply.detail))
            case control.Delivered() | control.NetEvent() | control.Lagged():
                pass
            case _:  # an answer: to the oldest command without one
                if self._waiting:
                    future = self._waiting.popleft()
                    if not future.done():
                        future.set_result(reply)

    def _on_exit(self) -> None:
        if self.state is ChildState.STOPPING:
            self.state = ChildState.STOPPED
        elif self.state not in (ChildState.KILLED, ChildState.STOPPED):
            self.unexpected_exit = self.state is not ChildState.STARTING
            self.state = ChildState.FAILED
        _LIVE_CHILDREN.pop(self.pid, None)
        if not self._ready.done():
            self._ready.set_exception(
                ConnectionError(f"node {self.index} exited before it was ready: {self.log_tail()}")
            )
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(ConnectionError(f"node {self.index} exited"))
                future.exception()

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    async def close_reader(self, timeout: float) -> None:
        if self._reader is not None and not self._reader.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._reader, timeout)
        _LIVE_CHILDREN.pop(self.pid, None)


# --------------------------------------------------------------------------------------------
# All of them
# --------------------------------------------------------------------------------------------
async def wait_exit(children: Sequence[Child], timeout: float) -> None:
    """Wait (at most ``timeout`` seconds) until every child process has exited."""
    waits = [asyncio.ensure_future(c.process.wait()) for c in children if c.running]
    if waits:
        await asyncio.wait(waits, timeout=timeout)


async def terminate(children: Sequence[Child], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM every child still running, then SIGKILL after ``grace`` seconds; then wait for
    their readers. Afterwards no child process is left."""
    running = [c for c in children if c.running]
    for child in running:
        child.signal_group(signal.SIGTERM)
    await wait_exit(running, grace)
    for child in running:
        if child.running:
            child.signal_group(signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(child.process.wait(), 2.0)
    for child in children:
        await child.close_reader(2.0)
