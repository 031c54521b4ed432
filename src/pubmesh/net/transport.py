"""TCP connections between nodes: dial, accept, authenticate, frame, queue, detect failures.

How it works
============
A :class:`Transport` is one node's side of the network. It listens on the node's address
(which is its id, :mod:`pubmesh.net.address`), and gives its owner (the node runtime) one verb,
``send(dst, message)``, and a handful of notices back (:class:`TransportOwner`): a message
arrived, the last connection to a peer was lost, a peer cannot be reached, a frame or a
connection was refused, a frame was dropped.

Connections. Any authenticated connection to a peer carries traffic both ways, whoever dialed
it. ``send`` uses an open connection to ``dst`` if there is one; otherwise the frame waits in
the peer's pending queue while the transport dials ``dst`` (``ip:port`` from the id) with
exponential backoff (``backoff_initial`` doubling up to ``backoff_max``, ``dial_attempts``
tries, each bounded by ``connect_timeout`` + ``handshake_timeout``). Two nodes that dial each
other at the same moment simply keep both connections; either can carry any frame and the
protocols above do not assume FIFO links anyway.

Failure detection (the failure detector the papers assume). A connection that ends without
the goodbye exchange below — a reset, an EOF from a killed process, a keepalive timeout, a frame
refused — is *lost*; when a peer's last connection is lost the owner hears ``net_lost(peer)``
(the runtime turns it into ``PeerDown`` if the protocol monitors that peer). When every dial
attempt fails the owner hears ``net_unreachable(dst)`` (``PeerDown`` unconditionally, like a
failed send in the simulator) and the frames that waited are dropped. Every ``tick`` the
transport dials the peers the protocol monitors and has no connection to, so a monitored
peer's death is noticed even when no traffic flows, and closes idle connections to peers nobody
monitors. A peer can also hang without closing anything (stopped, swapping, its event loop
blocked): its kernel still acknowledges our bytes, so TCP sees nothing wrong. So every open
connection that has sent nothing for ``ping_interval`` (1 s) sends a PING, and a connection
that has received nothing at all for ``suspect_after`` (5 s) is lost like a reset one
(``peer-silent``): a hung peer is declared down within ``suspect_after`` and a tick, and taken
back when it answers a dial again. TCP_USER_TIMEOUT (10 s) fails a connection whose data goes
unacknowledged (a host gone), and keepalive (idle 10 s, 5 s interval, 3 probes) one that
vanished without a reset.

Graceful close. When the protocol releases a peer (a ``Disconnect`` output, or idleness), the
transport sends a control frame GOODBYE, stops sending on that connection but keeps reading,
and closes when the peer answers GOODBYE_ACK (the peer sends nothing after its ACK and drops
the connection from its own routing first), so no frame in flight is lost and neither side
mistakes the close for a failure.

Bounded memory. Per peer, the bytes waiting (the pending queue before a connection exists, or
the connection's output buffer) never exceed ``max_queue_bytes``: a frame that would exceed it
is dropped, counted and reported (``net_dropped``). Received bytes are parsed and handled as
they arrive (no receive queue): a peer that sends faster than the node can handle is slowed by
TCP flow control. A frame longer than ``max_frame`` is refused from its length prefix alone.

Flow control. A peer that reads slower than it is sent to shows as a queue that stays over half
of ``max_queue_bytes``: after ``slow_after`` (2 s) the owner hears ``net_slow`` once (a
``net.slow-peer`` event), after ``slow_disconnect`` (10 s) the connection is closed as
``slow-peer`` and the protocol hears of a lost peer, as NATS disconnects a slow consumer: its
copies were being dropped anyway, and publishers that wait for room should not wait on it for
ever. What a publisher is told (a receipt, waiting or refusal against the node's
``memory_budget``) is :class:`pubmesh.net.runtime.Receipt`'s.

No door a stranger can hold shut. A connection someone opened to us is *unproven* until its
handshake proves the cluster key; until then the id it claims is only a claim (logged and traced
as ``claimed``, never as the peer). Unproven connections are limited in time and number, as
NATS and libp2p limit theirs: the first bytes of the handshake (the HELLO, or in identity mode
the TLS ClientHello) must arrive within ``hello_timeout`` (1 s) and the whole handshake within
``handshake_timeout``; at most ``max_handshakes`` are
unproven at once, at most ``max_handshakes_per_source`` from one IP address; when a new
connection finds its source's or the node's slots full, the *oldest* unproven connection (of
that source; of all, one that has sent nothing first, then one of the source holding the most
slots) is closed for it, not the new one. So idle or stalled sockets, however many, hold a
slot for at most a second or until newer ones come, and an honest node's handshake (two round
trips; three with TLS) completes among them, however fast a stranger reopens its sockets. In
identity mode the connection drives its TLS session itself (:mod:`pubmesh.net.tls`) so that it
sees the TLS handshake's bytes arrive.

Writes are coalesced (:class:`pubmesh.net.connection.Writes`): frames queued while a
connection handles what it read go out at the end of that read, one ``write`` a connection.

Another mode. A node in shared-key mode and one in identity mode cannot talk, and each can
tell from the other's first bytes: a TLS record starts 0x14-0x17, 0x03, 0x00-0x04 (a
ClientHello 0x16 0x03 0x01), this handshake's frames a length, then ``PMSH``. The connection is
then refused as ``speaks-tls`` or ``speaks-shared-key``, and an acceptor first answers with a
REFUSED its dialer's own handshake reads (:data:`security.IDENTITY_MODE_REFUSAL`, or a
shared-key REFUSED whose bytes the dialer's TLS session shows it), so both ends name the
mismatch instead of a TLS error and an aborted handshake.

Troubles. A peer this node has never reached and cannot (a wrong or dead contact: refused,
timed out, no route), or that refuses it for a reason retrying cannot fix (the cluster keys
differ, another security mode), is a :class:`Trouble`, kept by address in ``troubles``: the
owner's events hear of it once when it starts (``NodeEvents.trouble``), the transport dials it
once per backoff (``TROUBLE_BACKOFF_INITIAL`` doubling up to ``TROUBLE_BACKOFF_MAX``) instead
of ``dial_attempts`` times per send, and its repeats are counted (statistics, ``troubles``),
not said again; it is over, and said so once, when a connection with the peer opens. A peer
that was reached and went away keeps the usual pace of redials (the failure detector above).

The rules that keep it correct
==============================
* **Nothing waits without a bound**: a peer's queue, a dial, a handshake, an unproven
  connection's slot, a silent or slow peer each has its limit, and reaching it drops, closes
  or refuses, counted and traced, so no peer can make a node hold memory or a socket for ever.
* **The owner hears of each peer once per change**: a message as it arrives, the loss of a
  peer's last connection (``net_lost``), a peer that cannot be reached (``net_unreachable``),
  a trouble when it starts and when it is over; never a frame the handshake has not proven.
* **A connection is the hub's through its ``Hub`` calls alone** (:mod:`pubmesh.net.connection`):
  admitted, open, unusable, closed; the hub's routing (``peers``, the unproven slots) follows
  those calls and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from cryptography import x509

from pubmesh.net.address import address_of, format_id
from pubmesh.net.codec import encode
from pubmesh.net.connection import MAX_PUBLISHERS, PING, REVOKED, Connection, State, Writes
from pubmesh.net.framing import (
    DEFAULT_MAX_FRAME,
    MAX_CERTIFICATE,
    MAX_PATH,
    OVERHEAD,
    SIGNATURE,
    TAG_CONTROL,
)
from pubmesh.net.identity import Identity, check_certificate, tls_contexts
from pubmesh.net.revocation import RevocationList
from pubmesh.net.revocation import parse as parse_revocations
from pubmesh.net.security import AuthError, ClusterKey
from pubmesh.net.signing import (
    HASH_BYTES,
    SIGNATURE_WINDOW,
    Credential,
    Signed,
    credential_of,
)
from pubmesh.proto.core import Message, NodeId


@dataclass(frozen=True)
class NetConfig:
    """Limits and timings of the transport (the defaults suit a LAN or loopback)."""

    #: Largest frame accepted (bytes after the length prefix).
    max_frame: int = DEFAULT_MAX_FRAME
    #: Bytes that may wait for one peer (pending queue or connection buffer) before dropping.
    max_queue_bytes: int = 4 << 20
    dial_attempts: int = 4
    backoff_initial: float = 0.05
    backoff_max: float = 1.0
    connect_timeout: float = 2.0
    handshake_timeout: float = 5.0
    #: An accepted connection's first handshake message must arrive within this long.
    hello_timeout: float = 1.0
    #: Connections to peers no protocol monitors are closed after this long without traffic.
    idle_timeout: float = 30.0
    #: A connection that has sent nothing for this long sends a PING (heartbeat).
    ping_interval: float = 1.0
    #: A connection that has received nothing (not even a PING) for this long is lost: its
    #: peer is hung (stopped, swapping, its loop blocked) or cut off (module docstring).
    suspect_after: float = 5.0
    #: A connection whose queue (:meth:`Connection.backlog`) has stayed over half of
    #: ``max_queue_bytes`` this long is a slow peer: reported once (``net_slow``) ...
    slow_after: float = 2.0
    #: ... and this long, disconnected (``slow-peer``), as NATS cuts a slow consumer: frames
    #: to it were being dropped at its full queue, and every publisher that waits for room
    #: (Congestion.BLOCK) was waiting for it (module docstring, flow control)
    slow_disconnect: float = 10.0
    #: Bytes the node may hold in its queues (every peer's, and the application's)
    #: before a publication is refused or made to wait (pubmesh.net.runtime.Receipt)
    memory_budget: int = 64 << 20
    goodbye_timeout: float = 5.0
    max_connections: int = 1024
    #: Accepted connections whose handshake is not complete, in all and from one IP address;
    #: beyond either, the oldest of them is closed for the newest (module docstring).
    max_handshakes: int = 128
    max_handshakes_per_source: int = 16
    #: Period of connection maintenance (dial monitored peers, close idle connections).
    tick: float = 0.5
    #: Seconds a signed publication stays fresh either way of this node's clock (identity
    #: mode): older copies are refused as replays (pubmesh.net.signing, fresh signatures).
    signature_window: float = SIGNATURE_WINDOW
    #: Identity mode: a peer that sends this many invalid copies or frames (forged, stale,
    #: denied by the ACL, malformed) within ``invalid_window`` seconds is cut off and refused
    #: for ``ban_seconds`` (gossipsub v1.1's invalid-message penalty; module docstring).
    max_invalid: int = 10
    invalid_window: float = 10.0
    ban_seconds: float = 60.0

    def __post_init__(self) -> None:
        for item in fields(self):
            if getattr(self, item.name) <= 0:
                raise ValueError(f"{item.name} must be > 0, got {getattr(self, item.name)}")
        for low, high in (("ping_interval", "suspect_after"), ("slow_after", "slow_disconnect")):
            if getattr(self, low) >= getattr(self, high):
                raise ValueError(f"{low} must be less than {high}")
        if self.max_queue_bytes > self.memory_budget:
            raise ValueError("max_queue_bytes must not exceed memory_budget")


def net_config(settings: Sequence[str], *, where: str = "--net") -> NetConfig:
    """A :class:`NetConfig` from ``NAME=VALUE`` settings (``pubmesh node --net``), checked:
    a :class:`~pubmesh.errors.UserError` names the setting at fault and what it accepts."""
    from pubmesh.errors import UserError

    defaults = NetConfig()
    names = sorted(item.name for item in fields(NetConfig))
    values: dict[str, Any] = {}
    for setting in settings:
        name, sep, text = (part.strip() for part in setting.partition("="))
        if not sep or name not in names:
            raise UserError(
                f"{where} {setting!r}: write NAME=VALUE, NAME one of {', '.join(names)}"
            )
        kind = type(getattr(defaults, name))
        try:
            values[name] = kind(text.replace("_", ""))
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise UserError(f"{where} {name}={text!r}: {name} must be {what}") from None
    try:
        return NetConfig(**values)
    except ValueError as error:
        raise UserError(f"{where}: {error}") from None


class TransportOwner(Protocol):
    """What the transport tells the node runtime. Called from the event loop, synchronously."""

    def net_clock(self) -> float:
        """Wall-clock time for frame headers and the trace."""

    def net_receive(
        self, src: NodeId, message: Message, t_send: float, size: int, signed: Signed | None
    ) -> None: ...

    def net_sent(self, dst: NodeId, message: Message, t_send: float, size: int) -> None: ...

    def net_dropped(self, dst: NodeId, message: Message, t_send: float, reason: str) -> None: ...

    def net_lost(self, peer: NodeId) -> None: ...

    def net_unreachable(self, peer: NodeId, reason: str) -> None: ...

    def net_rejected(self, peer: NodeId | None, remote: str, reason: str, detail: str) -> None: ...

    def net_slow(self, peer: NodeId, backlog: int, seconds: float) -> None:
        """``peer``'s queue has held over half of ``max_queue_bytes`` for ``seconds``."""

    def net_trouble(self, trouble: Trouble, over: bool) -> None:
        """A peer that cannot be reached or refuses this node starts to be one (said once),
        or is reached at last (``over``)."""

    def net_monitored(self) -> set[NodeId]: ...

    def net_room(self) -> None:
        """Room may have appeared: a connection's write buffer drained below its low-water
        mark, or a connection went away with its queue (what a ``BLOCK`` publication waits
        for)."""


