"""``pubmesh node``'s options: the command line, what each option teaches in ``--help``, and
:class:`NodeOptions`, everything a node process needs, checked before any socket opens (a
stack's ``--set`` parameters through the stacks' typed loader, the key or identity, the ACL,
the data directory), so a mistake is one line and exit status 2. The process that runs with
them is :mod:`pubmesh.net.node.process`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubmesh.errors import UserError
from pubmesh.net.acl import Acl, load_acl
from pubmesh.net.address import node_id, parse_hostport
from pubmesh.net.identity import Identity, bound_listen, load_identity
from pubmesh.net.output import DEFAULT_LIMIT
from pubmesh.net.security import ClusterKey, load_key
from pubmesh.net.transport import NetConfig, net_config
from pubmesh.proto.core import NodeId
from pubmesh.stacks.base import StackSpec, get_stack

if TYPE_CHECKING:
    pass

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
    parser.set_defaults(func=_run)
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


def _run(args: argparse.Namespace) -> int:
    """The node process with these options (imported here: ``--help`` needs none of it)."""
    from pubmesh.net.node.process import run

    return run(args)


def resolve_stack(name: str) -> StackSpec:
    try:
        return get_stack(name)
    except KeyError as error:
        raise UserError(f"--stack: {error.args[0]}") from None


def stack_params(spec: StackSpec, settings: list[str], *, where: str = "--set") -> Any:
    """The stack's params dataclass with ``KEY=VALUE`` settings applied, read by the stacks'
    one typed loader (:func:`pubmesh.scenario.model.load_stack_params`), so the rules are
    those of a scenario's ``[stack.<name>]``; a mistake names its setting as a scenario's
    ``--set`` does (``--set #2 'fanout=x': ...``)."""
    from pubmesh.errors import ScenarioError, did_you_mean
    from pubmesh.scenario.model import load_stack_params, setting_value

    names = [f.name for f in dataclasses.fields(spec.params_type)]
    table: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for number, setting in enumerate(settings, 1):
        key, sep, value = setting.partition("=")
        key = key.strip()
        label = f"{where} #{number} {setting!r}"
        if not sep or not key:
            raise UserError(f"{label}: write KEY=VALUE, e.g. --set fanout=3")
        if key not in names:
            raise UserError(
                f"{label}: no parameter {key} for stack {spec.name}{did_you_mean(key, names)}"
            )
        table[key] = setting_value(value)
        labels[key] = label
    try:
        return load_stack_params(spec, table, where)
    except ScenarioError as error:  # a value refused: named by the setting that gave it
        text = str(error)
        for key, label in labels.items():
            if text.startswith(f"{where} {key}: "):
                raise UserError(f"{label}: {key}: {text[len(where) + len(key) + 3 :]}") from None
        raise


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
