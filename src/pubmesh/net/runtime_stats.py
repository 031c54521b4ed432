"""A node runtime's counters (:meth:`pubmesh.net.runtime.NodeRuntime.statistics`): one frozen
shape for the node shell's ``stats``, the control protocol's ``bye`` line, the metrics
endpoint and :meth:`pubmesh.Node.statistics`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pubmesh.net.address import format_id
from pubmesh.net.events import trouble_record
from pubmesh.net.transport import TransportStatistics
from pubmesh.proto.core import NodeId, NodeStatistics

if TYPE_CHECKING:
    from pubmesh.net.runtime import NodeRuntime


def collect(runtime: NodeRuntime) -> RuntimeStatistics:
    """The counters of ``runtime`` now (for humans: the node shell's ``stats``, the cluster's
    live table)."""
    node = runtime.node
    protocol: NodeStatistics | None = None
    error: str | None = None
    if node is not None:
        try:
            protocol = node.statistics()
        except Exception as exc:  # a stack's bug must not take the shell down
            error = repr(exc)
    transport = runtime.transport
    admission = runtime.admission
    verifier = runtime.verifier
    troubles = (
        tuple(trouble_record(t, runtime) for t in list(transport.troubles.values()))
        if transport is not None
        else ()
    )
    connected = transport is not None and any(p.open for p in transport.peers.values())
    alone = node is not None and not connected and not _any_neighbour(runtime)
    return RuntimeStatistics(
        node=runtime.node_id,
        address=format_id(runtime.node_id),
        stack=runtime.spec.name,
        role=runtime.role,
        uptime=round(runtime.now(), 3) if runtime._loop is not None else 0.0,
        subscriptions=tuple(sorted(node.subscriptions())) if node is not None else (),
        deliveries=runtime.deliveries,
        published=runtime.published,
        refused=dict(admission.refused),
        memory=MemoryStatistics(admission.memory_used(), runtime.config.memory_budget),
        peer_down_notices=runtime.peer_down_notices,
        handler_errors=runtime.handler_errors,
        forged=dict(admission.forged),
        denied=dict(admission.denied),
        unsigned_dropped=admission.unsigned_dropped,
        signature_checks=verifier.checks if verifier is not None else 0,
        signatures_made=verifier.signer.signatures if verifier is not None else 0,
        transport=transport.statistics() if transport is not None else TransportStatistics(),
        protocol=protocol,
        protocol_error=error,
        trace=_trace_statistics(runtime),
        duplicates_across_lives=runtime.duplicates_across_lives,
        store=_store_statistics(runtime),
        alone=alone,
        troubles=troubles,
        mode=mode_of(runtime),
    )


def mode_of(runtime: NodeRuntime) -> ModeStatistics:
    """How the node secures its links and publications, and what it keeps on disk."""
    if runtime.identity is not None:
        links = "identity"
    elif runtime.key is not None:
        links = "shared-key"
    else:
        links = "none"
    acl = runtime.acl
    return ModeStatistics(
        links=links,
        signed=runtime.signing,
        acl=acl.source if acl is not None else None,
        revocations=str(runtime.revocations_file) if runtime.revocations_file else None,
        data_dir=str(runtime.data_dir) if runtime.data_dir is not None else None,
    )


def mode_lines(mode: Mapping[str, Any]) -> list[str]:
    """:class:`ModeStatistics` (as a dict) for a person: the node's security, then its data
    directory, a line each (the node's banner and its ``stats``)."""
    links = mode.get("links")
    if links == "identity":
        words = ["identity mode (certificates, TLS 1.3)"]
        words.append(
            "publications signed"
            if mode.get("signed")
            else "publications not signed (--unsigned: a member can forge)"
        )
        acl = mode.get("acl")
        words.append(f"ACL {acl}" if acl else "no ACL (every member may publish and subscribe)")
        if mode.get("revocations"):
            words.append(f"revocation list {mode['revocations']}")
    elif links == "shared-key":
        words = [
            "shared key (every link authenticated and encrypted with the cluster key)",
            "publications not signed",
        ]
    else:
        words = ["no security: links in the clear"]
    data_dir = mode.get("data_dir")
    return [
        "security: " + ", ".join(words),
        f"data directory: {data_dir} (remembered across restarts)"
        if data_dir
        else "data directory: none (a restart forgets this node's subscriptions)",
    ]


def _any_neighbour(runtime: NodeRuntime) -> bool:
    try:
        return any(runtime.neighbors().values())
    except Exception:  # a stack's bug must not take the shell down
        return False


def _store_statistics(runtime: NodeRuntime) -> StoreStatistics | None:
    store = runtime.store
    if store is None:
        return None
    return StoreStatistics(
        directory=str(store.directory),
        commits=store.commits,
        failures=store.failures,
        pending=store.pending,
        dropped=store.dropped,
        problem=store.problem,
    )


def _trace_statistics(runtime: NodeRuntime) -> TraceStatistics | None:
    trace = runtime.trace
    if trace is None:
        return None
    return TraceStatistics(
        directory=str(trace.directory),
        segments=trace.sealed,
        complete=not trace.incomplete,
        rows_lost=trace.rows_lost,
        error=trace.error,
    )


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    """One application subscription queue of :class:`pubmesh.Node`."""

    pending: int = 0
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class TraceStatistics:
    """A node's partial trace (:mod:`pubmesh.net.tracing`): whether it lost rows to a write
    error, and the first such error."""

    directory: str
    segments: int
    complete: bool
    rows_lost: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryStatistics:
    """Bytes the node's queues hold (every peer's and the application's), and its budget."""

    used: int
    budget: int


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """The node's data directory (pubmesh.net.store): group commits made and failed (a full
    disk: the node serves from memory), writes waiting, delivery records given up while they
    waited too long, and the last failure's error."""

    directory: str
    commits: int
    failures: int
    pending: int
    dropped: int
    problem: str | None


@dataclass(frozen=True, slots=True)
class ModeStatistics:
    """How the node runs: its links (``identity``: certificates and TLS 1.3; ``shared-key``:
    the cluster key; ``none``), whether its publications are signed, the ACL file and the
    revocation list it enforces, its data directory (``--data-dir``)."""

    links: str
    signed: bool = False
    acl: str | None = None
    revocations: str | None = None
    data_dir: str | None = None


@dataclass(frozen=True, slots=True)
class RuntimeStatistics:
    """A node process's counters, one frozen shape (trio's ``RunStatistics``): what the node
    shell's ``stats``, the control protocol's ``bye`` line and :meth:`pubmesh.Node.statistics`
    show. ``protocol`` is the stack node's own :class:`~pubmesh.proto.core.NodeStatistics`."""

    node: NodeId
    address: str
    stack: str
    role: str
    uptime: float
    subscriptions: tuple[str, ...]
    #: publications delivered to the application, and published by it
    deliveries: int
    published: int
    peer_down_notices: int
    handler_errors: int
    transport: TransportStatistics
    #: publications refused for want of room, by reason (Receipt)
    refused: Mapping[str, int] = field(default_factory=dict)
    #: bytes in the node's queues against its budget
    memory: MemoryStatistics | None = None
    #: signed publications: copies refused, by reason (pubmesh.net.signing)
    forged: Mapping[str, int] = field(default_factory=dict)
    #: payload messages not sent because their signature was no longer kept
    unsigned_dropped: int = 0
    #: signed publications: Ed25519 checks made (one a batch: pubmesh.net.signing) and
    #: signatures made over this node's own publications (one a batch)
    signature_checks: int = 0
    signatures_made: int = 0
    #: copies the ACL dropped: "publish" (received), "subscribe" (not sent)
    denied: Mapping[str, int] = field(default_factory=dict)
    protocol: NodeStatistics | None = None
    #: why ``protocol`` is missing, if the stack's statistics() failed
    protocol_error: str | None = None
    #: the application's subscription queues per topic (filled by pubmesh.Node)
    subscription_queues: Mapping[str, QueueStatistics] = field(default_factory=dict)
    #: the node's trace, when it keeps one
    trace: TraceStatistics | None = None
    #: copies of publications delivered in the node's last life, not delivered again
    duplicates_across_lives: int = 0
    #: the node's data directory (--data-dir), when it has one
    store: StoreStatistics | None = None
    #: no overlay neighbour and no connection: the node is on its own (``troubles`` may say
    #: why: its contact unreachable, another key or security mode)
    alone: bool = False
    #: the peers this node cannot reach or that refuse it, each with since when and the
    #: sentence it was said in (pubmesh.net.events.trouble_record)
    troubles: tuple[Mapping[str, Any], ...] = ()
    #: how the node secures its links and publications, and its data directory
    mode: ModeStatistics | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able copy, for the control protocol and logs."""
        return {
            "node": self.node,
            "address": self.address,
            "stack": self.stack,
            "role": self.role,
            "uptime": self.uptime,
            "subscriptions": list(self.subscriptions),
            "deliveries": self.deliveries,
            "published": self.published,
            "refused": dict(self.refused),
            "memory": None if self.memory is None else asdict(self.memory),
            "peer_down_notices": self.peer_down_notices,
            "handler_errors": self.handler_errors,
            "forged": dict(self.forged),
            "denied": dict(self.denied),
            "unsigned_dropped": self.unsigned_dropped,
            "signature_checks": self.signature_checks,
            "signatures_made": self.signatures_made,
            "transport": {
                **self.transport.as_dict(),
                # the peers by address too, as a person knows them
                "peers_connected_addresses": [
                    format_id(peer) for peer in self.transport.peers_connected
                ],
            },
            "protocol": self.protocol.as_dict() if self.protocol is not None else None,
            "protocol_error": self.protocol_error,
            "subscription_queues": {
                topic: {"pending": q.pending, "dropped": q.dropped}
                for topic, q in sorted(self.subscription_queues.items())
            },
            "trace": None if self.trace is None else asdict(self.trace),
            "duplicates_across_lives": self.duplicates_across_lives,
            "store": None if self.store is None else asdict(self.store),
            "alone": self.alone,
            "troubles": [dict(trouble) for trouble in self.troubles],
            "mode": None if self.mode is None else asdict(self.mode),
        }