@dataclass
class _Pending:
    tag: int
    payload: bytes
    t_send: float
    message: Message
    signed: Signed | None


#: handshake refusals that are a trouble of their own: trying again cannot help until one of
#: the two nodes is started otherwise (reason -> Trouble.problem)
_PROBLEMS = {
    "auth-failed": "wrong-key",
    "speaks-tls": "speaks-tls",
    "speaks-shared-key": "speaks-shared-key",
}
#: dial failures that take seconds (a connect timeout, an unanswered ARP): a never-reached
#: peer's trouble is said at the first of them, not after the whole round of attempts
_SLOW_FAILURES = frozenset({"timeout", "no-route", "network-unreachable"})
#: a peer in trouble is dialed again after this long, doubling per failure up to the max
TROUBLE_BACKOFF_INITIAL = 1.0
TROUBLE_BACKOFF_MAX = 30.0
#: troubles kept at most, and forgotten after this long without a repeat (seconds)
MAX_TROUBLES = 256
TROUBLE_FORGET = 300.0
#: new troubles announced per window (seconds) at most
ANNOUNCEMENTS = 20
ANNOUNCE_WINDOW = 10.0
MAX_QUIET = 1024
MAX_REACHED = 1 << 16


@dataclass(eq=False)
class Trouble:
    """A peer this node cannot reach, or that refuses it for a reason retrying cannot fix (the
    cluster keys differ, the other node runs in another security mode): said once when it
    starts (``announced``), counted while it lasts, over once a connection with the peer opens
    (module docstring, "Troubles")."""

    #: the peer's address (a dialer that named none: its source address)
    address: str
    peer: NodeId | None
    #: unreachable, wrong-key, speaks-tls, speaks-shared-key
    problem: str
    #: the last failure's reason (refused, timeout, no-route, auth-failed, ...) and detail
    reason: str
    detail: str
    #: wall-clock time it started
    since: float
    #: this node dialed the peer and failed (not only refused its dials)
    dialed: bool = False
    #: dials failed, and refusals or failures in all, since it started
    failures: int = 0
    count: int = 0
    #: loop times: the last failure, the next dial allowed (dialed troubles)
    last: float = 0.0
    next_dial: float = 0.0
    announced: bool = False

    def gated(self, peer: NodeId, reached: set[NodeId]) -> bool:
        """Dials wait for the backoff: another key or mode, or a peer never reached (a peer
        that was reached and went away keeps the transport's usual pace)."""
        return self.problem != "unreachable" or peer not in reached

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "peer": self.peer,
            "problem": self.problem,
            "reason": self.reason,
            "detail": self.detail,
            "since": self.since,
            "failures": self.failures,
            "count": self.count,
        }


