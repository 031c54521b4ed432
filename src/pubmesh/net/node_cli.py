"""``pubmesh node``: one node in its own process, with a shell on a terminal.

On a terminal the node opens the shell of Henriques & Pamplona §3.1 (help, subscribe, unsubscribe,
publish, neighbors, stats, quit) and prints deliveries as they arrive. On a content-based stack
(chord) ``subscribe`` takes a content filter and ``publish`` attributes, as JSON objects ending
the line (``subscribe quotes {"price": {"lt": 100}}``, ``publish quotes tick {"price": 99}``);
a topic-based stack (gossip, skipring) refuses them with an error line. Otherwise it speaks JSON
lines: one object per line on stdout for what happens (``ready``, ``deliver``, ``net``,
``result``, ``stats``, ``bye``), and it reads commands from stdin, either as shell lines
(``publish news hello``) or as JSON objects (``{"op": "publish", "topic": "news", ...}``), so a
script or :mod:`pubmesh.net.cluster` can drive it. Both directions are the typed control
protocol of :mod:`pubmesh.net.control`.

SIGTERM (and Ctrl-C) make the node leave gracefully: it hands its stack the ``Leave`` command,
waits briefly for the leave protocol (the stack unsubscribes where it has one), closes its
connections with goodbyes and writes the rest of its trace.

``--control`` is the mode :mod:`pubmesh.net.cluster` uses: the node waits for a ``start`` op
before it boots, exits when its stdin closes (its cluster is gone) and asks the kernel to
signal it when its parent dies, so a cluster can never leave orphans behind.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pubmesh.errors import UserError
from pubmesh.net import control
from pubmesh.net.acl import Acl, load_acl
from pubmesh.net.address import format_id, node_id, parse_hostport
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
from pubmesh.net.identity import Identity, bound_listen, load_identity
from pubmesh.net.output import DEFAULT_LIMIT, LineWriter
from pubmesh.net.runtime import MISWIRED, NodeRuntime, published_at
from pubmesh.net.runtime_stats import mode_lines, mode_of
from pubmesh.net.security import ClusterKey, load_key
from pubmesh.net.transport import NetConfig, net_config
from pubmesh.proto.core import Deliver, NodeId
from pubmesh.scenario.workload import workload_payload
from pubmesh.stacks.base import StackSpec, get_stack

if TYPE_CHECKING:
    from pubmesh.net.metrics import MetricsServer

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

DESCRIPTION = """\
Run one pubmesh node in this process, speaking TCP to the other nodes of its cluster.

The node listens on HOST:PORT, which is also its id (ip << 16 | port), and joins the
cluster through --contact (the contact node of Henriques & Pamplona, or the skipring supervisor).
brokertree computes its broker tree from the list of brokers: every node, broker or client,
names every broker with --contact, in the same order (a broker names itself too), and
clients are placed on brokers by their address.
Every connection is authenticated with the cluster key (--key FILE or $PUBMESH_KEY; make one
with `pubmesh key new`) and every frame encrypted: nodes without it are refused. Or, in
identity mode (--identity DIR, from `pubmesh ca issue`), every link is TLS 1.3 with
certificates both ways, and a peer is accepted only with a certificate from the cluster's
authority that names the address it claims.

On a terminal it opens a shell:
  help                     list commands
  subscribe TOPIC [FILTER-JSON] [--history all|N|DURATION]
                           deliver publications on TOPIC (printed as they arrive); on a
                           content-based stack (chord) only those whose attributes match
                           the filter, e.g.
                             subscribe quotes {"symbol": "s3", "price": {"lt": 100}}
                           (operators: eq ne lt le gt ge prefix in; a bare value is eq);
                           --history also delivers the topic's past (marked "replayed",
                           with "published", its original publish time):
                           all of it, the newest N or those of the last DURATION (90s, 5m,
                           1h), as far as the stack retains them: gossip the swarm's
                           caches (30 s), chord and brokertree each publisher's own,
                           clique and d2g the contact's, skipring everything
                           (docs/history.md)
  unsubscribe TOPIC
  publish TOPIC MESSAGE [ATTRIBUTES-JSON]
                           publish MESSAGE (the rest of the line) on TOPIC; a JSON object
                           ending the line gives the attributes (strings or numbers) that
                           filters match on (content-based stacks only), e.g.
                             publish quotes tick {"symbol": "s3", "price": 99.5}
  neighbors                the overlay neighbours per topic
  stats                    counters: deliveries, frames, drops, rejections, protocol
  quit                     leave gracefully and exit
