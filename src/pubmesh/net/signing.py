"""Signed publications (identity mode): the publisher signs, every node verifies before the
protocol sees a copy.

Why the runtime and not the protocols
=====================================
A member of the cluster holds a valid identity and can send any protocol message. Without
signatures it can deliver a forged payload under another node's publication id, and the real
publication is then dropped by every protocol's duplicate filter. So, as gossipsub signs every
message by default (libp2p's ``StrictSign``), a node in identity mode signs its publications
and every node verifies a copy *before* handing it to the protocol: a forgery is never
delivered, never forwarded, and never enters the duplicate filter. The check sits in the
runtime, below every stack, so the six stacks get it alike and the simulator (which has no
adversary) carries none of it.

What is signed
==============
A payload message (``register_message(..., payload=True)``) carries its publication's content
in fields every stack names alike: ``topic``, ``pub_id``, ``payload``, and where the stack has
them ``attributes`` and ``publisher``. The signature covers the publisher's id and those
fields (:func:`content_digest`); hop counts, rounds and session numbers change on the way and
are not signed. It travels beside the message in the frame (:mod:`pubmesh.net.framing`), with
the publisher's certificate the first time a connection carries that publisher's publication,
so any node, not only the publisher's neighbours, can check it against the cluster's
authority.

An id bound to its publisher
============================
A valid signature is not enough: a member could sign its *own* publication under the id of
another's, reach some nodes first, and the real one would be dropped there as a duplicate. So
a publication id is a hash of the publisher's id and a nonce (:func:`bound_pub_id`), the nonce
travels with the signature, and a copy whose id is not its publisher's hash is refused: taking
another publisher's id would take a 63-bit preimage.

Fresh signatures (issue 58, item 3)
===================================
A valid signature says who published, not when: a member could keep a copy and send it again
once every node's duplicate filter had forgotten its id (90 s for gossip), and it would be
delivered again, even at its own publisher. So the signature also covers the publisher's wall
clock when it signed (``t_us``, microseconds since the epoch), and a copy is refused as
``stale`` when that time is more than ``window`` (:data:`SIGNATURE_WINDOW`, 30 s) in the
past, or earlier than this node's start (a restarted node's duplicate filter is empty; a copy
from before it started is one its previous incarnation may have delivered), and as
``future`` when it is more than ``window`` ahead. Within the window a copy passes on to the
protocol, whose duplicate filter knows the id, and the runtime delivers a publication to the
application at most once (:meth:`Verifier.first_delivery`: the ids delivered within the
window, at most :data:`DELIVERED_KEPT`; should that many be delivered within a window, the
oldest is forgotten and every copy signed no later than it is refused from then on). Nodes'
clocks must therefore agree within the window, as Kerberos asks of its clients; a time signed
by the publisher and a filter as long as the window make a replay detectable forever, whatever
each stack's duplicate filter keeps, and without state per publisher.

Certificates checked at every use (issue 58, item 4)
====================================================
A publisher's certificate is checked against the authority once per connection that brings
it, and its validity period at *every* copy: a copy is refused as ``expired`` when the
credential is out of its period now or was out of it when the copy was signed. Expiry and the
authority's revocation list (:mod:`pubmesh.net.revocation`) reach every copy, cached or not.

What a node does with a copy
============================
:class:`Verifier` checks, in order: the copy is signed; the certificate of the publisher it
names is known on the connection, valid now and when signed, and not revoked; the id is bound
to that publisher; a ``publisher`` field, if the message has one, names the same node; the
time it carries is within the window; the signature is the publisher's over the content and
that time. A copy identical to one already verified (same id, digest, time and signature) is
not checked again, so a publication's duplicates cost a hash, not a signature check. A refused
copy is counted by reason and traced (``net.forged``, with the claimed publisher), and dropped.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from pubmesh.proto.core import MESSAGE_INFO, Message, NodeId

#: bytes of the nonce a publication id is drawn from
NONCE_BYTES = 8
#: domain separation: a publication signature can never be mistaken for another signature
_ID_DOMAIN = b"pubmesh publication id\x00"
_SIG_DOMAIN = b"pubmesh publication\x00"
#: publications whose signatures a node keeps to forward them (its own and verified ones)
SIGNATURES_KEPT = 16384
#: seconds a signed publication stays fresh (module docstring), either way of a node's clock
SIGNATURE_WINDOW = 30.0
#: publications delivered within the window a node remembers, at most (module docstring)
DELIVERED_KEPT = 65536
#: bytes one remembered delivery costs (its dict entry), counted in the memory budget
DELIVERED_ENTRY_BYTES = 100


_CARRIES: dict[type, bool] = {}


def carries_payload(message: Message) -> bool:
    """Whether ``message`` carries a publication's payload (its class registered with
    ``payload=True``): the messages that are signed and verified."""
    cls = type(message)
    carries = _CARRIES.get(cls)
    if carries is None:
        info = MESSAGE_INFO.get(cls)
        carries = _CARRIES[cls] = info is not None and info.payload
    return carries


def bound_pub_id(publisher: NodeId, nonce: bytes) -> int:
    """The publication id of ``publisher``'s publication drawn with ``nonce`` (63 bits)."""
    digest = hashlib.sha256(_ID_DOMAIN + publisher.to_bytes(8, "big") + nonce).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def content_digest(message: Message, publisher: NodeId) -> bytes:
    """SHA-256 over what a signature covers: the publisher and the message's publication
    fields (``topic``, ``pub_id``, ``payload``, and ``attributes`` where the message has them,
    as canonical JSON)."""
    h = hashlib.sha256(publisher.to_bytes(8, "big"))
    topic = getattr(message, "topic", "").encode()
    h.update(struct.pack(">QI", getattr(message, "pub_id", 0), len(topic)))
    h.update(topic)
    payload = bytes(getattr(message, "payload", b""))
    h.update(len(payload).to_bytes(8, "big"))
    h.update(payload)
    attributes = getattr(message, "attributes", None)
    if attributes is not None:
        canonical = _canonical(attributes)
        h.update(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode())
    return h.digest()