class Peer:
    """What the transport keeps per remote node."""

    __slots__ = ("dial_task", "id", "open", "pending", "pending_bytes")

    def __init__(self, node: NodeId) -> None:
        self.id = node
        #: authenticated connections usable for sending, oldest first
        self.open: list[Connection] = []
        self.pending: deque[_Pending] = deque()
        self.pending_bytes = 0
        self.dial_task: asyncio.Task[None] | None = None


class Transport:
    """One node's connections. See the module docstring."""

    def __init__(
        self,
        key: ClusterKey | None,
        owner: TransportOwner,
        config: NetConfig | None = None,
        *,
        identity: Identity | None = None,
    ) -> None:
        """Shared-key mode with ``key``; identity mode (TLS, certificates) with
        ``identity``, which then takes precedence."""
        if key is None and identity is None:
            raise ValueError("a transport needs a cluster key or an identity")
        self._key = key
        self.identity = identity
        #: publishers' certificates found valid: (DER, publisher) -> credential
        self._credentials: dict[tuple[bytes, NodeId], Credential] = {}
        #: identity mode's (server, client) TLS contexts
        self.tls = tls_contexts(identity) if identity is not None else None
        self.owner = owner
        self.config = config or NetConfig()
        self.loop = asyncio.get_running_loop()
        self.node_id: NodeId = 0
        self.peers: dict[NodeId, Peer] = {}
        self.connections: set[Connection] = set()
        #: accepted connections still in their handshake, oldest first, and their sources
        self._unproven: dict[Connection, str] = {}
        self._unproven_by_source: Counter[str] = Counter()
        #: identity mode: each peer's recent invalid copies and frames (loop times), and the
        #: peers cut off for them: node -> loop time the ban ends (module docstring)
        self._invalid: dict[NodeId, deque[float]] = {}
        self.banned: dict[NodeId, float] = {}
        #: entries of every connection's publisher credentials (held_bytes)
        self.cert_entries = 0
        #: the authority's revocation list, the newest this node has seen (identity mode)
        self.revocations: RevocationList | None = None
        self.server: asyncio.Server | None = None
        self.closed = False
        self.counters: Counter[str] = Counter()
        self.rejections: Counter[str] = Counter()
        #: the rejections of connections that had not completed their handshake
        self.handshake_rejections: Counter[str] = Counter()
        self.drops: Counter[str] = Counter()
        self._tick: asyncio.TimerHandle | None = None
        #: call ``owner.net_sent`` for every frame (the owner may turn it off when it does
        #: not record sent frames: a call per frame saved)
        self.report_sent = True
        #: the connections' coalesced writes (pubmesh.net.connection.Writes)
        self.writes = Writes(self.loop)
        self._last_message: Message | None = None
        self._last_encoded: tuple[int, bytes] = (0, b"")
        #: peers that cannot be reached or refuse us (another key or security mode), by
        #: address: each said once (module docstring, "Troubles")
        self.troubles: dict[str, Trouble] = {}
        #: the peers this transport has had a connection with (a dead contact is not a
        #: typo: its redials keep their pace)
        self._reached: set[NodeId] = set()
        #: remote addresses of connections refused as a trouble already said, and the
        #: trouble's address (bounded; quiet while the trouble lasts)
        self.quiet_remotes: OrderedDict[str, str] = OrderedDict()
        self._announce_window = -ANNOUNCE_WINDOW
        self._announced = 0

    @property
    def key_if_shared(self) -> ClusterKey | None:
        """The cluster key, None in identity mode."""
        return self._key

    @property
    def key(self) -> ClusterKey:
        """The cluster key (shared-key mode only)."""
        assert self._key is not None, "identity mode has no cluster key"
        return self._key

    # ------------------------------------------------------------------ lifecycle
    async def listen(self, host: str, port: int) -> int:
        """Start accepting on ``host:port`` (port 0: any free port); returns the port."""
        self.server = await self.loop.create_server(
            lambda: Connection(self, dialer=False), host, port, reuse_address=True, backlog=512
        )
        bound: int = self.server.sockets[0].getsockname()[1]
        from pubmesh.net.address import node_id

        self.node_id = node_id(host, bound)
        self._tick = self.loop.call_later(self.config.tick, self._maintain)
        return bound

    async def close(self, *, graceful: bool = True, timeout: float = 1.0) -> None:
        """Stop: goodbye to every peer (waiting up to ``timeout`` for the answers), then close."""
        if self.closed:
            return
        self.closed = True
        if self._tick is not None:
            self._tick.cancel()
        if self.server is not None:
            self.server.close()
        for peer in self.peers.values():
            if peer.dial_task is not None:
                peer.dial_task.cancel()
        connections = list(self.connections)
        if graceful:
            for conn in connections:
                conn.begin_close()
            deadline = self.loop.time() + timeout
            while any(c.state is not State.CLOSED for c in connections):
                if self.loop.time() >= deadline:
                    break
                await asyncio.sleep(0.01)
        for conn in connections:
            conn.abort()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    # ------------------------------------------------------------------ sending
    def certificates_held(self, change: int) -> None:
        self.cert_entries += change

    def send(
        self, dst: NodeId, message: Message, t_send: float, signed: Signed | None = None
    ) -> None:
        """Send ``message`` to ``dst`` now, or as soon as a connection is up; never blocks.
        ``signed``: the signature of the publication ``message`` carries (identity mode)."""
        if self.closed:
            self.owner.net_dropped(dst, message, t_send, "closed")
            self.drops["closed"] += 1
            return
        if message is self._last_message:
            # one message to several peers (a broadcast's eager push): encoded once
            tag, payload = self._last_encoded
        else:
            try:
                tag, payload = encode(message)
            except (TypeError, ValueError, OverflowError) as error:
                self.drops["encode-error"] += 1
                self.owner.net_dropped(dst, message, t_send, "encode-error")
                self.owner.net_rejected(dst, "local", "encode-error", str(error))
                return
            self._last_message = message
            self._last_encoded = (tag, payload)
        size = len(payload) + OVERHEAD
        largest = size + (
            SIGNATURE.size + MAX_PATH * HASH_BYTES + MAX_CERTIFICATE if signed is not None else 0
        )
        if largest > self.config.max_frame:
            # the peer would refuse the frame from its length and drop the link: refused here
            self._drop(dst, message, t_send, "oversized")
            return
        if self.banned and self.is_banned(dst):
            self._drop(dst, message, t_send, "banned")
            return
        peer = self.peers.get(dst)
        if peer is None:
            peer = self.peers[dst] = Peer(dst)
        if peer.open:
            conn = peer.open[0]
            if conn.backlog() + size > self.config.max_queue_bytes:
                self._drop(dst, message, t_send, "queue-full")
                return
            sent = conn.send_frame(tag, payload, t_send, signed)
            counters = self.counters
            counters["frames_sent"] += 1
            counters["bytes_sent"] += sent
            if self.report_sent:
                self.owner.net_sent(dst, message, t_send, sent)
            return
        if peer.pending_bytes + size > self.config.max_queue_bytes:
            self._drop(dst, message, t_send, "queue-full")
            return
        peer.pending.append(_Pending(tag, payload, t_send, message, signed))
        peer.pending_bytes += size
        self._dial(peer)

    def _drop(self, dst: NodeId, message: Message, t_send: float, reason: str) -> None:
        self.drops[reason] += 1
        self.owner.net_dropped(dst, message, t_send, reason)

    def release(self, peer_id: NodeId) -> None:
        """The protocol no longer needs ``peer_id``: close its connections gracefully."""
        peer = self.peers.get(peer_id)
        if peer is None:
            return
        for conn in list(peer.open):
            conn.begin_close()

    def connected(self, peer_id: NodeId) -> bool:
        peer = self.peers.get(peer_id)
        return peer is not None and bool(peer.open)

    # ------------------------------------------------------------------ dialing
    def _dial(self, peer: Peer) -> None:
        if self.closed:
            return
        if peer.dial_task is None or peer.dial_task.done():
            peer.dial_task = self.loop.create_task(self._dial_loop(peer))

    async def _dial_loop(self, peer: Peer) -> None:
        config = self.config
        delay = config.backoff_initial
        reason = "unreachable"
        try:
            host, port = address_of(peer.id)
        except ValueError:
            host, port, reason = "", 0, "not-an-address"
        if self.is_banned(peer.id):
            host, reason = "", "banned"
        if host:
            attempts = config.dial_attempts
            trouble = self.troubles.get(format_id(peer.id))
            if trouble is not None and trouble.dialed and trouble.gated(peer.id, self._reached):
                # a peer in trouble is dialed once per backoff, quietly (module docstring)
                attempts = 1
                wait = trouble.next_dial - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            detail = ""
            said: Trouble | None = None
            for attempt in range(attempts):
                if peer.open or self.closed:
                    return
                try:
                    await self._connect(peer.id, host, port)
                    self.counters["dials_ok"] += 1
                    return
                except AuthError as error:
                    reason, detail = error.reason, error.detail
                except (OSError, ConnectionError, TimeoutError) as error:
                    reason, detail = _dial_failure(error), str(error)
                    if reason in _SLOW_FAILURES and not said and peer.id not in self._reached:
                        # a dial that took seconds to fail: said now, not after the round
                        said = self._trouble(
                            format_id(peer.id), peer.id, "unreachable", reason, detail, dialed=True
                        )
                self.counters["dials_failed"] += 1
                if reason in _PROBLEMS:
                    break  # another key or mode: trying again at once cannot help
                if attempt + 1 < attempts:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, config.backoff_max)
            if peer.open or self.closed:
                return
            if reason not in _PROBLEMS and not said and peer.id not in self._reached:
                # never reached (a wrong or dead contact): said once, before its drops
                self._trouble(
                    format_id(peer.id), peer.id, "unreachable", reason, detail, dialed=True
                )
        if peer.open or self.closed:
            return
        while peer.pending:
            item = peer.pending.popleft()
            self._drop(peer.id, item.message, item.t_send, "unreachable")
        peer.pending_bytes = 0
        self.counters["unreachable"] += 1
        self.owner.net_unreachable(peer.id, reason)

    async def _connect(self, dst: NodeId, host: str, port: int) -> None:
        config = self.config
        async with asyncio.timeout(config.connect_timeout):
            _transport, conn = await self.loop.create_connection(
                lambda: Connection(self, dialer=True, expected=dst), host, port
            )
        async with asyncio.timeout(config.handshake_timeout):
            await conn.opened

    # ------------------------------------------------------------------ connection events
    def link_opened(self, conn: Connection) -> None:
        assert conn.peer is not None
        self.counters["connections_opened"] += 1
        if conn.peer not in self._reached or self.troubles:
            self._trouble_over(conn.peer)
        peer = self.peers.get(conn.peer)
        if peer is None:
            peer = self.peers[conn.peer] = Peer(conn.peer)
        peer.open.append(conn)
        if self.revocations is not None:  # the list goes out on every link (module docstring)
            conn.send_frame(TAG_CONTROL, REVOKED + self.revocations.blob, 0.0)
        while peer.pending:
            item = peer.pending.popleft()
            sent = conn.send_frame(item.tag, item.payload, item.t_send, item.signed)
            self.counters["frames_sent"] += 1
            self.counters["bytes_sent"] += sent
            self.owner.net_sent(peer.id, item.message, item.t_send, sent)
        peer.pending_bytes = 0

    def link_unusable(self, conn: Connection) -> None:
        if conn.peer is None:
            return
        peer = self.peers.get(conn.peer)
        if peer is not None and conn in peer.open:
            peer.open.remove(conn)

    def link_closed(self, conn: Connection, was: State) -> None:
        self.connections.discard(conn)
        if not conn.authenticated or conn.peer is None:
            return
        peer = self.peers.get(conn.peer)
        usable = peer is not None and conn in peer.open
        if peer is not None and usable:
            peer.open.remove(conn)
        if self.closed or conn.graceful:
            return
        if peer is not None and not peer.open and (usable or conn.rejected):
            self.counters["connections_lost"] += 1
            if peer.pending:
                self._dial(peer)
            self.owner.net_lost(peer.id)

    def received(
        self, src: NodeId, message: Message, t_send: float, size: int, signed: Signed | None
    ) -> None:
        self.counters["frames_received"] += 1
        self.counters["bytes_received"] += size
        self.owner.net_receive(src, message, t_send, size, signed)

    def credential(self, der: bytes, publisher: NodeId) -> Credential | None:
        """The credential in a publisher's certificate ``der`` as a signed frame brought it,
        or None if it is not this cluster's identity of ``publisher`` (checked once per
        certificate: the answers are kept)."""
        identity = self.identity
        if identity is None:
            return None
        key = (der, publisher)
        credential = self._credentials.get(key)
        if credential is not None:
            return credential
        try:
            cert = x509.load_der_x509_certificate(der)
            if check_certificate(cert, identity.authority, format_id(publisher)) is not None:
                return None
            credential = credential_of(cert, publisher)
        except ValueError:
            return None  # not a certificate, or not an Ed25519 one: not kept
        if len(self._credentials) >= MAX_PUBLISHERS:
            self._credentials.clear()
        self._credentials[key] = credential
        return credential

    # ------------------------------------------------------------------ revocation
    def adopt_revocations(self, blob: bytes, source: NodeId | None) -> bool:
        """Take the revocation list ``blob`` (from the peer ``source``, or None: this node's
        own file) if the cluster's authority signed it and it is newer than ours; then close
        the links of the nodes it revokes and send it on to every other peer
        (pubmesh.net.revocation). A list that does not verify is charged to its sender."""
        if self.identity is None:
            return False
        try:
            revocations = parse_revocations(blob, self.identity.authority)
        except ValueError as error:
            if source is not None:
                self.invalid(source, "bad-revocation-list")
            self.owner.net_rejected(source, "", "bad-revocation-list", str(error))
            return False
        current = self.revocations
        if current is not None and revocations.issued <= current.issued:
            return False
        self.revocations = revocations
        self.counters["revocation_lists"] += 1
        for conn in list(self.connections):
            if conn.peer_cert is not None and revocations.revokes(conn.peer_cert):
                conn.reject("revoked", "its certificate is on the authority's revocation list")
            elif conn.state is State.OPEN and conn.peer != source:
                conn.send_frame(TAG_CONTROL, REVOKED + revocations.blob, 0.0)
        self.writes.flush()
        return True

    def revoked_problem(self, cert: x509.Certificate) -> str | None:
        """Why a peer's certificate is refused by the revocation list, or None."""
        if self.revoked_serial(cert.serial_number):
            return "is revoked by the cluster's authority"
        return None

    def revoked_serial(self, serial: int) -> bool:
        revocations = self.revocations
        return revocations is not None and serial in revocations.serials

    # ------------------------------------------------------------------ invalid traffic
    def invalid(self, peer: NodeId, reason: str) -> None:
        """``peer`` sent an invalid copy or frame (``reason``). Identity mode: past
        ``max_invalid`` of them within ``invalid_window`` seconds, the peer is cut off
        (module docstring); shared-key mode, where any member can claim any id, bans nobody."""
        if self.identity is None or peer == self.node_id:
            return
        config = self.config
        now = self.loop.time()
        times = self._invalid.get(peer)
        if times is None:
            if len(self._invalid) >= config.max_connections:
                self._invalid = {
                    p: t
                    for p, t in self._invalid.items()
                    if t and t[-1] > now - config.invalid_window
                }
            times = self._invalid[peer] = deque()
        while times and times[0] <= now - config.invalid_window:
            times.popleft()
        times.append(now)
        if len(times) >= config.max_invalid:
            del self._invalid[peer]
            self.ban(
                peer,
                f"{len(times)} invalid copies or frames within {config.invalid_window:g} s, "
                f"the last {reason}; refused for {config.ban_seconds:g} s",
            )

    def ban(self, peer_id: NodeId, detail: str) -> None:
        """Cut ``peer_id`` off for ``ban_seconds``: its connections closed, its frames to
        come refused at the handshake, nothing sent or dialed to it (``banned``)."""
        self.banned[peer_id] = self.loop.time() + self.config.ban_seconds
        self.counters["bans"] += 1
        peer = self.peers.get(peer_id)
        if peer is not None:
            while peer.pending:
                item = peer.pending.popleft()
                self._drop(peer_id, item.message, item.t_send, "banned")
            peer.pending_bytes = 0
        for conn in list(self.connections):  # its open links, and one still in a handshake
            if conn.peer == peer_id and conn.state is not State.CLOSED:
                conn.reject("banned", detail)

    def is_banned(self, peer_id: NodeId) -> bool:
        until = self.banned.get(peer_id)
        if until is None:
            return False
        if until <= self.loop.time():
            del self.banned[peer_id]
            return False
        return True

    # ------------------------------------------------------------------ unproven connections
    def admit(self, conn: Connection) -> str | None:
        """Take a new connection in; for one accepted, make room first (module docstring:
        the oldest unproven connection of its source, or of all, goes). Why not, when every
        slot holds a proven connection."""
        if conn.dialer:
            self.connections.add(conn)
            return None
        config = self.config
        if self._unproven_by_source[conn.source] >= config.max_handshakes_per_source:
            self._evict(self._oldest(conn.source), f"{config.max_handshakes_per_source} from one")
        elif len(self._unproven) >= config.max_handshakes:
            self._evict(self._oldest(None), f"{config.max_handshakes} in all")
        if len(self.connections) >= config.max_connections:
            if not self._unproven:
                return f"{len(self.connections)} open, none unproven"
            self._evict(self._oldest(None), f"{config.max_connections} connections")
        self._unproven[conn] = conn.source
        self._unproven_by_source[conn.source] += 1
        self.connections.add(conn)
        return None

    def _oldest(self, source: str | None) -> Connection:
        """The unproven connection to close (of ``source``, or of all): the oldest that has
        sent nothing yet, else the oldest of the source that holds the most unproven slots.
        A handshake under way (an honest dialer sends its HELLO at once) outlives any number
        of idle sockets; and a stranger whose sockets all send a HELLO (which takes no key)
        and stall cannot churn an honest handshake out, however fast it reopens them, unless
        it holds no more slots than the honest dialer's address does: one each, which takes
        as many addresses as there are slots (``max_handshakes``)."""
        candidates = [c for c, s in self._unproven.items() if source is None or s == source]
        idle = next((c for c in candidates if not c.heard), None)
        if idle is not None or source is not None:
            return idle or candidates[0]
        most = max(self._unproven_by_source.values())
        return next(c for c in candidates if self._unproven_by_source[c.source] == most)

    def _evict(self, conn: Connection, full: str) -> None:
        age = self.loop.time() - conn.started
        conn.reject(
            "evicted",
            f"the oldest unproven connection ({age:.2f} s old), closed for a newer one: {full}",
        )

    def left_handshake(self, conn: Connection) -> None:
        """``conn`` is proven, refused or closed: it no longer holds an unproven slot."""
        source = self._unproven.pop(conn, None)
        if source is not None:
            self._unproven_by_source[source] -= 1
            if not self._unproven_by_source[source]:
                del self._unproven_by_source[source]

    def refused(
        self,
        peer: NodeId | None,
        remote: str,
        reason: str,
        detail: str,
        *,
        handshake: bool,
        conn: Connection | None = None,
    ) -> None:
        self.rejections[reason] += 1
        if handshake:
            self.handshake_rejections[reason] += 1
            if conn is not None:
                trouble = self._refused_trouble(conn, reason, detail)
                if trouble is not None and trouble.announced:
                    self._quiet_remote(remote, trouble)
        self.owner.net_rejected(peer, remote, reason, detail)

    # ------------------------------------------------------------------ troubles
    def _refused_trouble(self, conn: Connection, reason: str, detail: str) -> Trouble | None:
        """A connection refused in its handshake: the trouble it starts or repeats (another
        key, another security mode), or the one its peer already has; None otherwise."""
        peer = conn.expected if conn.dialer else conn.claimed
        key = format_id(peer) if peer is not None else conn.source
        problem = _PROBLEMS.get(reason)
        if problem is None:
            # a repeat of a known peer's trouble (not a bare source address: strangers share it)
            return self.troubles.get(key) if peer is not None else None
        return self._trouble(key, peer, problem, reason, detail, dialed=conn.dialer)

    def _trouble(
        self,
        key: str,
        peer: NodeId | None,
        problem: str,
        reason: str,
        detail: str,
        *,
        dialed: bool,
    ) -> Trouble:
        """Note that ``key`` (a peer's address, or a dialer's source address) is in trouble;
        a new trouble is announced (once: its repeats are counted, not said again), and a
        dialed peer's next dial waits its backoff (module docstring, "Troubles")."""
        now = self.loop.time()
        trouble = self.troubles.get(key)
        if trouble is None or trouble.problem != problem:
            if trouble is None and len(self.troubles) >= MAX_TROUBLES:
                oldest = min(self.troubles.values(), key=lambda t: t.last)
                del self.troubles[oldest.address]
            trouble = Trouble(key, peer, problem, reason, detail, since=self.owner.net_clock())
            self.troubles[key] = trouble
            self.counters["troubles"] += 1
        trouble.reason, trouble.detail, trouble.last = reason, detail, now
        trouble.count += 1
        if dialed:
            trouble.dialed = True
            trouble.failures += 1
            backoff = TROUBLE_BACKOFF_INITIAL * 2 ** min(trouble.failures - 1, 16)
            trouble.next_dial = now + min(backoff, TROUBLE_BACKOFF_MAX)
        if trouble.count == 1:
            self._announce(trouble, now)
        return trouble

    def _announce(self, trouble: Trouble, now: float) -> None:
        """Tell the owner of a new trouble, at most ANNOUNCEMENTS per ANNOUNCE_WINDOW (a
        stranger naming new ids cannot flood the log with them; the rest are not announced,
        and their refusals are counted and traced like any other)."""
        if now - self._announce_window >= ANNOUNCE_WINDOW:
            self._announce_window, self._announced = now, 0
        if self._announced >= ANNOUNCEMENTS:
            return
        self._announced += 1
        trouble.announced = True
        self.owner.net_trouble(trouble, False)

    def _trouble_over(self, peer: NodeId) -> None:
        """``peer`` is connected: its trouble, if any, is over (said once if it was said)."""
        self._reached.add(peer)
        if len(self._reached) > MAX_REACHED:
            self._reached = {peer}
        trouble = self.troubles.pop(format_id(peer), None)
        if trouble is not None and trouble.announced:
            self.owner.net_trouble(trouble, True)

    def _quiet_remote(self, remote: str, trouble: Trouble) -> None:
        quiet = self.quiet_remotes
        quiet[remote] = trouble.address
        quiet.move_to_end(remote)
        while len(quiet) > MAX_QUIET:
            quiet.popitem(last=False)

    def trouble_of(self, peer: NodeId | None, remote: str = "") -> Trouble | None:
        """The announced trouble a refusal or drop concerns, if any: a peer's (by its id) or a
        connection's already refused as one (by its remote address)."""
        if peer is not None:
            trouble = self.troubles.get(format_id(peer))
            if trouble is not None and trouble.announced:
                return trouble
        key = self.quiet_remotes.get(remote) if remote else None
        return self.troubles.get(key) if key is not None else None

    def _forget_troubles(self, now: float) -> None:
        """Troubles not seen for TROUBLE_FORGET seconds are forgotten (said again if they
        come back)."""
        stale = [t.address for t in self.troubles.values() if now - t.last > TROUBLE_FORGET]
        for key in stale:
            del self.troubles[key]

    # ------------------------------------------------------------------ maintenance
    def _maintain(self) -> None:
        if self.closed:
            return
        now = self.loop.time()
        try:
            monitored = self.owner.net_monitored()
        except Exception:  # a protocol bug must not stop maintenance
            monitored = set()
        for node in sorted(monitored):
            if node == self.node_id:
                continue
            peer = self.peers.get(node)
            if peer is None:
                peer = self.peers[node] = Peer(node)
            if not peer.open:
                self._dial(peer)
        self._heartbeat(now)
        if self.troubles:
            self._forget_troubles(now)
        idle = self.config.idle_timeout
        for peer in list(self.peers.values()):
            if peer.id in monitored:
                continue
            for conn in list(peer.open):
                if now - conn.last_active > idle:
                    conn.begin_close()
            if (
                not peer.open
                and not peer.pending
                and (peer.dial_task is None or peer.dial_task.done())
            ):
                del self.peers[peer.id]
        self._tick = self.loop.call_later(self.config.tick, self._maintain)

    def _heartbeat(self, now: float) -> None:
        """PING open connections that have sent nothing for ``ping_interval``; a connection
        that has heard nothing for ``suspect_after`` is lost, as a reset one is (module
        docstring, failure detection)."""
        config = self.config
        for conn in list(self.connections):
            if conn.state is not State.OPEN:
                continue
            silent = now - conn.last_heard
            if silent > config.suspect_after:  # counted with the rejections, as peer-silent
                conn.reject(
                    "peer-silent",
                    f"nothing received for {silent:.1f} s (suspect_after {config.suspect_after:g}"
                    " s): the peer is hung or cut off",
                )
                continue
            if now - conn.last_sent >= config.ping_interval:
                conn.send_frame(TAG_CONTROL, PING, 0.0)
            self._check_pace(conn, now)

    def _check_pace(self, conn: Connection, now: float) -> None:
        """A peer that reads slower than it is sent to: its queue stays over half full. Said
        once after ``slow_after``, disconnected after ``slow_disconnect`` (module docstring,
        flow control); a queue that drains below half starts the count over."""
        config = self.config
        backlog = conn.backlog()
        if 2 * backlog <= config.max_queue_bytes:
            conn.behind_since, conn.reported_slow = None, False
            return
        if conn.behind_since is None:
            conn.behind_since = now
        behind = now - conn.behind_since
        if behind > config.slow_disconnect:
            conn.reject(
                "slow-peer",
                f"its queue held over half of {config.max_queue_bytes:,} bytes for "
                f"{behind:.1f} s (slow_disconnect {config.slow_disconnect:g} s): it reads "
                "slower than it is sent to",
            )
        elif behind > config.slow_after and not conn.reported_slow and conn.peer is not None:
            conn.reported_slow = True
            self.counters["slow_peers"] += 1
            self.owner.net_slow(conn.peer, backlog, behind)

    def held_bytes(self) -> int:
        """What the transport keeps beside its queues, counted in the memory budget: the
        credentials found valid (a certificate each) and every connection's map of them, and
        the peers charged or banned for invalid traffic."""
        return (
            len(self._credentials) * (MAX_CERTIFICATE // 4 + 300)
            + self.cert_entries * 100
            + len(self._invalid) * (200 + 40 * self.config.max_invalid)
            + len(self.banned) * 100
        )

    def usage(self) -> tuple[int, NodeId | None, int]:
        """In one walk: the bytes the transport holds (every peer's queue, connections' and
        dials' both, and :meth:`held_bytes`), and the open connection with the most bytes
        waiting, and how many."""
        queued, peer, most = self.held_bytes(), None, 0
        for conn in self.connections:
            backlog = conn.backlog()
            queued += backlog
            if backlog > most and conn.state is State.OPEN:
                peer, most = conn.peer, backlog
        queued += sum(pending.pending_bytes for pending in self.peers.values())
        return queued, peer, most

    # ------------------------------------------------------------------ statistics
    def statistics(self) -> TransportStatistics:
        c = self.counters
        return TransportStatistics(
            frames_sent=c["frames_sent"],
            frames_received=c["frames_received"],
            bytes_sent=c["bytes_sent"],
            bytes_received=c["bytes_received"],
            connections_opened=c["connections_opened"],
            connections_lost=c["connections_lost"],
            slow_peers=c["slow_peers"],
            dials_ok=c["dials_ok"],
            dials_failed=c["dials_failed"],
            unreachable=c["unreachable"],
            bans=c["bans"],
            banned_now=sum(1 for peer in list(self.banned) if self.is_banned(peer)),
            connections=sum(1 for conn in self.connections if conn.state is State.OPEN),
            peers_connected=tuple(sorted(p.id for p in self.peers.values() if p.open)),
            rejected=dict(sorted(self.rejections.items())),
            handshake_rejected=dict(sorted(self.handshake_rejections.items())),
            dropped=dict(sorted(self.drops.items())),
            troubles=tuple(trouble.as_dict() for trouble in self.troubles.values()),
        )


@dataclass(frozen=True, slots=True)
class TransportStatistics:
    """A transport's counters (trio's ``RunStatistics`` shape: named fields, frozen)."""

    frames_sent: int = 0
    frames_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    connections_opened: int = 0
    #: peers found slow: their queue over half full for slow_after (flow control)
    slow_peers: int = 0
    connections_lost: int = 0
    dials_ok: int = 0
    dials_failed: int = 0
    #: sends to peers that could not be reached
    unreachable: int = 0
    #: peers cut off for invalid traffic (identity mode), in all and still now
    bans: int = 0
    banned_now: int = 0
    #: connections open now, and the peers they reach
    connections: int = 0
    peers_connected: tuple[int, ...] = ()
    #: refused connections and frames by reason (auth-failed, bad-frame, ...)
    rejected: Mapping[str, int] = field(default_factory=dict)
    #: those of ``rejected`` refused before their handshake completed (strangers, wrong keys)
    handshake_rejected: Mapping[str, int] = field(default_factory=dict)
    #: messages dropped by reason (unreachable, queue-full, ...)
    dropped: Mapping[str, int] = field(default_factory=dict)
    #: peers that cannot be reached or refuse this node (Trouble.as_dict), now
    troubles: tuple[Mapping[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["peers_connected"] = list(self.peers_connected)
        out["troubles"] = [dict(trouble) for trouble in self.troubles]
        out["rejected"] = dict(self.rejected)
        out["handshake_rejected"] = dict(self.handshake_rejected)
        out["dropped"] = dict(self.dropped)
        return out


def _dial_failure(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, OSError) and error.errno in _DIAL_ERRNOS:
        return _DIAL_ERRNOS[error.errno]
    return "connection-failed"


#: dial failures named by errno (the others are connection-failed)
_DIAL_ERRNOS = {
    errno.EHOSTUNREACH: "no-route",
    errno.ENETUNREACH: "network-unreachable",
    errno.ETIMEDOUT: "timeout",
    errno.ECONNRESET: "reset",
}