Otherwise it prints JSON lines and reads the same commands (or JSON objects, such as
{"op": "subscribe", "topic": "quotes", "filter": {"price": {"lt": 100}}} or
{"op": "subscribe", "topic": "news", "history": "5m"}) from stdin.
SIGTERM leaves gracefully."""

EPILOG = """\
examples:
  export PUBMESH_KEY=$(pubmesh key new)
  pubmesh ca init ca && pubmesh ca issue ca 127.0.0.1:7500 ids/7500     (identity mode)
  pubmesh node --stack gossip --listen 127.0.0.1:7500 --identity ids/7500
  pubmesh node --stack gossip --listen 127.0.0.1:7000
  pubmesh node --stack gossip --listen 127.0.0.1:7001 --contact 127.0.0.1:7000
  pubmesh node --stack skipring --role supervisor --listen 127.0.0.1:7100
  pubmesh node --stack skipring --listen 127.0.0.1:7101 --contact 127.0.0.1:7100 \\
      --subscribe news --trace-dir traces/n7101
  pubmesh node --stack gossip --listen 127.0.0.1:7003 --contact 127.0.0.1:7000
      pubmesh> subscribe news --history 5m     (news of the last 5 minutes, then live)
  echo "publish news hello" | pubmesh node --stack gossip --listen 127.0.0.1:7002 \\
      --contact 127.0.0.1:7000 --key cluster.key
  pubmesh node --stack chord --listen 127.0.0.1:7200
      pubmesh> subscribe quotes {"symbol": "s3", "price": {"lt": 100}}
  pubmesh node --stack chord --listen 127.0.0.1:7201 --contact 127.0.0.1:7200
      pubmesh> publish quotes cheap {"symbol": "s3", "price": 99.5}     (delivered)
      pubmesh> publish quotes dear {"symbol": "s3", "price": 120}       (filtered out)
  B="--contact 127.0.0.1:7300 --contact 127.0.0.1:7301"     (brokertree: the brokers)
  pubmesh node --stack brokertree --role broker --listen 127.0.0.1:7300 $B
  pubmesh node --stack brokertree --role broker --listen 127.0.0.1:7301 $B
  pubmesh node --stack brokertree --listen 127.0.0.1:7310 $B