def _canonical(value: Any) -> Any:
    """``value`` as the codec delivers it at the other end (mappings as dicts, sequences as
    lists, bytes as hex), so both ends hash the same JSON."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple | frozenset | set):
        items = [_canonical(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, frozenset | set) else items
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    return value


def sign(key: SigningKey, message: Message, publisher: NodeId, t_us: int) -> bytes:
    """``publisher``'s signature (with ``key``) of the publication ``message`` carries, signed
    at ``t_us`` (microseconds since the epoch)."""
    return _signature(key, content_digest(message, publisher), t_us)


def _signed_bytes(digest: bytes, t_us: int) -> bytes:
    return _SIG_DOMAIN + t_us.to_bytes(8, "big") + digest


def _signature(key: SigningKey, digest: bytes, t_us: int) -> bytes:
    return bytes(key.sign(_signed_bytes(digest, t_us)).signature)


def wall_us(wall: float) -> int:
    """A wall-clock time in whole microseconds, as a signature carries it."""
    return int(wall * 1_000_000)


def nacl_key(key: ed25519.Ed25519PrivateKey) -> SigningKey:
    """An identity's Ed25519 key (from ``cryptography``) as libsodium's, which signs and
    verifies publications: the same algorithm (RFC 8032), and libsodium verifies in about
    half the time OpenSSL takes (74 against 152 µs here), which is what a node spends per
    publication it receives."""
    raw = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return SigningKey(raw)


@dataclass(frozen=True, slots=True)
class Credential:
    """A publisher's certificate, checked against the cluster's authority: its DER bytes (to
    hand on to the next hop) and its public key."""

    publisher: NodeId
    der: bytes
    key: VerifyKey
    #: the certificate's validity period, seconds since the epoch
    not_before: float
    not_after: float
    #: its serial number (what the authority's revocation list names)
    serial: int = 0


@dataclass(frozen=True, slots=True)
class Signed:
    """A publication's signature as it travels: the publisher, the nonce its id is bound to,
    the publisher's clock when it signed (microseconds since the epoch), the signature, and
    (once known) the publisher's credential."""

    publisher: NodeId
    nonce: bytes
    t_us: int
    value: bytes
    credential: Credential | None

    @property
    def at(self) -> float:
        """When the publisher signed, in seconds since the epoch."""
        return self.t_us / 1_000_000


class Signer:
    """This node's side: draws bound publication ids and signs its own publications."""

    def __init__(
        self,
        node: NodeId,
        key: ed25519.Ed25519PrivateKey,
        credential: Credential,
        clock: Callable[[], float] = time.time,
    ):
        self.node = node
        #: wall clock, seconds since the epoch: the time a signature carries
        self.clock = clock
        self._key = nacl_key(key)
        self.credential = credential
        #: own publications not signed yet: pub_id -> nonce
        self._nonces: OrderedDict[int, bytes] = OrderedDict()

    def new_pub_id(self) -> int:
        nonce = secrets.token_bytes(NONCE_BYTES)
        pub_id = bound_pub_id(self.node, nonce)
        self._nonces[pub_id] = nonce
        if len(self._nonces) > SIGNATURES_KEPT:
            self._nonces.popitem(last=False)
        return pub_id

    def sign(self, message: Message) -> tuple[Signed, bytes] | None:
        """The signature of this node's publication ``message`` carries, and the content
        digest it signs (None: not one of this node's publications)."""
        pub_id = message.publication()
        nonce = self._nonces.pop(pub_id, None) if pub_id is not None else None
        if nonce is None:
            return None
        digest = content_digest(message, self.node)
        t_us = wall_us(self.clock())
        value = _signature(self._key, digest, t_us)
        return Signed(self.node, nonce, t_us, value, self.credential), digest


