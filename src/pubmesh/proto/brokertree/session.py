"""FIFO, loss-free sessions over non-FIFO links, with heartbeats and a failure detector
(docs/protocols/brokertree.md §2 "Links", "Failure detector", §7.1, §12.1; Kazemzadeh & Jacobsen
§5.1(ii), §9).

Kazemzadeh & Jacobsen runs over TCP (§9: "each connection object possesses a handler to a TCP
connection") and its proofs assume FIFO, loss-free links (§5.1). The simulator draws a latency
per message, so two frames to the same peer may overtake each other; the spec's model check
(its [D2]) lost publications without sessions, because a restarted node received a message
whose predecessor had gone to its dead incarnation. This module is the TCP stand-in, sans-io:

* **Frames** carry ``(sid, n)``: ``n`` counts the frames of one direction of session ``sid``
  from 0 (the Hello or HelloAck). The receiver releases them in order, holding any that
  arrive early; a gap older than ``fd_timeout`` ends the session (spec §2).
* **Sessions** open with ``Hello`` → ``HelloAck`` (Kazemzadeh & Jacobsen §4.2 "a hand shake is
  performed"); the dialer sends nothing else until the HelloAck arrives. One session per pair
  (spec §12.1): when both sides dial at once, the lower id's dial is kept.
* **Reset**: a frame on an unknown or old sid is answered with ``Reset`` (a TCP RST), and a
  Reset on a live session ends it (spec §2).
* **Failure detector** (Kazemzadeh & Jacobsen fn. 2; spec §2, after Publiy's 1 s / 3 s keep-alive):
  an
  idle session sends a ``Heartbeat`` every ``hb_period``; silence for ``fd_timeout`` makes the
  peer suspected. A handshake unanswered for ``fd_timeout`` fails. A runtime ``PeerDown``
  suspects at once. With ``hb = false`` only PeerDown, Reset and gaps end sessions.
* **Restarts**: a Hello with a newer epoch ends the old incarnation's session; frames and
  Hellos of an older epoch get Reset.

The node above sees, in the order they happened, the frames to send (``Send``), two kinds of
events: :class:`Up` (a session opened; the handshake's ``LSeq`` exchange of §7.1 is the node's
business) and :class:`Down` (it ended, with why), and the frames of the layer above released in
order (:class:`Released`): one output list, the layer contract of ``pubmesh.proto.core``
(:meth:`Sessions.handle`; the node calls :meth:`Sessions.receive` and :meth:`Sessions.tick`
directly, the same without the wrapper). The detector may be
wrong (Kazemzadeh & Jacobsen fn. 2: "may err"); the node only bypasses a suspected peer and probes
it again (spec §2 "Mistakes").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from pubmesh.proto.brokertree.messages import Heartbeat, Hello, HelloAck, Reset
from pubmesh.proto.core import Message, NodeId, PeerDown, Receive, Send

#: the messages this layer consumes; everything else is handed up in order
_OWN = (Hello, HelloAck, Heartbeat)


@dataclass(frozen=True, slots=True)
class Up:
    """Session with ``peer`` (its incarnation ``epoch``, of ``kind``) is open."""

    peer: NodeId
    epoch: float
    kind: str
    dialed: bool


@dataclass(frozen=True, slots=True)
class Down:
    """Session with ``peer`` ended: ``reason`` is "silent" (no frame for fd_timeout), "gap"
    (a missing frame for fd_timeout), "handshake" (no HelloAck in time), "reset", "restarted"
    (the peer came back as a new incarnation), "redialed" (the peer ended it and dialed again)
    "down" (the runtime said so) or "miswired" (another broker list: :class:`Miswired`)."""

    peer: NodeId
    reason: str


@dataclass(frozen=True, slots=True)
class Miswired:
    """``peer`` was started with another broker list or tree parameters (its ``wiring``
    differs from ours, :class:`pubmesh.proto.brokertree.messages.Hello`): no session opens,
    and it is not dialed again."""

    peer: NodeId
    wiring: int


Event = Up | Down | Miswired


@dataclass(frozen=True, slots=True)
class Released:
    """A frame of the layer above, released in its session's order."""

    message: Message


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat period passed (the node's own timer): heartbeats on idle sessions, and
    suspicion of the silent ones (:meth:`Sessions.tick`)."""


#: what the session layer takes: a frame, a heartbeat period, the runtime's failure notice
SessionInput = Receive | PeerDown | Beat
#: what it gives, in order: frames to send, then session events, then released frames
SessionOutput = Send | Up | Down | Miswired | Released


@dataclass(slots=True)
class _Session:
    peer: NodeId
    sid: int
    dialed: bool
    started: float
    is_open: bool = False
    peer_epoch: float = 0.0
    peer_kind: str = ""
    out_n: int = 1  # frame 0 is the Hello / HelloAck
    in_next: int = 0
    held: dict[int, tuple[Message, float]] = field(default_factory=dict)
    last_sent: float = 0.0
    last_heard: float = 0.0


class Sessions:
    """The sessions of one node. Methods return the frames to send (``Send`` outputs) and the
    events for the node, and never block; ``tick`` is called every ``hb_period``."""

    def __init__(
        self,
        me: NodeId,
        epoch: float,
        kind: str,
        *,
        hb: bool,
        hb_period: float,
        fd_timeout: float,
        wiring: int = 0,
    ) -> None:
        self.me = me
        self.epoch = epoch
        self.kind = kind
        self.wiring = wiring
        #: peers whose wiring differs from ours, never dialed again
        self.miswired: dict[NodeId, int] = {}
        self.hb = hb
        self.hb_period = hb_period
        self.fd_timeout = fd_timeout
        self._by_peer: dict[NodeId, _Session] = {}
        #: the sid of the last session with each peer, open or ended (Hello.after)
        self._last_sid: dict[NodeId, int] = {}
        self._dials = 0

    # ------------------------------------------------------------------ queries
    def is_open(self, peer: NodeId) -> bool:
        s = self._by_peer.get(peer)
        return s is not None and s.is_open

    def has(self, peer: NodeId) -> bool:
        """Open or opening."""
        return peer in self._by_peer

    def peers(self) -> list[NodeId]:
        """Peers with a session, open or opening (the node's ``monitored_peers``)."""
        return sorted(self._by_peer)

    def open_peers(self) -> list[NodeId]:
        return sorted(p for p, s in self._by_peer.items() if s.is_open)

    def epoch_of(self, peer: NodeId) -> float | None:
        s = self._by_peer.get(peer)
        return s.peer_epoch if s is not None and s.is_open else None

    # ------------------------------------------------------------------ sending
    def connect(self, peer: NodeId, now: float) -> list[Send]:
        """Dial ``peer`` unless a session with it is open or opening."""
        if peer in self._by_peer or peer == self.me or peer in self.miswired:
            return []
        self._dials += 1
        digest = hashlib.sha256(f"{self.me}:{self.epoch!r}:{self._dials}".encode()).digest()
        sid = int.from_bytes(digest[:7], "big") or 1
        s = _Session(peer, sid, dialed=True, started=now, last_sent=now, last_heard=now)
        self._by_peer[peer] = s
        after = self._last_sid.get(peer, 0)
        self._last_sid[peer] = sid
        hello = Hello(
            sid=sid, n=0, epoch=self.epoch, kind=self.kind, after=after, wiring=self.wiring
        )
        return [Send(peer, hello)]

    def send(self, peer: NodeId, make: Callable[[int, int], Message], now: float) -> Send:
        """The next frame to ``peer``, built by ``make(sid, n)``. The session must be open
        (KeyError / ValueError otherwise: a protocol error, not a network one)."""
        s = self._by_peer[peer]
        if not s.is_open:
            raise ValueError(f"session with {peer} is not open yet")
        message = make(s.sid, s.out_n)
        s.out_n += 1
        s.last_sent = now
        return Send(peer, message)

    def close(self, peer: NodeId) -> None:
        """Forget the session (the node gave up on it); later frames on it get Reset."""
        self._by_peer.pop(peer, None)

    # ------------------------------------------------------------------ the entry point
    def handle(self, event: SessionInput, now: float) -> list[SessionOutput]:
        """The layer's one entry point (``pubmesh.proto.core.Layer``): a frame, a heartbeat
        period or a failure notice in; frames to send, session events and released frames
        out, in that order."""
        match event:
            case Receive(src=src, message=message):
                return self.receive(src, message, now)
            case Beat():
                return self.tick(now)
            case PeerDown(peer=peer):
                return list(self.peer_down(peer))
        return []

    # ------------------------------------------------------------------ receiving
    def receive(self, src: NodeId, message: Message, now: float) -> list[SessionOutput]:
        """A frame from ``src``: the frames to send in answer (HelloAck, Reset), the events,
        and the messages now released in order (:meth:`handle` of a ``Receive``)."""
        sid: int = message.sid  # type: ignore[attr-defined]
        n: int = message.n  # type: ignore[attr-defined]
        if isinstance(message, Reset):
            s = self._by_peer.get(src)
            if s is not None and s.sid == sid:
                del self._by_peer[src]
                return [Down(src, "reset")]
            return []
        if isinstance(message, Hello):
            return self._hello(src, message, now)
        s = self._by_peer.get(src)
        if s is None or s.sid != sid:
            return [Send(src, Reset(sid=sid, n=0))]
        s.last_heard = now
        if n < s.in_next or n in s.held:
            raise ValueError(f"frame {n} of session {sid} from {src} seen twice")
        s.held[n] = (message, now)
        released: list[SessionOutput] = []
        events: list[SessionOutput] = []
        while s.in_next in s.held:
            frame, _ = s.held.pop(s.in_next)
            s.in_next += 1
            if isinstance(frame, HelloAck) and frame.wiring != self.wiring:
                del self._by_peer[src]
                self.miswired[src] = frame.wiring
                return [Miswired(src, frame.wiring), Down(src, "miswired")]
            if isinstance(frame, HelloAck):
                s.is_open = True
                s.peer_epoch, s.peer_kind = frame.epoch, frame.kind
                events.append(Up(src, frame.epoch, frame.kind, dialed=True))
            elif not isinstance(frame, _OWN):
                released.append(Released(frame))
        return events + released

    def _hello(self, src: NodeId, hello: Hello, now: float) -> list[SessionOutput]:
        events: list[SessionOutput] = []
        if hello.wiring != self.wiring:
            refusal = HelloAck(
                sid=hello.sid, n=0, epoch=self.epoch, kind=self.kind, wiring=self.wiring
            )
            first = src not in self.miswired
            self.miswired[src] = hello.wiring
            self._by_peer.pop(src, None)
            events = [Miswired(src, hello.wiring), Down(src, "miswired")] if first else []
            return [Send(src, refusal), *events]
        s = self._by_peer.get(src)
        if s is not None:
            if s.sid == hello.sid:
                raise ValueError(f"Hello of session {hello.sid} from {src} seen twice")
            known = s.peer_epoch if s.is_open else None
            if known is not None and hello.epoch < known:
                return [Send(src, Reset(sid=hello.sid, n=0))]  # a dead incarnation
            if known is not None and hello.epoch > known:
                events.append(Down(src, "restarted"))
            elif not s.is_open:
                # both dialed (spec §12.1): the lower id's dial is kept
                if self.me < src:
                    return []
            elif hello.after == s.sid:
                events.append(Down(src, "redialed"))
            else:
                return []  # lost a simultaneous dial; its dialer has dropped it
        s = _Session(src, hello.sid, dialed=False, started=now, last_sent=now, last_heard=now)
        s.is_open = True
        s.in_next = 1
        s.peer_epoch, s.peer_kind = hello.epoch, hello.kind
        self._by_peer[src] = s
        self._last_sid[src] = hello.sid
        events.append(Up(src, hello.epoch, hello.kind, dialed=False))
        ack = HelloAck(sid=hello.sid, n=0, epoch=self.epoch, kind=self.kind, wiring=self.wiring)
        return [Send(src, ack), *events]

    # ------------------------------------------------------------------ time and failures
    def tick(self, now: float) -> list[SessionOutput]:
        """Heartbeats on idle sessions; suspicion of silent peers, stuck gaps and unanswered
        handshakes (spec §2): the heartbeats, then the suspicions (:meth:`handle` of a
        :class:`Beat`)."""
        events: list[SessionOutput] = []
        sends: list[SessionOutput] = []
        for peer in sorted(self._by_peer):
            s = self._by_peer[peer]
            reason = None
            if not s.is_open:
                if now - s.started >= self.fd_timeout:
                    reason = "handshake"
            elif s.held and now - min(t for _, t in s.held.values()) >= self.fd_timeout:
                reason = "gap"
            elif self.hb and now - s.last_heard >= self.fd_timeout:
                reason = "silent"
            if reason is not None:
                del self._by_peer[peer]
                events.append(Down(peer, reason))
                continue
            if s.is_open and self.hb and now - s.last_sent >= self.hb_period - 1e-9:
                sends.append(self.send(peer, lambda sid, n: Heartbeat(sid=sid, n=n), now))
        return sends + events

    def peer_down(self, peer: NodeId) -> list[Event]:
        """The runtime's PeerDown: suspect at once (spec §2)."""
        if self._by_peer.pop(peer, None) is None:
            return []
        return [Down(peer, "down")]
