"""A node runtime's own events (``net.*``: a peer down, a slow peer, a handler error, a copy
dropped or refused, a connection rejected): each a row of the trace's ``events`` table and a
call of the runtime's event callbacks (:attr:`pubmesh.net.runtime.NodeRuntime.event_callbacks`).

Events a peer can provoke at will are rate-limited, so a flood cannot flood the trace or the
log: drops and refusals of one kind toward one peer (:meth:`NodeEvents.rate_limited`) and
rejected frames and connections (:meth:`NodeEvents.rejected`); the rows left out are counted
into the next one (``suppressed``), not lost.

A peer that cannot be reached or refuses this node for good (another cluster key, another
security mode: :class:`pubmesh.net.transport.Trouble`) is said once, in one sentence
(``net.trouble``, :meth:`NodeEvents.trouble`), and once more when it is reached at last
(``net.trouble-over``); the drops, peer-downs and refusals that repeat it are still traced, and
:func:`repeats_trouble` tells a node's output to leave them out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pubmesh.net.address import format_id
from pubmesh.proto.core import NodeId

if TYPE_CHECKING:
    from pubmesh.net.runtime import NodeRuntime
    from pubmesh.net.transport import Trouble

log = logging.getLogger("pubmesh.net")

#: a log record's attribute naming the event it repeats (the node process reports the event
#: itself, once, and drops such records: pubmesh.net.node.process)
EVENT_LOGGED = "pubmesh_event"
#: Drops and rejections of one kind toward one peer are traced at most this often; the rows in
#: between are counted into the next one (``suppressed``), so a flood cannot flood the trace.
TRACE_RATE_INTERVAL = 1.0
#: Rejections traced (and logged) per second at most; the rest are counted, not lost.
REJECTIONS_TRACED_PER_SECOND = 50


class NodeEvents:
    """The events of one :class:`~pubmesh.net.runtime.NodeRuntime` (module docstring): to its
    trace, when it keeps one, and to its event callbacks."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self._rate: dict[tuple[str, NodeId | str], tuple[float, int]] = {}
        self._reject_window = -1.0
        self._rejections_in_window = 0
        self._rejections_suppressed = 0

    def _now(self) -> float:
        runtime = self.runtime
        return runtime.now() if runtime._loop is not None else 0.0

    def event(self, kind: str, detail: Mapping[str, Any]) -> None:
        """Trace ``kind`` now and hand it to the event callbacks."""
        runtime = self.runtime
        if runtime.trace is not None:
            runtime.trace.event(runtime.wall(), kind, detail)
        for callback in runtime.event_callbacks:
            callback(kind, detail)

    def rate_limited(
        self, kind: str, peer: NodeId | str, reason: str, detail: dict[str, Any]
    ) -> None:
        """:meth:`event` ``kind`` toward ``peer`` for ``reason`` at most once per
        ``TRACE_RATE_INTERVAL``; the rows in between are counted into the next one
        (``suppressed``)."""
        key = (f"{kind}:{reason}", peer)
        now = self._now()
        last, suppressed = self._rate.get(key, (-TRACE_RATE_INTERVAL, 0))
        if now - last < TRACE_RATE_INTERVAL:
            self._rate[key] = (last, suppressed + 1)
            return
        self._rate[key] = (now, 0)
        if suppressed:
            detail = {**detail, "suppressed": suppressed}
        self.event(kind, detail)

    def rejected(self, peer: NodeId | None, remote: str, reason: str, detail: str) -> None:
        """A frame or connection refused: one ``net.rejected`` row per refusal, up to
        ``REJECTIONS_TRACED_PER_SECOND``; beyond that they are counted into the next row
        (``suppressed``), so a flood of bad connections cannot flood the trace or the log."""
        now = self._now()
        if now - self._reject_window >= 1.0:
            self._reject_window = now
            self._rejections_in_window = 0
        if self._rejections_in_window >= REJECTIONS_TRACED_PER_SECOND:
            self._rejections_suppressed += 1
            return
        self._rejections_in_window += 1
        record: dict[str, Any] = {
            "peer": peer,
            # the peer's address, as the other net.* events name it (None: not proven yet)
            "address": format_id(peer) if peer is not None else None,
            "remote": remote,
            "reason": reason,
            "detail": detail,
        }
        if self._rejections_suppressed:
            record["suppressed"] = self._rejections_suppressed
            self._rejections_suppressed = 0
        transport = self.runtime.transport
        if transport is None or transport.trouble_of(None, remote) is None:
            # (a refusal that repeats a trouble already said is traced, not logged again)
            log.warning(
                "%s: refused %s (%s): %s",
                format_id(self.runtime.node_id),
                remote,
                reason,
                detail,
                extra={EVENT_LOGGED: "net.rejected"},
            )
        self.event("net.rejected", record)

    # ------------------------------------------------------------------ troubles
    def trouble(self, trouble: Trouble, over: bool) -> None:
        """A peer that cannot be reached or refuses this node (:class:`Trouble`) starts to be
        one (``net.trouble``) or is reached at last (``net.trouble-over``): one event each, with
        the sentence a person reads (``message``)."""
        record = trouble_record(trouble, self.runtime)
        if over:
            record["message"] = over_sentence(trouble, self.runtime)
        log.warning(
            "%s: %s",
            format_id(self.runtime.node_id),
            record["message"],
            extra={EVENT_LOGGED: TROUBLE_OVER if over else TROUBLE},
        )
        self.event(TROUBLE_OVER if over else TROUBLE, record)


