"""``pubmesh node``'s process: one node, a shell on a terminal, JSON lines otherwise.

:class:`NodeProcess` runs a :class:`~pubmesh.net.runtime.NodeRuntime` with the options of
:mod:`pubmesh.net.node.options`: it prints deliveries and events (a shell line each, or one
JSON object of :mod:`pubmesh.net.control`), reads commands from stdin (:class:`StdinReader`,
shell lines or JSON objects), answers them, and ends on SIGTERM, Ctrl-C or, in ``--control``
mode, when its stdin closes. Its stdout is a :class:`~pubmesh.net.output.LineWriter`: a reader
that falls behind loses delivery, event and stats lines (said in ``lagged`` lines), never
answers, and never the node.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TextIO

from pubmesh.errors import UserError
from pubmesh.net import control
from pubmesh.net.address import format_id
from pubmesh.net.admission import InvalidCommand, PublicationTooLarge
from pubmesh.net.control import PublishRefused
from pubmesh.net.events import (
    EVENT_LOGGED,
    TROUBLE,
    TROUBLE_OVER,
    for_people,
    repeats_trouble,
    with_addresses,
)
from pubmesh.net.output import LineWriter
from pubmesh.net.runtime import MISWIRED, NodeRuntime, published_at
from pubmesh.net.runtime_stats import mode_lines, mode_of
from pubmesh.proto.core import Deliver
from pubmesh.scenario.workload import workload_payload

if TYPE_CHECKING:
    from pubmesh.net.metrics import MetricsServer
from pubmesh.net.node.options import NodeOptions, add_parser, options_from_args

#: stdout lines dropped while the reader is behind (pubmesh.net.output); the rest never are
_DROPPABLE = (control.Delivered, control.NetEvent, control.StatsLine)
#: control characters as the shell shows them: C0 (but tab and line break), DEL and C1, escaped
_SHOW_CONTROLS = {
    c: f"\\x{c:02x}"
    for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))
    if c not in (0x09, 0x0A)
}
#: and a publication's line breaks
_SHOW_LINES = {0x0A: "\\n", 0x0D: "\\r"}

SHELL_HELP = """\
commands:
  subscribe TOPIC          deliver publications on TOPIC
  subscribe TOPIC --history all|N|DURATION
                           and the topic's past: all, the newest N, or the last 90s,
                           5m, 1h (as far as the stack retains it), shown as
                           "replayed" with the time each was published
  unsubscribe TOPIC        stop delivering TOPIC
  publish TOPIC MESSAGE    publish MESSAGE on TOPIC
  neighbors                overlay neighbours per topic
  stats                    a summary of this node (stats --json: every counter)
  help                     this list
  quit                     leave gracefully and exit
