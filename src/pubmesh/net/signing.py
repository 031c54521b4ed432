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

Fresh signatures
================
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

Certificates checked at every use
=================================
A publisher's certificate is checked against the authority once per connection that brings
it, and its validity period at *every* copy: a copy is refused as ``expired`` when the
credential is out of its period now or was out of it when the copy was signed. Expiry and the
authority's revocation list (:mod:`pubmesh.net.revocation`) reach every copy, cached or not.

One signature for a batch
=========================
An Ed25519 check costs a node 74 µs on the development machine, a large part of what it
spends on a copy, and every node checks every publication. So a publisher signs once for all
the publications it made in one turn of its event loop: a *batch*, as in the amortized
signatures of Wong and Lam (*Digital Signatures for Flows and Multicasts*, ICNP 1998: "tree
chaining") and of certificate transparency's Merkle trees (RFC 9162, section 2.1). The leaves
are the publications' content digests (:func:`leaf_hash`, a 0x00 byte before the digest, an
inner node a 0x01: a leaf is never taken for a node), the tree is RFC 9162's (the left subtree
holds the largest power of two below the count), and the signature covers the publisher's
clock, the batch's size and its root (:func:`signed_bytes`). Each copy carries the signature,
the batch's size, its own index and its audit path (:data:`MAX_BATCH` leaves at most, a path
of 8 hashes). A lone publication is a batch of one: its root is its leaf, its path empty, and
nothing waits for a batch to fill (the runtime signs the turn's publications at the end of
that same turn).

A node checks a copy's path up to a root (:func:`root_of`, RFC 9162 section 2.1.3.2: a path
too long or too short for its place, or a place outside the batch, is refused as
``bad-path`` before any signature check) and checks the root's signature once: the roots it
verified are kept (:data:`ROOTS_KEPT`, by publisher, time, size and root), so the other
copies of a burst of k publications cost a path of hashes each, not k checks. What a copy is
held to does not change: its own content digest is its leaf, so an altered payload, another
copy's path, a wrong index or another size lead to another root, which is not among the
verified ones and whose signature does not verify. A root is only ever kept under the
publisher whose key verified it: a member's own verified batch vouches for nothing of
another's, and a batch of the member's own can hold no leaf of another's publication that
passes, since every publication's id must still be bound to the publisher the copy names.
The copies of one batch may arrive over different links, in any order; each is checked on
its own and the first to arrive pays the check.

What a node does with a copy
============================
:class:`Verifier` checks, in order: the copy is signed; the certificate of the publisher it
names is known on the connection, valid now and when signed, and not revoked; the id is bound
to that publisher; a ``publisher`` field, if the message has one, names the same node; the
time it carries is within the window; its path leads from its content to a root of a batch
of its size; the signature is the publisher's over that root, the size and that time (or that
root is among the verified ones). A copy identical to one already verified (same id, digest,
time and signature) is not checked again, so a publication's duplicates cost a hash, not a
signature check. A refused
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
from typing import Any, cast

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from pubmesh.proto.core import (
    MESSAGE_INFO,
    Carrier,
    HasAttributes,
    Message,
    NamesPublisher,
    NodeId,
)

#: bytes of the nonce a publication id is drawn from
NONCE_BYTES = 8
#: domain separation: a publication signature can never be mistaken for another signature
_ID_DOMAIN = b"pubmesh publication id\x00"
_SIG_DOMAIN = b"pubmesh publication batch\x00"
#: Merkle tree hashes (RFC 9162 section 2.1.1): a leaf and an inner node never hash alike
_LEAF = b"\x00"
_NODE = b"\x01"
#: bytes of a Merkle hash (SHA-256)
HASH_BYTES = 32
#: own publications one signature covers at most (a path of 8 hashes, 256 bytes a copy)
MAX_BATCH = 256
#: verified batch roots a node remembers: a later copy of the same batch costs no check
ROOTS_KEPT = 4096
#: publications whose signatures a node keeps to forward them (its own and verified ones)
SIGNATURES_KEPT = 16384
#: seconds a signed publication stays fresh (module docstring), either way of a node's clock
SIGNATURE_WINDOW = 30.0
#: publications delivered within the window a node remembers, at most (module docstring)
DELIVERED_KEPT = 65536
#: bytes one remembered delivery costs (its dict entry), counted in the memory budget
DELIVERED_ENTRY_BYTES = 100