# ---------------------------------------------------------------------- names for people
#: keys of an event's detail (or of ``stats``) that name a node by its id (``ip << 16 |
#: port``): the runtime's own (``peer``, ``node``) and the stacks' (``from``, ``publisher``, ...)
ID_KEYS = frozenset(
    {
        "peer",
        "node",
        "from",
        "src",
        "dst",
        "publisher",
        "claimed_publisher",
        "origin",
        "new_node",
        "supervisor",
        "broker",
        "parent",
        "child",
        "successor",
        "predecessor",
    }
)
#: keys whose value is a list of node ids
ID_LIST_KEYS = frozenset({"peers_connected", "neighbors", "neighbours", "contacts", "peers"})


def _is_id(value: object) -> bool:
    return type(value) is int


def _id_list(value: object) -> bool:
    return isinstance(value, list | tuple) and all(map(_is_id, value))


def _addresses_of(value: Any) -> Any:
    """A list of ids, or a mapping (per topic) of lists of ids, as addresses; None if it is
    neither."""
    if _id_list(value):
        return [format_id(v) for v in value]
    if isinstance(value, Mapping) and value and all(map(_id_list, value.values())):
        return {k: [format_id(v) for v in ids] for k, ids in value.items()}
    return None


def with_addresses(detail: Mapping[str, Any]) -> dict[str, Any]:
    """An event's detail for a JSON line: the integer ids stay (scripts and the trace read
    them), each with its address beside it: ``peer`` with ``address`` (the ``net.*`` events'
    own convention), any other id ``K`` with ``K_address``, a list of ids ``K`` with
    ``K_addresses``."""
    out = dict(detail)
    for key, value in detail.items():
        if key in ID_KEYS and _is_id(value):
            name = "address" if key == "peer" else f"{key}_address"
            out.setdefault(name, format_id(value))
        elif key in ID_LIST_KEYS and (addresses := _addresses_of(value)) is not None:
            out.setdefault(f"{key}_addresses", addresses)
    return out


def for_people(value: Any) -> Any:
    """``value`` (an event's detail, ``stats``) as a person reads it: every node id an
    address, however deep (``peer`` then says the address, and an ``address`` beside it that
    only repeats it is left out)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in ID_KEYS and _is_id(item):
                out[key] = format_id(item)
            elif key in ID_LIST_KEYS and (addresses := _addresses_of(item)) is not None:
                out[key] = addresses
            else:
                out[key] = for_people(item)
        if _is_id(value.get("peer")) and out.get("address") == out.get("peer"):
            del out["address"]
        return out
    if isinstance(value, list | tuple):
        return [for_people(item) for item in value]
    return value


#: the events of a trouble starting and ending (NodeEvents.trouble)
TROUBLE = "net.trouble"
TROUBLE_OVER = "net.trouble-over"

#: why a dial failed, said for a person
_WHY = {
    "refused": "nothing listens there (connection refused)",
    "timeout": "no answer (connection timed out)",
    "no-route": "no route to that host",
    "network-unreachable": "its network is unreachable",
    "reset": "the connection was reset",
    "handshake-timeout": "it accepts connections but does not complete pubmesh's handshake",
    "handshake-aborted": "it closes connections during pubmesh's handshake",
    "oversized-frame": "something else listens there: it does not speak pubmesh's handshake",
    "bad-handshake": "something else listens there: it does not speak pubmesh's handshake",
}


def _who(trouble: Trouble, runtime: NodeRuntime) -> str:
    if trouble.peer is None:
        return f"a node at {trouble.address}"
    if trouble.peer in runtime.contacts:
        return f"the contact {trouble.address}"
    return trouble.address


def trouble_record(trouble: Trouble, runtime: NodeRuntime) -> dict[str, Any]:
    """A trouble as an event's detail or a stats entry: its fields, ``contact`` (one of the
    node's contacts), ``who`` (the peer, for a person), ``state`` (a few words) and
    ``message`` (the sentence)."""
    who = _who(trouble, runtime)
    address = trouble.address
    match trouble.problem:
        case "unreachable":
            why = _WHY.get(trouble.reason) or f"{trouble.reason}: {trouble.detail}"
            message = f"cannot reach {who}: {why}; retrying quietly"
            state = f"unreachable: {why}"
        case "speaks-tls":
            message = (
                f"{address} speaks TLS: it runs in identity mode; this node uses a shared key"
                " (the nodes of a cluster all use --identity, or all the same key)"
            )
            state = "speaks TLS (identity mode)"
        case "speaks-shared-key":
            message = (
                f"{address} speaks pubmesh's shared-key handshake: it runs with a cluster key;"
                " this node uses identity mode (certificates)"
            )
            state = "speaks the shared-key handshake (cluster key)"
        case _:
            key = runtime.key
            mismatch = key.mismatch() if key is not None else "the cluster keys differ"
            message = f"{address} holds another cluster key: {mismatch}"
            state = "holds another cluster key"
    record = trouble.as_dict()
    record.update(
        contact=trouble.peer is not None and trouble.peer in runtime.contacts,
        who=who,
        state=state,
        message=message,
    )
    return record


def over_sentence(trouble: Trouble, runtime: NodeRuntime) -> str:
    who = _who(trouble, runtime)
    if who.startswith("the contact"):
        return f"reached {who} at last: joining through it"
    return f"reached {who} at last"


def repeats_trouble(runtime: NodeRuntime, kind: str, detail: Mapping[str, Any]) -> bool:
    """``kind`` (a drop, a peer down, a refusal) only repeats a trouble already said
    (:meth:`NodeEvents.trouble`): traced, not shown to a person again."""
    transport = runtime.transport
    if transport is None or not transport.troubles:
        return False
    if kind in ("net.dropped", "net.peer-down"):
        return transport.trouble_of(detail.get("peer")) is not None
    if kind == "net.rejected":
        return transport.trouble_of(None, str(detail.get("remote", ""))) is not None
    return False