class Verifier:
    """Checks copies (module docstring) and keeps the signatures of publications this node
    holds, to forward them with, and the ids it delivered within the window."""

    def __init__(
        self,
        signer: Signer,
        *,
        window: float = SIGNATURE_WINDOW,
        started: float | None = None,
        revoked: Callable[[Credential], bool] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.signer = signer
        #: wall clock, seconds since the epoch (the signer's unless given)
        self.clock = signer.clock if clock is None else clock
        self.window = window
        #: copies signed before this (the node's start, wall clock) are stale
        self.started = self.clock() if started is None else started
        #: whether the authority's revocation list names a credential (None: no list)
        self.revoked = revoked
        #: pub_id -> (signature as it travels, content digest)
        self.kept: OrderedDict[int, tuple[Signed, bytes]] = OrderedDict()
        #: pub_id -> signed time (s) of the publications delivered within the window
        self._delivered: OrderedDict[int, float] = OrderedDict()
        #: copies signed no later than this are refused: the newest time forgotten early
        self._forgotten = 0.0

    def signature(self, message: Message) -> Signed | None:
        """The signature to send ``message`` (a payload message) with: this node's own, or the
        one it verified when the publication arrived. None: none kept (too old)."""
        pub_id = message.publication()
        if pub_id is None:
            return None
        kept = self.kept.get(pub_id)
        if kept is not None:
            return kept[0]
        signing = self.signer.sign(message)
        if signing is None:
            return None
        signed, digest = signing
        self._keep(pub_id, signed, digest)
        return signed

    def _keep(self, pub_id: int, signed: Signed, digest: bytes) -> None:
        self.kept[pub_id] = (signed, digest)
        if len(self.kept) > SIGNATURES_KEPT:
            self.kept.popitem(last=False)

    def check(self, message: Message, signed: Signed | None) -> str | None:
        """Why the copy ``message`` must be refused (a reason for the counters), or None."""
        if signed is None:
            return "unsigned"
        credential = signed.credential
        if credential is None or credential.publisher != signed.publisher:
            return "unknown-publisher"
        now = self.clock()
        t = signed.at
        if not (credential.not_before <= min(now, t) and max(now, t) < credential.not_after):
            return "expired"
        if self.revoked is not None and self.revoked(credential):
            return "revoked"
        pub_id = message.publication()
        if pub_id is None or bound_pub_id(signed.publisher, signed.nonce) != pub_id:
            return "id-not-bound"
        named = getattr(message, "publisher", None)
        if named is not None and named != signed.publisher:
            return "publisher-mismatch"
        # out of the window costs no signature check (what a replay flood sends)
        if t > now + self.window:
            return "future"
        if t < max(now - self.window, self.started) or t <= self._forgotten:
            return "stale"
        digest = content_digest(message, signed.publisher)
        kept = self.kept.get(pub_id)
        if not (
            kept is not None
            and kept[1] == digest
            and kept[0].value == signed.value
            and kept[0].t_us == signed.t_us
        ):
            try:
                credential.key.verify(_signed_bytes(digest, signed.t_us), signed.value)
            except (BadSignatureError, ValueError):
                return "bad-signature"
        if kept is None:
            self._keep(pub_id, signed, digest)
        return None

    def stale_to_send(self, signed: Signed) -> bool:
        """Whether a copy signed ``signed`` is too old to send on: the receiver would refuse
        it as stale (its clock a second ahead of ours at most), and charge us for it."""
        return signed.at < self.clock() - self.window + 1.0

    def first_delivery(self, pub_id: int) -> bool:
        """Whether the publication ``pub_id`` (verified, or this node's own) may be delivered
        to the application: not delivered within the window already (module docstring)."""
        if pub_id in self._delivered:
            return False
        kept = self.kept.get(pub_id)
        now = self.clock()
        signed_at = kept[0].at if kept is not None else now
        delivered = self._delivered
        delivered[pub_id] = signed_at
        # forget what the window refuses anyway; past the bound, also what it would not yet
        horizon = now - 2 * self.window
        while delivered:
            oldest, at = next(iter(delivered.items()))
            if at >= horizon and len(delivered) <= DELIVERED_KEPT:
                break
            del delivered[oldest]
            if at >= horizon:
                self._forgotten = max(self._forgotten, at)
        return True

    def held_bytes(self) -> int:
        """Bytes of the delivered ids it remembers (counted in the memory budget)."""
        return len(self._delivered) * DELIVERED_ENTRY_BYTES


def credential_of(cert: x509.Certificate, publisher: NodeId) -> Credential:
    """The credential of a certificate already checked against the authority."""
    key = cert.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ValueError("not an Ed25519 certificate")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Credential(
        publisher,
        cert.public_bytes(serialization.Encoding.DER),
        VerifyKey(raw),
        cert.not_valid_before_utc.timestamp(),
        cert.not_valid_after_utc.timestamp(),
        cert.serial_number,
    )