_CARRIES: dict[type, bool] = {}
#: the digest's head: the publisher, the publication id and the topic's length
_DIGEST_HEAD = struct.Struct(">QQI")


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
    """SHA-256 over what a signature covers: the publisher and the publication ``message``
    carries (:class:`pubmesh.proto.core.Carrier`: ``topic``, ``pub_id``, ``payload``, and
    ``attributes`` where the message has them, as canonical JSON). TypeError for a message
    that carries no publication."""
    info = MESSAGE_INFO.get(type(message))
    if info is None or not info.payload:
        raise TypeError(f"{type(message).__name__} carries no publication to sign")
    carried = cast(Carrier, message)
    topic = carried.topic.encode()
    payload = carried.payload
    parts = [
        _DIGEST_HEAD.pack(publisher, carried.pub_id, len(topic)),
        topic,
        len(payload).to_bytes(8, "big"),
        payload,
    ]
    attributes = cast(HasAttributes, message).attributes if info.attributes else None
    if attributes is not None:
        canonical = _canonical(attributes)
        parts.append(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode())
    # one hash over the joined parts: the same bytes as hashing them in turn, fewer calls
    return hashlib.sha256(b"".join(parts)).digest()


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
    """``publisher``'s signature (with ``key``) of the publication ``message`` carries alone
    (a batch of one), signed at ``t_us`` (microseconds since the epoch)."""
    return _signature(key, leaf_hash(content_digest(message, publisher)), 1, t_us)


def signed_bytes(root: bytes, size: int, t_us: int) -> bytes:
    """What a publisher signs: its clock, the batch's size and its Merkle root."""
    return _SIG_DOMAIN + t_us.to_bytes(8, "big") + size.to_bytes(2, "big") + root


def _signature(key: SigningKey, root: bytes, size: int, t_us: int) -> bytes:
    return bytes(key.sign(signed_bytes(root, size, t_us)).signature)


def leaf_hash(digest: bytes) -> bytes:
    """A publication's leaf in its batch's Merkle tree (RFC 9162 section 2.1.1)."""
    return hashlib.sha256(_LEAF + digest).digest()


def _node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE + left + right).digest()


def merkle_tree(leaves: list[bytes]) -> tuple[bytes, list[bytes]]:
    """The root of the Merkle tree over ``leaves`` (leaf hashes, RFC 9162 section 2.1.1: the
    left subtree holds the largest power of two below the count) and each leaf's audit path
    (its siblings from the leaf up, concatenated)."""
    n = len(leaves)
    if n == 1:
        return leaves[0], [b""]
    k = 1 << ((n - 1).bit_length() - 1)
    left, left_paths = merkle_tree(leaves[:k])
    right, right_paths = merkle_tree(leaves[k:])
    paths = [path + right for path in left_paths] + [path + left for path in right_paths]
    return _node_hash(left, right), paths


def root_of(leaf: bytes, index: int, size: int, path: bytes) -> bytes | None:
    """The root a leaf's audit path leads to (RFC 9162 section 2.1.3.2), or None when the
    path cannot belong to leaf ``index`` of a tree of ``size`` leaves (wrong length, index out
    of range)."""
    if not 0 <= index < size or len(path) % HASH_BYTES:
        return None
    fn, sn = index, size - 1
    node = leaf
    for offset in range(0, len(path), HASH_BYTES):
        if sn == 0:
            return None  # more hashes than the tree has levels
        sibling = path[offset : offset + HASH_BYTES]
        if fn & 1 or fn == sn:
            node = _node_hash(sibling, node)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            node = _node_hash(node, sibling)
        fn >>= 1
        sn >>= 1
    return node if sn == 0 else None


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