"""

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


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "node",
        help="run one node over TCP (an interactive shell on a terminal)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="stack to run (see `pubmesh stacks`)")
    parser.add_argument(
        "--listen",
        required=True,
        metavar="HOST:PORT",
        help="address to listen on; it is the node's id, so give the address peers dial "
        "(port 0: any free port, reported on start)",
    )
    parser.add_argument(
        "--contact",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a node of the cluster to join through (repeatable; none for the first node)",
    )
    parser.add_argument("--key", metavar="FILE", help="cluster key file (default: $PUBMESH_KEY)")
    parser.add_argument(
        "--identity",
        metavar="DIR",
        help="identity mode: this node's certificate, key and the cluster authority's "
        "certificate (from pubmesh ca issue); TLS 1.3 links, no cluster key, and signed "
        "publications",
    )
    parser.add_argument(
        "--acl",
        metavar="FILE",
        help="identity mode: topic permissions, which members may publish and subscribe on "
        "which topics (a TOML file of [[rule]]s; see docs/security.md), enforced on what "
        "this node sends, receives and is asked to do",
    )
    parser.add_argument(
        "--revocations",
        metavar="FILE",
        help="identity mode: the authority's revocation list (pubmesh ca revoke writes it), "
        "read again whenever it changes and sent on to every node this one is connected to: "
        "load it into one node and the cluster refuses the revoked members",
    )
    parser.add_argument(
        "--unsigned",
        action="store_true",
        help="identity mode: neither sign publications nor check their signatures (for "
        "benchmarks; every node of the cluster must agree, and a member can then forge)",
    )
    parser.add_argument(
        "--role",
        default="peer",
        help="'peer' (default) or an infrastructure role of the stack, e.g. 'supervisor' "
        "for skipring",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a stack parameter, e.g. --set fanout=3 (repeatable; as [stack.<name>] in "
        "scenario files)",
    )
    parser.add_argument(
        "--net",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a transport setting (repeatable), e.g. --net memory_budget=33554432 (bytes the "
        "node's queues and caches may hold before its publishers are refused), --net "
        "max_queue_bytes=... (per peer), --net slow_disconnect=5 (seconds a slow peer is "
        "kept), --net suspect_after=3 (seconds of silence that lose a peer); README, flow "
        "control",
    )
    parser.add_argument(
        "--subscribe", action="append", default=[], metavar="TOPIC", help="subscribe on start"
    )
    parser.add_argument("--seed", type=int, help="seed of the node's random stream")
    parser.add_argument("--trace-dir", metavar="DIR", help="write this node's partial trace here")
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="remember the node's address, contacts, subscriptions and recent deliveries in"
        " DIR/node.db (made if missing; only you may write DIR): started again on DIR, the"
        " node comes back as itself (--listen HOST:0 takes its old port), rejoins without"
        " --contact, resubscribes, and delivers nothing twice; `pubmesh data inspect DIR`"
        " shows what DIR holds",
    )
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve live metrics for Prometheus at http://HOST:PORT/metrics (OpenMetrics) and "
        "/healthz; no authentication, so bind it to loopback or a monitoring network "
        "(port 0: any free port, said in the ready line)",
    )
    parser.add_argument(
        "--no-message-trace",
        action="store_true",
        help="with --trace-dir, leave frames out of the trace (deliveries, events and "
        "snapshots only): what a benchmark wants",
    )
    parser.add_argument(
        "--snapshot-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds between overlay snapshots in the trace (0: none)",
    )
    parser.add_argument(
        "--json", action="store_true", help="JSON lines even on a terminal (no shell)"
    )
    parser.add_argument(
        "--stats-interval",
        type=float,
        default=0.0,
        metavar="S",
        help="in JSON mode, print a stats line every S seconds (0: never)",
    )
    parser.add_argument(
        "--no-delivery-lines",
        action="store_true",
        help="in JSON mode, count deliveries without printing a line for each",
    )
    parser.add_argument(
        "--stdout-buffer",
        type=int,
        default=DEFAULT_LIMIT,
        metavar="BYTES",
        help="lines the reader of stdout may fall behind by, in bytes, before delivery, event"
        " and stats lines are dropped (counted, then said in one 'lagged' line); answers are"
        " never dropped (default: 1 MiB)",
    )
    parser.add_argument(
        "--control",
        action="store_true",
        help="driven by `pubmesh cluster`: boot on a 'start' command, exit when stdin closes",
    )
    parser.add_argument(
        "--leave-linger",
        type=float,
        default=2.0,
        metavar="S",
        help="on SIGTERM/quit, seconds to let the leave protocol run (default 2)",
    )
    parser.set_defaults(func=run)
    return parser


@dataclass
class NodeOptions:
    spec: StackSpec
    listen: tuple[str, int]
    contacts: tuple[NodeId, ...]
    key: ClusterKey | None
    role: str
    params: Any
    seed: int | None
    trace_dir: Path | None
    snapshot_interval: float
    trace_messages: bool = True
    identity: Identity | None = None
    sign: bool = True
    acl: Acl | None = None
    #: identity mode: the authority's revocation list file, followed as it changes
    revocations: Path | None = None
    subscribe: list[str] = field(default_factory=list)
    json_mode: bool = False
    stats_interval: float = 0.0
    delivery_lines: bool = True
    stdout_buffer: int = DEFAULT_LIMIT
    #: where to serve /metrics and /healthz, or None
    metrics: tuple[str, int] | None = None
    control: bool = False
    leave_linger: float = 2.0
    #: ``--net``: the transport's limits and timings
    config: NetConfig = field(default_factory=NetConfig)
    data_dir: Path | None = None


def resolve_stack(name: str) -> StackSpec:
    try:
        return get_stack(name)
    except KeyError as error:
        raise UserError(f"--stack: {error.args[0]}") from None


def stack_params(spec: StackSpec, settings: list[str], *, where: str = "--set") -> Any:
    """The stack's params dataclass with ``KEY=VALUE`` settings applied and validated (by the
    scenario loader, so the rules and messages are those of ``[stack.<name>]``)."""
    if not settings:
        return spec.params_type()
    from pubmesh.scenario.model import parse_scenario

    overrides = []
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise UserError(f"{where} {setting!r}: write KEY=VALUE, e.g. --set fanout=3")
        overrides.append(f"stack.{spec.name}.{key.strip()}={value}")
    # a run larger than any infrastructure the settings may ask for (brokertree's brokers)
    text = f'[run]\nstack = "{spec.name}"\nnodes = {1 << 16}\n'
    labels = [f"--set #{number} {setting!r}" for number, setting in enumerate(settings, 1)]
    scenario = parse_scenario(text, source=where, overrides=overrides, labels=labels)
    return scenario.stack_params


def options_from_args(args: argparse.Namespace) -> NodeOptions:
    """Validate everything before any socket is opened; UserError names the flag at fault."""
    spec = resolve_stack(args.stack)
    listen = parse_hostport(args.listen, what="--listen", allow_port_zero=True)
    contacts = []
    for text in args.contact:
        host, port = parse_hostport(text, what="--contact")
        contacts.append(node_id(host, port))
    if args.unsigned and not args.identity:
        raise UserError("--unsigned: only identity mode (--identity) signs publications")
    if args.acl and (not args.identity or args.unsigned):
        raise UserError("--acl: permissions rest on signed publications (--identity, signed)")
    identity = load_identity(args.identity) if args.identity else None
    if args.revocations:
        if identity is None:
            raise UserError("--revocations: a revocation list needs identity mode (--identity)")
        from pubmesh.net.revocation import load as load_revocations

        load_revocations(Path(args.revocations), identity.authority)  # refused now, not later
    if identity is not None:
        listen = bound_listen(identity, listen, "--listen")
    key = None if identity is not None else load_key(args.key)
    acl = None
    if args.acl:
        acl = load_acl(args.acl)
        assert identity is not None
        for topic in args.subscribe:
            if not acl.may_subscribe(identity.node, topic):
                raise UserError(
                    f"--subscribe {topic}: {identity.address} may not subscribe there "
                    f"(the ACL {args.acl})"
                )
    params = stack_params(spec, args.set)
    config = net_config(args.net)
    roles = {"peer", *spec.infrastructure(64, params).values()}
    if args.role not in roles:
        raise UserError(
            f"--role {args.role!r}: stack {spec.name} has roles {', '.join(sorted(roles))}"
        )
    if args.stdout_buffer < 4096:
        raise UserError(f"--stdout-buffer {args.stdout_buffer}: at least 4096 bytes")
    if args.snapshot_interval < 0 or args.stats_interval < 0 or args.leave_linger < 0:
        raise UserError("--snapshot-interval, --stats-interval and --leave-linger must be ≥ 0")
    return NodeOptions(
        spec=spec,
        listen=listen,
        contacts=tuple(contacts),
        key=key,
        identity=identity,
        sign=not args.unsigned,
        acl=acl,
        revocations=Path(args.revocations) if args.revocations else None,
        role=args.role,
        params=params,
        seed=args.seed,
        trace_dir=Path(args.trace_dir) if args.trace_dir else None,
        metrics=parse_hostport(args.metrics, what="--metrics", allow_port_zero=True)
        if args.metrics
        else None,
        snapshot_interval=args.snapshot_interval,
        trace_messages=not args.no_message_trace,
        subscribe=list(args.subscribe),
        json_mode=bool(args.json or args.control or not sys.stdin.isatty()),
        stats_interval=args.stats_interval,
        delivery_lines=not args.no_delivery_lines,
        stdout_buffer=args.stdout_buffer,
        control=bool(args.control),
        leave_linger=args.leave_linger,
        config=config,
        data_dir=_data_dir(args.data_dir),
    )


def _data_dir(text: str | None) -> Path | None:
    """``--data-dir``, opened once now so a directory or file it must refuse is one line
    before any socket opens (pubmesh.net.store)."""
    if text is None:
        return None
    from pubmesh.net.store import open_store

    open_store(text).close()
    return Path(text)


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
        # every publication for up to a second (issue 16's latency tails)
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
            published = published_at(delivery, t)
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
                    published=published_at(delivery, t),
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
    documented optional dependency, and converts lists as before."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("a pubmesh node process does not load pandas")
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m pubmesh.net.node_cli ARGS``: ``pubmesh node ARGS`` without loading the rest
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