content-based stacks (chord) also take a filter and attributes, as JSON objects:
  subscribe TOPIC FILTER-JSON
                           deliver only the publications whose attributes match, e.g.
                           subscribe quotes {"symbol": "s3", "price": {"lt": 100}}
                           (operators: eq ne lt le gt ge prefix in; a bare value is eq)
  publish TOPIC MESSAGE ATTRIBUTES-JSON
                           attributes (strings or numbers) end the line, e.g.
                           publish quotes tick {"symbol": "s3", "price": 99.5}"""


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if options.control:
        _die_with_parent()
    with contextlib.suppress(AttributeError, ValueError, OSError):
        import faulthandler  # `kill -USR1 PID` prints where every thread is, for debugging

        faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stderr)
    return asyncio.run(NodeProcess(options).main())


PROMPT = "pubmesh> "
#: back to the line's start and clear it (a shell's news is drawn over the prompt line)
CLEAR_LINE = "\r\x1b[K"


def _typed() -> str:
    """What the person has typed after the prompt so far (readline's buffer; "" without)."""
    try:
        import readline
    except ImportError:
        return ""
    return readline.get_line_buffer()


def _addresses(ids: Iterable[int]) -> str:
    return ", ".join(format_id(i) for i in ids)


def summary(stats: Mapping[str, Any], neighbors: Mapping[str, Iterable[int]]) -> str:
    """``stats`` for a person: a few lines, peers by address (``stats --json``: all of it)."""
    transport = stats.get("transport") or {}
    memory = stats.get("memory") or {}
    lines = [
        f"node {stats.get('address')} ({stats.get('stack')}, {stats.get('role')}), "
        f"up {stats.get('uptime', 0):.0f} s",
        # how it runs: shared key or identity, signed or not, its ACL, its data directory
        *mode_lines(stats.get("mode") or {}),
        f"deliveries {stats.get('deliveries', 0):,}, published {stats.get('published', 0):,}"
        + (f", refused {sum(stats['refused'].values()):,}" if stats.get("refused") else ""),
    ]
    for topic, ids in sorted(neighbors.items()):
        peers = sorted(ids)
        lines.append(f"{topic or 'overlay'}: {len(peers)} neighbours {_addresses(peers)}".rstrip())
    connected = sorted(transport.get("peers_connected") or [])
    if connected:
        lines.append(f"connected to {_addresses(connected)}")
    lines.append(
        f"connections {len(connected)}, frames in {transport.get('frames_received', 0):,} / out "
        f"{transport.get('frames_sent', 0):,}, bytes in {transport.get('bytes_received', 0):,} "
        f"/ out {transport.get('bytes_sent', 0):,}"
    )
    trouble = {
        **{f"rejected {k}": v for k, v in (transport.get("rejected") or {}).items()},
        **{f"dropped {k}": v for k, v in (transport.get("dropped") or {}).items()},
    }
    if trouble:
        lines.append(", ".join(f"{k} {v:,}" for k, v in sorted(trouble.items())))
    if memory:
        used, budget = memory.get("used", 0), memory.get("budget", 0)
        lines.append(f"memory {used / 1024:,.0f} KiB of {budget / 1048576:,.0f} MiB")
    if stats.get("alone"):
        lines.append("alone: no neighbours, no connections")
    for trouble in stats.get("troubles") or []:
        since = time.strftime("%H:%M:%S", time.localtime(trouble.get("since", 0)))
        lines.append(
            f"{trouble.get('who') or trouble.get('address')}: {trouble.get('state')} since {since}"
            f" ({trouble.get('count', 0):,} times)"
        )
    lines.append("(stats --json: every counter)")
    return "\n".join(lines)


def cannot_listen(error: OSError, host: str) -> str:
    """Why a listening socket failed, and what to do: a port in use is the common case."""
    if error.errno == errno.EADDRINUSE or "address already in use" in str(error):
        return (
            f"the port is in use (another node on it?): pick a free one, or {host}:0 for any "
            "free port (the node prints the one it got)"
        )
    return f"cannot listen ({error.strerror or error})"


def _die_with_parent() -> None:
    """Ask Linux to send SIGTERM when the parent (the cluster) dies; if it already has, go."""
    parent = os.environ.get("PUBMESH_PARENT_PID")
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if parent is not None and parent.isdigit() and os.getppid() != int(parent):
        raise SystemExit(3)


# --------------------------------------------------------------------------------------------
# The process
# --------------------------------------------------------------------------------------------
class NodeProcess:
    """The node, its stdin reader and its output (a shell or JSON lines)."""

    def __init__(self, options: NodeOptions, out: TextIO | None = None) -> None:
        self.options = options
        self.out = out or sys.stdout
        #: stdout through a bounded buffer and a thread (pubmesh.net.output): a reader that
        #: stops reading costs it lines, never the node its peers
        self.lines = LineWriter(self.out, self._lagged_line, limit=options.stdout_buffer)
        self.runtime = NodeRuntime(
            options.spec,
            key=options.key,
            identity=options.identity,
            sign=options.sign,
            acl=options.acl,
            revocations=options.revocations,
            listen=options.listen,
            contacts=options.contacts,
            role=options.role,
            params=options.params,
            seed=options.seed,
            trace_dir=options.trace_dir,
            trace_messages=options.trace_messages,
            snapshot_interval=options.snapshot_interval,
            config=options.config,
            data_dir=options.data_dir,
        )
        # what stdout holds for its reader counts in the node's memory budget
        self.runtime.application_queues.append(lambda: self.lines.pending)
        self.stop = asyncio.Event()
        self.leave_on_stop = True
        self.shell = not options.json_mode

    # ------------------------------------------------------------------ output
    def emit(self, reply: control.Reply) -> None:
        """One line of the control protocol on stdout (JSON mode only). Deliveries, network
        events and stats lines are dropped while the reader is a megabyte behind; answers
        never are (pubmesh.net.output)."""
        if self.shell:
            return
        self.lines.write(control.encode(reply), droppable=isinstance(reply, _DROPPABLE))

    def say(self, text: str, *, droppable: bool = False) -> None:
        """A line for the person at the shell. Control characters (other than our own line
        breaks) are shown escaped: a publication or a peer's refusal reason cannot move the
        cursor, recolour or retitle the terminal. A droppable line is news between commands
        (a delivery, a neighbour, a network event): it is drawn over the prompt line, and the
        prompt and whatever was typed so far are drawn again below it."""
        if not self.shell:
            return
        shown = CLEAR_LINE + text.translate(_SHOW_CONTROLS).lstrip("\n")
        if droppable:
            if self.lines.write(shown, droppable=True):
                self.lines.write(PROMPT + _typed(), droppable=True, end="")
            return
        self.lines.write(shown)  # an answer: input() draws the next prompt

    async def _serve_metrics(self) -> MetricsServer | None:
        """The /metrics and /healthz server of ``--metrics`` (pubmesh.net.metrics), started."""
        if self.options.metrics is None:
            return None
        from pubmesh.net.metrics import MetricsServer  # prometheus-client: only when asked

        host, port = self.options.metrics
        server = MetricsServer(
            self.runtime, host, port, extra_drops=lambda: {"stdout": self.lines.dropped}
        )
        try:
            await server.start()
        except OSError as error:
            await self.runtime.close()
            raise UserError(f"--metrics {host}:{port}: {cannot_listen(error, host)}") from None
        return server

    def _lagged_line(self, dropped: int) -> str:
        """The line that tells the reader it missed ``dropped`` lines (on the writer's thread)."""
        if self.shell:
            return f"({dropped} lines dropped: this terminal did not keep up)"
        return control.encode(control.Lagged(dropped=dropped, t=self.runtime.wall()))

    def _statistics(self) -> dict[str, Any]:
        """The runtime's counters and this process's stdout."""
        stats = self.runtime.statistics().as_dict()
        stats["stdout"] = {
            "dropped": self.lines.dropped,
            "lagged": self.lines.episodes,
            "pending": self.lines.pending,
        }
        return stats

    # ------------------------------------------------------------------ main
    async def main(self) -> int:
        runtime = self.runtime
        try:
            await runtime.start(boot=not self.options.control)
        except OSError as error:
            host, port = self.options.listen
            raise UserError(f"--listen {host}:{port}: {cannot_listen(error, host)}") from None
        metrics = await self._serve_metrics()
        # what the imports and the trace's warm-up made lives as long as the process: out of
        # the collector's sight (gc.freeze), a full collection walks the node's own objects
        # only. Every node of a cluster runs the same code on the same load, so their full
        # collections came at about the same moment, and on two cores 32 of them at once held
        # every publication for up to a second (the cluster's p99 latency tails)
        gc.freeze()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        runtime.delivery_callbacks.append(self._on_delivery)
        runtime.event_callbacks.append(self._on_event)
        if self.shell:
            # the shell shows each event once, in its own line: not again as a log line on
            # the same terminal (piped, the JSON channel and stderr are read apart: both stay)
            for handler in logging.getLogger().handlers:
                handler.addFilter(lambda record: not hasattr(record, EVENT_LOGGED))
        self.emit(
            control.Ready(
                node=runtime.node_id,
                address=format_id(runtime.node_id),
                stack=runtime.spec.name,
                role=runtime.role,
                pid=os.getpid(),
                t=runtime.wall(),
                metrics=metrics.address if metrics is not None else None,
                mode=asdict(mode_of(runtime)),
            )
        )
        if metrics is not None:
            self.say(f"metrics: http://{metrics.address}/metrics")
        self.say(
            f"pubmesh node {format_id(runtime.node_id)} ({runtime.spec.name}, "
            f"{runtime.role}); type 'help' for commands"
        )
        for line in mode_lines(asdict(mode_of(runtime))):
            self.say(line)
        for topic in self.options.subscribe:
            runtime.subscribe(topic)
        stats_task = None
        if self.options.stats_interval > 0 and not self.shell:
            stats_task = loop.create_task(self._stats_loop(self.options.stats_interval))
        if self.shell:
            stats_task = loop.create_task(self._neighbour_news())
        if self.shell:  # the banner is on the screen before input() draws the prompt
            await asyncio.to_thread(self.lines.drain, 5.0)
        reader = StdinReader(loop, self._on_line, self._on_eof, prompt=self.shell)
        reader.start()
        await self.stop.wait()
        if stats_task is not None:
            stats_task.cancel()
        await runtime.close(
            leave=self.leave_on_stop and runtime.booted, linger=self.options.leave_linger
        )
        self.emit(control.Bye(node=runtime.node_id, t=runtime.wall(), stats=self._statistics()))
        self.say("bye")
        if metrics is not None:
            await metrics.close()
        # the last lines reach a reader that reads, within a bound: one that never will cannot
        # keep the process from exiting
        self.lines.close(timeout=5.0)
        return 0

    def _on_signal(self, signum: int) -> None:
        self.leave_on_stop = True
        self.stop.set()

    def _on_eof(self) -> None:
        if self.options.control:
            self.leave_on_stop = False
            self.stop.set()

    async def _neighbour_news(self) -> None:
        """The shell says when an overlay neighbour comes or goes, per topic (once a second
        at most: a churning overlay cannot flood the terminal)."""
        before: dict[str, set[int]] = {}
        while True:
            await asyncio.sleep(1.0)
            now = {topic: set(ids) for topic, ids in self.runtime.neighbors().items()}
            for topic in sorted(set(before) | set(now)):
                came = sorted(now.get(topic, set()) - before.get(topic, set()))
                went = sorted(before.get(topic, set()) - now.get(topic, set()))
                name = topic or "overlay"
                if came:
                    self.say(f"({name}: neighbour up {_addresses(came)})", droppable=True)
                if went:
                    self.say(f"({name}: neighbour down {_addresses(went)})", droppable=True)
            before = now

    async def _stats_loop(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.emit(self._stats_line())

    def _stats_line(self) -> control.StatsLine:
        runtime = self.runtime
        transport = runtime.transport
        counters = transport.counters if transport is not None else {}
        neighbors = runtime.neighbors()
        return control.StatsLine(
            node=runtime.node_id,
            address=format_id(runtime.node_id),
            neighbor_addresses=_neighbor_addresses(neighbors),
            t=runtime.wall(),
            booted=runtime.booted,
            deliveries=runtime.deliveries,
            published=runtime.published,
            subscriptions=tuple(sorted(runtime.subscribed)),
            neighbors=_neighbors(neighbors),
            frames_sent=counters.get("frames_sent", 0),
            frames_received=counters.get("frames_received", 0),
            dropped=sum(transport.drops.values()) if transport is not None else 0,
            rejected=sum(transport.rejections.values()) if transport is not None else 0,
            peer_down=runtime.peer_down_notices,
            handler_errors=runtime.handler_errors,
        )

    # ------------------------------------------------------------------ events
    def _on_delivery(self, delivery: Deliver, t: float) -> None:
        attributes = dict(delivery.attributes) if delivery.attributes else None
        if self.shell:
            text = delivery.payload.decode("utf-8", errors="replace")
            if attributes:
                text += " " + json.dumps(attributes, default=str)
            # a publication's own line breaks too: it cannot forge lines of its own
            topic, text = (s.translate(_SHOW_LINES) for s in (delivery.topic, text))
            how = f"{delivery.hops} hops" + (", replayed" if delivery.replayed else "")
            published = published_at(delivery, t) if delivery.replayed else None
            if published is not None:
                how += ", published " + time.strftime("%H:%M:%S", time.localtime(published))
            self.say(f"\n[{topic}] #{delivery.pub_id} ({how}): {text}", droppable=True)
        elif self.options.delivery_lines:
            self.emit(
                control.Delivered(
                    topic=delivery.topic,
                    pub_id=delivery.pub_id,
                    hops=delivery.hops,
                    size=len(delivery.payload),
                    payload=delivery.payload[:200].decode("utf-8", errors="replace"),
                    t=t,
                    attributes=attributes,
                    # only on replayed deliveries: the live ones' lines stay as they were
                    replayed=True if delivery.replayed else None,
                    published=published_at(delivery, t) if delivery.replayed else None,
                )
            )

    def _on_event(self, kind: str, detail: Any) -> None:
        if kind == "net.trace-error" and not self.shell:
            print(f"pubmesh: {detail['error']}", file=sys.stderr, flush=True)
        if kind == MISWIRED:
            line = f"{format_id(detail['peer'])}: {detail['problem']}"
            if self.shell:
                self.say(f"\n(miswired: {line})")
            else:
                print(f"pubmesh: {line}", file=sys.stderr, flush=True)
                self._emit_event(kind, detail)
        if kind in (TROUBLE, TROUBLE_OVER):
            # a peer that cannot be reached or refuses this node, in one sentence, once; the
            # drops, peer-downs and refusals that repeat it are not shown (events.py)
            if self.shell:
                self.say(f"\n{detail['message']}")
                self.lines.write(PROMPT + _typed(), droppable=True, end="")
            else:
                self._emit_event(kind, detail)
            return
        if kind.startswith("net."):
            # the JSON channel keeps every refusal (one record per connection: scripts match
            # them by remote address); drops and peer-downs of a trouble said are left out
            if repeats_trouble(self.runtime, kind, detail) and (
                self.shell or kind != "net.rejected"
            ):
                return
            if self.shell:
                shown = json.dumps(for_people(detail), default=str)
                self.say(f"\n({kind}: {shown})", droppable=True)
            else:
                self._emit_event(kind, detail)

    def _emit_event(self, kind: str, detail: Any) -> None:
        """An event's JSON line: its node ids kept, each with its address beside it."""
        if isinstance(detail, Mapping):
            detail = with_addresses(detail)
        self.emit(control.NetEvent(kind=kind, detail=detail, t=self.runtime.wall()))

    # ------------------------------------------------------------------ commands
    def _on_line(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            answer = self.execute(control.parse_line(line))
        except (
            control.ControlError,
            InvalidCommand,
            PermissionError,
            PublicationTooLarge,
        ) as error:
            # InvalidCommand: a filter or attributes the node refuses (the API's words too);
            # PermissionError: the ACL does not let this node publish or subscribe there;
            # PublicationTooLarge: over what the cluster's frames carry; PublishRefused: no
            # room now (flow control), the one refusal a publisher may simply retry
            refused = "no-room" if isinstance(error, PublishRefused) else None
            self.emit(control.CommandFailed(error=str(error), line=line[:200], refused=refused))
            self.say(f"error: {error}")
            return
        self.emit(answer)

    def execute(self, command: control.Command) -> control.Answer:
        runtime = self.runtime
        match command:
            case control.Help():
                self.say(SHELL_HELP)
                return control.HelpText(commands=SHELL_HELP)
            case control.Start(contacts=contacts):
                runtime.boot(None if contacts is None else list(contacts))
                return control.Started(t=runtime.wall())
            case control.Subscribe(topic=topic, filter=filter_):
                history = command.request
                subscribed = runtime.subscribed.get(topic)
                if subscribed is not None and (subscribed[1] or {}) != (filter_ or {}):
                    raise control.ControlError(
                        f"already subscribed to {topic} with "
                        + (f"filter {json.dumps(subscribed[1])}" if subscribed[1] else "no filter")
                        + f": unsubscribe {topic} first to change it"
                    )
                runtime.subscribe(topic, filter_, history)
                self.say(
                    f"subscribed to {topic}"
                    + (f" where {json.dumps(filter_)}" if filter_ is not None else "")
                    + (f", with history {history}" if history is not None else "")
                )
                return control.Subscribed(
                    topic=topic,
                    t=runtime.wall(),
                    filter=filter_,
                    history=None if history is None else str(history),
                )
            case control.Unsubscribe(topic=topic):
                runtime.unsubscribe(topic)
                self.say(f"unsubscribed from {topic}")
                return control.Unsubscribed(topic=topic, t=runtime.wall())
            case control.Publish(
                topic=topic, pub_id=pub_id, payload_size=size, payload=text, attributes=attrs
            ):
                if pub_id is not None and runtime.verifier is not None:
                    raise control.ControlError(
                        "publications are signed: the node draws each id, bound to its "
                        "identity (publish without pub_id)"
                    )
                if size is not None:
                    payload = workload_payload(pub_id or 0, size)
                else:
                    payload = (text or "").encode()
                t = runtime.wall()
                receipt = runtime.offer(topic, payload, pub_id=pub_id, attributes=attrs)
                if receipt.pub_id is None:  # flow control: the control channel never blocks
                    raise PublishRefused(f"publish refused: {receipt.reason}")
                pub_id = receipt.pub_id
                self.say(
                    f"published #{pub_id} on {topic}"
                    + (f" with {json.dumps(attrs)}" if attrs is not None else "")
                )
                return control.Published(
                    topic=topic, pub_id=pub_id, t=t, size=len(payload), attributes=attrs
                )
            case control.Neighbors():
                neighbors = runtime.neighbors()
                for name, ids in neighbors.items():
                    self.say(f"{name}: " + (" ".join(map(format_id, ids)) or "-"))
                if not neighbors:
                    self.say("no neighbours yet")
                return control.NeighborList(
                    neighbors=_neighbors(neighbors),
                    addresses=_neighbor_addresses(neighbors),
                )
            case control.Stats(full=full):
                stats = self._statistics()
                if full:
                    # for a person: every node id as its address (the JSON answer keeps both)
                    self.say(json.dumps(for_people(stats), indent=2, default=str))
                else:
                    self.say(summary(stats, runtime.neighbors()))
                return control.StatsReport(stats=stats)
            case control.Leave():
                runtime.leave()
                return control.Left(t=runtime.wall())
            case control.Stop() | control.Quit():
                # "exit" (the cluster's end of run) stops without the leave protocol, as the end
                # of a simulation does; "quit" leaves gracefully
                self.leave_on_stop = isinstance(command, control.Quit)
                self.stop.set()
                return (
                    control.Quitting() if isinstance(command, control.Quit) else control.Stopping()
                )


def _neighbors(neighbors: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
    return {topic: tuple(ids) for topic, ids in neighbors.items()}


def _neighbor_addresses(neighbors: Mapping[str, Iterable[int]]) -> dict[str, tuple[str, ...]]:
    """The same neighbours as addresses (``127.0.0.1:7001``), for the JSON answers."""
    return {topic: tuple(map(format_id, ids)) for topic, ids in neighbors.items()}


class StdinReader:
    """Reads stdin lines on a daemon thread (so a pending read never blocks exit) and hands
    them to the event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_line: Callable[[str], None],
        on_eof: Callable[[], None],
        *,
        prompt: bool,
    ) -> None:
        self.loop = loop
        self.on_line = on_line
        self.on_eof = on_eof
        self.prompt = prompt

    def start(self) -> None:
        thread = threading.Thread(target=self._read, name="pubmesh-stdin", daemon=True)
        thread.start()

    def _read(self) -> None:
        if self.prompt:
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401 - line editing and history for input()
        while True:
            try:
                line = input(PROMPT) if self.prompt else _read_line(sys.stdin)
            except (EOFError, KeyboardInterrupt, OSError, ValueError):
                line = ""
                if self.prompt:
                    line = "quit"
            if not line and not self.prompt:
                with contextlib.suppress(RuntimeError):
                    self.loop.call_soon_threadsafe(self.on_eof)
                return
            try:
                self.loop.call_soon_threadsafe(self.on_line, line)
            except RuntimeError:  # the loop is closed: the node is exiting
                return
            if self.prompt and line.strip().lower() in ("quit", "exit"):
                return
            if self.prompt:
                time.sleep(0.05)  # let the answer print before the next prompt


def _read_line(stream: TextIO) -> str:
    """The next line of ``stream``, at most ``control.MAX_LINE`` characters kept: the rest of
    a longer line is read and dropped, a chunk at a time, so a runaway writer cannot make the
    node hold it (the line then fails as too long, and gets its error reply)."""
    line = stream.readline(control.MAX_LINE + 1)
    if len(line) <= control.MAX_LINE or line.endswith("\n"):
        return line
    while True:
        rest = stream.readline(1 << 20)
        if not rest or rest.endswith("\n"):
            return line  # MAX_LINE + 1 characters: parse_line refuses it


class _NoPandas:
    """An import finder that makes ``import pandas`` fail, installed in node processes.

    A node never holds a pandas object, but pyarrow's first conversion from a Python list (the
    trace writer's) imports pandas only to ask whether the list is a pandas object: half a CPU
    second per process, sixteen when a 32-node cluster starts on two cores (the cluster then
    took 28 s to come up). pyarrow treats a failed import as "pandas is not installed", its
    documented optional dependency, and converts lists all the same."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("a pubmesh node process does not load pandas")
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m pubmesh.net.node ARGS``: ``pubmesh node ARGS`` without loading the rest
    of the CLI (what :mod:`pubmesh.net.cluster` runs, to start its processes quickly)."""
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas)
    parser = argparse.ArgumentParser(prog="pubmesh")
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["node", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args))
    except UserError as error:
        print(f"pubmesh: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