@dataclass(slots=True)
class Signed:
    """A publication's signature as it travels: the publisher, the nonce its id is bound to,
    the publisher's clock when it signed (microseconds since the epoch), the signature of its
    batch's root, (once known) the publisher's credential, and where the publication sits in
    its batch: the batch's size, its index and its audit path (module docstring)."""

    publisher: NodeId
    nonce: bytes
    t_us: int
    value: bytes
    credential: Credential | None
    size: int = 1
    index: int = 0
    path: bytes = b""

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
        #: signatures made (one a batch)
        self.signatures = 0

    def new_pub_id(self) -> int:
        nonce = secrets.token_bytes(NONCE_BYTES)
        pub_id = bound_pub_id(self.node, nonce)
        self._nonces[pub_id] = nonce
        if len(self._nonces) > SIGNATURES_KEPT:
            self._nonces.popitem(last=False)
        return pub_id

    def pending(self, pub_id: int | None) -> bool:
        """Whether ``pub_id`` is one of this node's publications not signed yet."""
        return pub_id is not None and pub_id in self._nonces

    def sign_batch(self, messages: list[Message]) -> list[tuple[Signed, bytes]]:
        """One signature over this node's publications ``messages`` (one message each, at
        most :data:`MAX_BATCH`): each one's signature as it travels (the root's signature and
        its audit path) and content digest. Messages that are not this node's publications
        waiting for their signature are left out."""
        mine = []
        for message in messages:
            pub_id = message.publication()
            nonce = self._nonces.pop(pub_id, None) if pub_id is not None else None
            if nonce is not None:
                mine.append((message, nonce))
        if not mine:
            return []
        if len(mine) > MAX_BATCH:
            raise ValueError(f"a batch of {len(mine)} publications: at most {MAX_BATCH}")
        digests = [content_digest(message, self.node) for message, _ in mine]
        root, paths = merkle_tree([leaf_hash(digest) for digest in digests])
        t_us = wall_us(self.clock())
        size = len(mine)
        value = _signature(self._key, root, size, t_us)
        self.signatures += 1
        return [
            (Signed(self.node, nonce, t_us, value, self.credential, size, index, path), digest)
            for index, ((_message, nonce), digest, path) in enumerate(
                zip(mine, digests, paths, strict=True)
            )
        ]


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
        #: batches whose signature verified: (publisher, t_us, size, root)
        self._roots: OrderedDict[tuple[NodeId, int, int, bytes], None] = OrderedDict()
        #: Ed25519 checks made (a batch's first copy costs one; its other copies none)
        self.checks = 0

    def signature(self, message: Message) -> Signed | None:
        """The signature to send ``message`` (a payload message) with: this node's own (signed
        alone now if it was not signed yet: :meth:`sign_batch` signs several as one), or the
        one it verified when the publication arrived. None: none kept (too old)."""
        pub_id = message.publication()
        if pub_id is None:
            return None
        kept = self.kept.get(pub_id)
        if kept is not None:
            return kept[0]
        self.sign_batch([message])
        kept = self.kept.get(pub_id)
        return kept[0] if kept is not None else None

    def sign_batch(self, messages: list[Message]) -> None:
        """Sign this node's own publications not signed yet that ``messages`` carry (the
        first message of each), as one batch per :data:`MAX_BATCH`, and keep their signatures
        to send them with."""
        signer = self.signer
        mine: dict[int, Message] = {}
        for message in messages:
            pub_id = message.publication()
            if pub_id is not None and signer.pending(pub_id):
                mine.setdefault(pub_id, message)
        ids = list(mine)
        for start in range(0, len(ids), MAX_BATCH):
            batch = ids[start : start + MAX_BATCH]
            signatures = signer.sign_batch([mine[pub_id] for pub_id in batch])
            for pub_id, (signed, digest) in zip(batch, signatures, strict=True):
                self._keep(pub_id, signed, digest)

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
        if pub_id is None:
            return "id-not-bound"
        kept = self.kept.get(pub_id)
        # an id already found bound to this publisher and nonce needs no second hash
        known = (
            kept is not None
            and kept[0].nonce == signed.nonce
            and kept[0].publisher == signed.publisher
        )
        if not known and bound_pub_id(signed.publisher, signed.nonce) != pub_id:
            return "id-not-bound"
        named = (
            cast(NamesPublisher, message).publisher
            if MESSAGE_INFO[type(message)].publisher
            else None
        )
        if named is not None and named != signed.publisher:
            return "publisher-mismatch"
        # out of the window costs no signature check (what a replay flood sends)
        if t > now + self.window:
            return "future"
        if t < max(now - self.window, self.started) or t <= self._forgotten:
            return "stale"
        digest = content_digest(message, signed.publisher)
        if not (
            kept is not None
            and kept[1] == digest
            and kept[0].value == signed.value
            and kept[0].t_us == signed.t_us
        ):
            root = root_of(leaf_hash(digest), signed.index, signed.size, signed.path)
            if root is None:
                return "bad-path"
            batch = (signed.publisher, signed.t_us, signed.size, root)
            roots = self._roots
            if batch in roots:
                roots.move_to_end(batch)
            else:
                self.checks += 1
                try:
                    signed_root = signed_bytes(root, signed.size, signed.t_us)
                    credential.key.verify(signed_root, signed.value)
                except (BadSignatureError, ValueError):
                    return "bad-signature"
                roots[batch] = None
                if len(roots) > ROOTS_KEPT:
                    roots.popitem(last=False)
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
