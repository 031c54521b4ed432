"""One TCP connection between two nodes, from either end: handshake, then frames both ways.

How it works
============
A :class:`Connection` is the asyncio protocol of one socket. It starts in ``HANDSHAKE``: in
shared-key mode the four frames of :mod:`pubmesh.net.security` (the dialer proves the cluster
key first), in identity mode TLS 1.3 driven by the connection itself
(:mod:`pubmesh.net.tls`), then the identity frame that binds the certificate to the node id.
It is then ``OPEN``: it cuts the bytes it reads into frames
(:class:`~pubmesh.net.framing.FrameBuffer`), opens each (:mod:`pubmesh.net.framing`),
decodes the message (:mod:`pubmesh.net.codec`) and hands it up; what it sends is sealed and
queued, and written once at the end of the loop's turn. ``CLOSING`` is the goodbye
exchange; ``CLOSED`` is the end, whatever caused it.

Everything a connection needs of the node's other connections, of its credentials and of its
owner goes through its :class:`Hub` (the :class:`~pubmesh.net.transport.Transport` that holds
it), a typed protocol of public calls: a connection never reads or writes the hub's fields.

The rules that keep it correct
==============================
* **Nothing is trusted before the handshake proves it**: until ``OPEN`` the id the other end
  claims is only a claim; frames are refused before they are read past their length.
* **One refusal, one line, one charge**: a frame or handshake refused closes the connection
  with a reason (:meth:`Connection.reject`), and the hub charges the peer when it is proven.
* **A connection tells its hub of each change of state once**: admitted, open, unusable
  (closing), closed; the hub's routing follows those calls and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import ssl
from typing import TYPE_CHECKING, Any, Protocol, cast

from cryptography import x509

from pubmesh.net import security
from pubmesh.net.address import format_id
from pubmesh.net.codec import CodecError, decode
from pubmesh.net.framing import (
    CONTROL_GOODBYE,
    CONTROL_GOODBYE_ACK,
    CONTROL_PING,
    CONTROL_REVOKED,
    TAG_CONTROL,
    FrameBuffer,
    FrameError,
    FrameTooLarge,
    Opener,
    Sealer,
    TlsOpener,
    TlsSealer,
)
from pubmesh.net.identity import Identity, check_certificate
from pubmesh.net.security import AuthError, ClusterKey
from pubmesh.net.signing import (
    Credential,
    Signed,
)
from pubmesh.net.tls import TlsLink
from pubmesh.proto.core import Message, NodeId

if TYPE_CHECKING:
    from pubmesh.net.transport import NetConfig, TransportOwner


#: publishers' certificates kept per connection and checked per node, at most (a cluster's
#: identities; beyond it a connection is refused and the node's cache starts over)
MAX_PUBLISHERS = 65536
#: TCP_USER_TIMEOUT of every connection (milliseconds)
USER_TIMEOUT_MS = 10_000
#: the bytes of a connection's start that show another security mode
HEAD_BYTES = 8


class Hub(Protocol):
    """What a :class:`Connection` asks of the transport that holds it (the hub): its loop,
    configuration and credentials, and the calls by which a connection reports each change of
    its state. :class:`~pubmesh.net.transport.Transport` is the one implementation."""

    loop: asyncio.AbstractEventLoop
    config: NetConfig
    node_id: NodeId
    identity: Identity | None
    tls: tuple[ssl.SSLContext, ssl.SSLContext] | None
    owner: TransportOwner
    #: the write coalescing all the hub's connections share
    writes: Writes

    @property
    def key(self) -> ClusterKey: ...

    @property
    def key_if_shared(self) -> ClusterKey | None: ...

    def admit(self, conn: Connection) -> str | None:
        """Take an accepted connection in (None), or why there is no room for it."""

    def link_opened(self, conn: Connection) -> None: ...

    def link_unusable(self, conn: Connection) -> None: ...

    def link_closed(self, conn: Connection, was: State) -> None: ...

    def left_handshake(self, conn: Connection) -> None: ...

    def refused(
        self,
        peer: NodeId | None,
        remote: str,
        reason: str,
        detail: str,
        *,
        handshake: bool,
        conn: Connection | None = None,
    ) -> None: ...

    def received(
        self, peer: NodeId, message: Message, t_send: float, size: int, signed: Signed | None
    ) -> None: ...

    def invalid(self, peer: NodeId, reason: str) -> None: ...

    def is_banned(self, peer_id: NodeId) -> bool: ...

    def credential(self, der: bytes, publisher: NodeId) -> Credential | None: ...

    def certificates_held(self, change: int) -> None:
        """Certificates kept by connections went up or down by ``change``."""

    def adopt_revocations(self, blob: bytes, source: NodeId | None) -> bool: ...

    def revoked_problem(self, cert: x509.Certificate) -> str | None: ...


class Writes:
    """Writes are coalesced: the frames the hub's connections queue while one of them handles
    what it read go out at the end of that read, one ``write`` a connection, and a node woken
    by one frame handles and forwards it in one turn of the loop instead of two (every turn
    costs a node process CPU); frames queued outside a read go out at the end of the turn."""

    __slots__ = ("loop", "reading", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: a connection is handling what it read
        self.reading = False
        #: connections with frames queued during it
        self.waiting: list[Connection] = []

    def queued(self, conn: Connection) -> None:
        """``conn`` has frames queued (its first since its last write)."""
        if self.reading:
            self.waiting.append(conn)
        else:
            self.loop.call_soon(conn.flush)

    def flush(self) -> None:
        """Write what every waiting connection queued."""
        waiting, self.waiting = self.waiting, []
        for conn in waiting:
            conn.flush()


class State(enum.Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


#: the control frames' payloads (framing: tag 0, one byte)
GOODBYE = bytes([CONTROL_GOODBYE])
GOODBYE_ACK = bytes([CONTROL_GOODBYE_ACK])
PING = bytes([CONTROL_PING])
REVOKED = bytes([CONTROL_REVOKED])


class Connection(asyncio.Protocol):
    """One TCP connection: handshake, then sealed data frames both ways."""

    def __init__(self, hub: Hub, *, dialer: bool, expected: NodeId | None = None) -> None:
        self.hub = hub
        self.dialer = dialer
        self.expected = expected
        self.state = State.HANDSHAKE
        self.peer: NodeId | None = None
        #: the id an accepted connection's HELLO claims, before the proof (never a peer)
        self.claimed: NodeId | None = None
        self.remote = "?"
        self.source = "?"
        self.transport: asyncio.Transport | None = None
        self.buffer = FrameBuffer(security.MAX_HANDSHAKE_FRAME)
        self.opened: asyncio.Future[Connection] = hub.loop.create_future()
        self.graceful = False
        self.rejected = False
        #: the handshake completed: only then can this connection's loss mean a peer is down
        self.authenticated = False
        self.last_active = self.started = hub.loop.time()
        #: the last frame received (PINGs included) and sent: the heartbeat's clocks
        self.last_heard = self.last_sent = self.started
        #: since when the queue has held over half of max_queue_bytes (None: it has not)
        self.behind_since: float | None = None
        self.reported_slow = False
        self._nonce = b""
        self._peer_nonce = b""
        self._script = b""
        self._sealer: Sealer | TlsSealer | None = None
        self._opener: Opener | TlsOpener | None = None
        #: identity mode: the peer's certificate, once TLS has checked its chain
        self.peer_cert: Any = None
        #: identity mode: the TLS session this connection drives (tls.TlsLink)
        self._tls: TlsLink | None = None
        #: signed publications: the publishers whose certificates this connection has carried,
        #: each way (signing docstring)
        self._certs_sent: set[NodeId] = set()
        #: the publishers' credentials this connection brought (valid ones only: a refused
        #: certificate is charged to the peer, not kept), counted by the hub (Hub.certificates_held)
        self._certs_received: dict[NodeId, Credential] = {}
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        #: the first bytes received (up to HEAD_BYTES): another security mode shows there
        self._head = b""

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the interface without the base class
        self.transport = cast(asyncio.Transport, transport)
        peername = transport.get_extra_info("peername")
        if peername:
            self.source = str(peername[0])
            self.remote = f"{peername[0]}:{peername[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _tune(sock)
        hub = self.hub
        full = hub.admit(self)
        if full is not None:
            self.reject("too-many-connections", full)
            return
        first = hub.config.handshake_timeout if self.dialer else hub.config.hello_timeout
        self._timer = hub.loop.call_later(first, self._handshake_timeout)
        if hub.tls is not None:  # identity mode: TLS first, on this TCP connection
            server, client = hub.tls
            context = client if self.dialer else server
            try:
                self._tls = TlsLink(self.transport, context, server_side=not self.dialer)
            except ssl.SSLError as error:
                self.reject("tls-failed", _tls_problem(error))
            return
        if self.dialer:
            self._nonce = security.new_nonce()
            self.transport.write(security.hello(hub.node_id, self._nonce))

    def data_received(self, data: bytes) -> None:
        if self.state is State.HANDSHAKE and not self.dialer and not self.heard:
            self._first_heard()
        tls = self._tls
        if self.state is State.HANDSHAKE and len(self._head) < HEAD_BYTES:
            # the first bytes tell another security mode at the other end (module docstring)
            self._head += data[: HEAD_BYTES - len(self._head)]
            if self._other_mode(data):
                return
        if tls is None:
            self.buffer.extend(data)
        else:
            tls.receive(data)
            try:
                if not tls.established:
                    if not tls.handshake():
                        return
                    self._tls_established()
                    if self.state is State.CLOSED:
                        return
                self.buffer.extend(tls.read())
            except ssl.SSLError as error:
                self.reject("tls-failed", _tls_problem(error))
                return
        self._drain()

    def _other_mode(self, data: bytes) -> bool:
        """The peer's first bytes are another security mode's (module docstring, "Another
        mode"): refuse the connection naming the mismatch, telling an acceptor's dialer so in
        words its own handshake reads. True when refused."""
        head = self._head
        tls = self._tls
        if tls is None and security.speaks_tls(head):
            if not self.dialer:
                assert self.transport is not None
                self.transport.write(security.refused_frame(security.SHARED_KEY_REFUSAL))
            self.reject(
                "speaks-tls",
                "it speaks TLS: it runs in identity mode (certificates); this node uses a "
                "shared cluster key",
                flush=not self.dialer,
            )
            return True
        if tls is not None and not tls.established and security.speaks_shared_key(head):
            if not self.dialer:
                self.claimed = security.hello_claim(data)
                tls.raw.write(security.refused_frame(security.IDENTITY_MODE_REFUSAL))
            self.reject(
                "speaks-shared-key",
                "it speaks pubmesh's shared-key handshake: it runs with a cluster key; this "
                "node uses identity mode (certificates)",
                flush=not self.dialer,
            )
            return True
        return False

    def _first_heard(self) -> None:
        """An accepted connection's first bytes came in time (``hello_timeout``): the rest of
        the handshake has what is left of ``handshake_timeout``."""
        hub = self.hub
        if self._timer is not None:
            self._timer.cancel()
        rest = self.started + hub.config.handshake_timeout - hub.loop.time()
        self._timer = hub.loop.call_later(max(0.0, rest), self._handshake_timeout)

    def _drain(self) -> None:
        """Handle every complete frame received."""
        buffer = self.buffer
        hub = self.hub
        # what handling this read sends goes out when the read is handled, in this turn of
        # the loop (Writes)
        writes = hub.writes
        writes.reading = True
        try:
            while self.state is not State.CLOSED:
                frame = buffer.next()
                if frame is None:
                    break
                if self.state is State.HANDSHAKE:
                    self._handshake(frame)
                else:
                    self._data(frame)
        except FrameTooLarge as error:
            self.reject("oversized-frame", str(error))
        finally:
            writes.reading = False
            if writes.waiting:
                writes.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.state in (State.OPEN, State.CLOSING) and self.buffer.pending():
            # the peer went away in the middle of a frame: a truncated frame
            self.hub.refused(
                self.peer,
                self.remote,
                "truncated-frame",
                f"{self.buffer.pending()} bytes of an incomplete frame when the connection closed",
                handshake=False,
            )
        was = self.state
        self.state = State.CLOSED
        self.hub.certificates_held(-len(self._certs_received))
        self._certs_received.clear()
        if self._timer is not None:
            self._timer.cancel()
        if was is State.HANDSHAKE:
            self.hub.left_handshake(self)
            # the other side gave up on the handshake without a word: a peer of another
            # protocol version, or one that went away
            during = (
                "the TLS handshake" if self._tls and not self._tls.established else "the handshake"
            )
            self.hub.refused(
                self.expected,
                self.remote,
                "handshake-aborted",
                f"the peer closed the connection during {during}" + self._claim(),
                handshake=True,
                conn=self,
            )
        if not self.opened.done():
            self.opened.set_exception(
                ConnectionError(f"connection to {self.remote} closed during the handshake")
            )
            self.opened.exception()  # mark retrieved: nobody may be waiting
        self.hub.link_closed(self, was)
        self.hub.owner.net_room()  # its queue went with it

    def resume_writing(self) -> None:
        """asyncio: the write buffer drained below its low-water mark (after going over the
        high one): the room a blocked publication waits for."""
        self.hub.owner.net_room()

    # ------------------------------------------------------------------ handshake
    def _tls_established(self) -> None:
        """Identity mode: the TLS 1.3 session is up, certificates both ways (the chain and
        the validity period checked by TLS against the cluster's authority); the dialer now
        checks that the acceptor's certificate names the address it dialed and says HELLO.
        Refusals name the reason on both ends."""
        hub = self.hub
        tls = self._tls
        assert tls is not None
        self.transport = tls
        der = tls.session.getpeercert(binary_form=True)
        if der is None:
            self.reject("tls-failed", "the peer showed no certificate")
            return
        self.peer_cert = x509.load_der_x509_certificate(der)
        if self.dialer:
            assert hub.identity is not None and self.expected is not None
            problem = check_certificate(
                self.peer_cert, hub.identity.authority, format_id(self.expected)
            ) or hub.revoked_problem(self.peer_cert)
            if problem is not None:
                self._refuse_certificate(problem)
                return
            self._nonce = security.new_nonce()
            tls.write(security.hello(hub.node_id, self._nonce))

    def _refuse_certificate(self, problem: str) -> None:
        """Refuse the peer's certificate, telling it why over the TLS session first."""
        assert self.transport is not None
        self.transport.write(security.refused_frame(f"your certificate {problem}"))
        self.reject("identity-refused", f"its certificate {problem}", flush=True)

    def _identity_handshake(self, body: bytes) -> None:
        """Identity mode after TLS: HELLO (the dialer's claimed id, which its certificate
        must name) and CHALLENGE (the acceptor's id, which must be the one dialed)."""
        hub = self.hub
        assert hub.identity is not None and self.transport is not None
        if self.dialer:
            acceptor, _nonce = security.parse_challenge(body)
            if acceptor != self.expected:
                raise AuthError(
                    "wrong-peer",
                    f"dialed {format_id(self.expected or 0)}, reached {format_id(acceptor)}",
                )
            self._open(acceptor, None, None)
            return
        dialer, _nonce = security.parse_hello(body)
        self.claimed = dialer
        problem = check_certificate(
            self.peer_cert, hub.identity.authority, format_id(dialer)
        ) or hub.revoked_problem(self.peer_cert)
        if problem is not None:
            self._refuse_certificate(problem)
            return
        self._nonce = security.new_nonce()
        self.transport.write(security.challenge(hub.node_id, self._nonce))
        self._open(dialer, None, None)

    def _handshake(self, frame: bytes) -> None:
        hub = self.hub
        body = frame[4:]
        try:
            security.check_refusal(body, hub.key_if_shared)
            if hub.identity is not None:
                self._identity_handshake(body)
            elif self.dialer and not self._script:
                # CHALLENGE: prove first (the acceptor proves nothing to a stranger)
                acceptor, nonce = security.parse_challenge(body)
                if self.expected is not None and acceptor != self.expected:
                    raise AuthError(
                        "wrong-peer",
                        f"dialed {format_id(self.expected)}, reached {format_id(acceptor)}",
                    )
                self.claimed = acceptor
                self._script = security.transcript(self._nonce, nonce, hub.node_id, acceptor)
                assert self.transport is not None
                self.transport.write(
                    security.proof_frame(hub.key.proof(security.DIALER_LABEL, self._script))
                )
            elif self.dialer:
                # CONFIRM: the acceptor's proof, only now
                proof = security.parse_confirm(body)
                security.verify(
                    hub.key.proof(security.ACCEPTOR_LABEL, self._script),
                    proof,
                    f"peer {self.remote}",
                    hub.key,
                )
                send_key, receive_key = security.session_keys(hub.key, self._script)
                assert self.claimed is not None
                self._open(self.claimed, send_key, receive_key)
            elif not self._script:
                dialer, nonce = security.parse_hello(body)
                self.claimed = dialer
                self._nonce = security.new_nonce()
                self._script = security.transcript(nonce, self._nonce, dialer, hub.node_id)
                assert self.transport is not None
                self.transport.write(security.challenge(hub.node_id, self._nonce))
            else:
                proof = security.parse_proof(body)
                assert self.transport is not None
                try:
                    security.verify(
                        hub.key.proof(security.DIALER_LABEL, self._script),
                        proof,
                        self.remote,
                        hub.key,
                    )
                except AuthError as error:
                    # say so before the close: the dialer then names the reason too
                    self.transport.write(security.refused_frame())
                    self.reject(error.reason, error.detail, flush=True)
                    return
                self.transport.write(
                    security.confirm_frame(hub.key.proof(security.ACCEPTOR_LABEL, self._script))
                )
                receive_key, send_key = security.session_keys(hub.key, self._script)
                assert self.claimed is not None
                self._open(self.claimed, send_key, receive_key)
        except AuthError as error:
            self.reject(error.reason, error.detail)

    def _open(self, peer: NodeId, send_key: bytes | None, receive_key: bytes | None) -> None:
        """The handshake is over: frames flow (sealed with the session keys, or framed only
        where TLS carries them: identity mode, no keys)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.peer = peer
        if self.hub.is_banned(peer):
            self.reject("banned", "cut off for invalid traffic; refused until its ban ends")
            return
        if send_key is None or receive_key is None:
            self._sealer, self._opener = TlsSealer(), TlsOpener()
        else:
            self._sealer, self._opener = Sealer(send_key), Opener(receive_key)
        self.buffer.limit = self.hub.config.max_frame
        self.state = State.OPEN
        self.authenticated = True
        self.hub.left_handshake(self)
        self.last_active = self.hub.loop.time()
        self.hub.link_opened(self)
        if not self.opened.done():
            self.opened.set_result(self)

    def _handshake_timeout(self) -> None:
        if self.state is not State.HANDSHAKE:
            return
        config = self.hub.config
        if self.dialer or self.heard:
            limit = config.handshake_timeout
            self.reject("handshake-timeout", f"no complete handshake within {limit:g} s")
        else:
            limit = config.hello_timeout
            self.reject("handshake-timeout", f"no handshake message within {limit:g} s")

    @property
    def heard(self) -> bool:
        """Some of the handshake arrived (an accepted connection's HELLO or part of it, or
        in identity mode any of the TLS handshake)."""
        if self._tls is not None and self._tls.received:
            return True
        return bool(self._script) or self.buffer.pending() > 0

    def _claim(self) -> str:
        """What an unproven connection claimed, for a refusal's detail (never its peer)."""
        if self.claimed is None or self.authenticated:
            return ""
        return f" (it claimed to be {format_id(self.claimed)}, unproven)"

    # ------------------------------------------------------------------ data
    def _data(self, frame: bytes) -> None:
        assert self._opener is not None
        try:
            tag, t_send, payload, block = self._opener.open_frame(frame)
            signed = None if block is None else self._signature(*block)
        except FrameError as error:
            self._refuse_frame(error.reason, error.detail)
            return
        now = self.last_heard = self.hub.loop.time()
        if tag == TAG_CONTROL:
            self._control(bytes(payload))
            return
        self.last_active = now
        try:
            message = decode(tag, payload)
        except CodecError as error:
            self._refuse_frame(error.reason, error.detail)
            return
        assert self.peer is not None
        self.hub.received(self.peer, message, t_send, len(frame), signed)

    def _refuse_frame(self, reason: str, detail: str) -> None:
        """A malformed data frame: the link is closed, and the peer charged an invalid frame
        (identity mode bans a peer that keeps sending them: Transport.invalid)."""
        if self.peer is not None:
            self.hub.invalid(self.peer, reason)
        self.reject(reason, detail)

    def _signature(self, signed: Signed, der: bytes) -> Signed:
        """A signed frame's signature, with the credential of the publisher it names: from
        the certificate ``der`` the frame carries, or one this connection brought before.
        The signature is checked by the runtime; here only the certificate."""
        publisher = signed.publisher
        if der:
            credential = self.hub.credential(der, publisher)
            known = self._certs_received
            if credential is None:
                if self.peer is not None:
                    self.hub.invalid(self.peer, "bad-certificate")
            elif publisher not in known:
                if len(known) >= MAX_PUBLISHERS:
                    raise FrameError(
                        "too-many-publishers", f"over {MAX_PUBLISHERS} publishers' certificates"
                    )
                known[publisher] = credential
                self.hub.certificates_held(1)
        signed.credential = self._certs_received.get(publisher)
        return signed

    def _control(self, payload: bytes) -> None:
        if payload == GOODBYE:
            self.graceful = True
            if self.state is State.OPEN:
                self.hub.link_unusable(self)
            self.send_frame(TAG_CONTROL, GOODBYE_ACK, 0.0)
            self._close_now()
        elif payload == GOODBYE_ACK and self.state is State.CLOSING:
            self._close_now()
        elif payload == PING:
            pass  # last_heard is already updated
        elif payload[:1] == REVOKED:
            self.hub.adopt_revocations(payload[1:], self.peer)
        else:
            self.reject("unknown-type", f"control frame {payload[:8].hex()}")

    # ------------------------------------------------------------------ sending
    def send_frame(
        self, tag: int, payload: bytes, t_send: float, signed: Signed | None = None
    ) -> int:
        assert self._sealer is not None
        der = b""
        # the publisher's certificate goes with the first of its publications this connection
        # carries; the receiver keeps it for the connection's later frames
        if signed is not None and signed.credential is not None:
            publisher = signed.publisher
            if publisher not in self._certs_sent:
                self._certs_sent.add(publisher)
                der = signed.credential.der
        frame = self._sealer.seal(tag, payload, t_send, signed, der)
        self._out.append(frame)
        self._out_bytes += len(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.hub.writes.queued(self)
        return len(frame)

    def backlog(self) -> int:
        """Bytes accepted for this connection and not yet handed to the kernel."""
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        return buffered + self._out_bytes

    def flush(self) -> None:
        """Hand what is queued to the socket (:class:`Writes` calls it once a read or a turn)."""
        self._flush_scheduled = False
        if not self._out:
            return
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out.clear()
        self._out_bytes = 0
        self.last_sent = self.hub.loop.time()
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    # ------------------------------------------------------------------ closing
    def begin_close(self) -> None:
        """Graceful close: GOODBYE, keep reading until GOODBYE_ACK (or a timeout)."""
        if self.state is not State.OPEN:
            return
        self.hub.link_unusable(self)
        self.graceful = True
        self.send_frame(TAG_CONTROL, GOODBYE, 0.0)
        self.state = State.CLOSING
        self._timer = self.hub.loop.call_later(self.hub.config.goodbye_timeout, self._close_now)

    def _close_now(self) -> None:
        self.flush()
        if self.state is State.HANDSHAKE:
            self.hub.left_handshake(self)
        self.state = State.CLOSED
        if self.transport is not None:
            self.transport.close()

    def reject(self, reason: str, detail: str, *, flush: bool = False) -> None:
        """Refuse what the peer sent: trace it, drop the connection at once (with ``flush``,
        once what was written to it has gone out)."""
        if self.state is State.CLOSED:
            return
        if self.state is State.OPEN:
            self.hub.link_unusable(self)
        handshake = self.state is State.HANDSHAKE
        if handshake:
            self.hub.left_handshake(self)
        self.state = State.CLOSED
        self.rejected = True
        if not self.opened.done():
            self.opened.set_exception(AuthError(reason, detail))
            self.opened.exception()  # mark retrieved: nobody may be waiting
        peer = self.peer if self.peer is not None else self.expected
        self.hub.refused(
            peer, self.remote, reason, detail + self._claim(), handshake=handshake, conn=self
        )
        if self.transport is not None:
            if flush:
                self.transport.close()
            else:
                self.transport.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _tls_problem(error: BaseException) -> str:
    """What a failed TLS handshake says, in a line: OpenSSL's reason (``certificate verify
    failed: certificate has expired``, ``tlsv13 alert certificate required``...)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        what = _VERIFY_CODES.get(error.verify_code)
        if what is None:
            return f"certificate verify failed: {error.verify_message}"
        return f"its certificate {what} ({error.verify_message})"
    if isinstance(error, ssl.SSLError) and error.reason:
        text = str(error.reason).lower().replace("_", " ")
        if "alert" in text:
            return f"the peer refused the TLS handshake ({text})"
        return text
    if isinstance(error, TimeoutError):
        return "no TLS handshake in time"
    if isinstance(error, ConnectionError):
        return "the peer closed the connection during the TLS handshake"
    return str(error) or type(error).__name__


#: OpenSSL's verification failures, said in the cluster's terms
_VERIFY_CODES = {
    9: "is not valid yet",
    10: "has expired",
    18: "is not from this cluster's authority",
    19: "is not from this cluster's authority",
    20: "is not from this cluster's authority",
    21: "is not from this cluster's authority",
}


def _tune(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            # data unacknowledged this long (a host gone, a cable cut) fails the connection in
            # the kernel, instead of after ~15 minutes of retransmissions
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)
