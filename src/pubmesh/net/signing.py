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

What a node does with a copy
============================
:class:`Verifier` checks, in order: the copy is signed; the certificate of the publisher it
names is known on the connection and valid; the id is bound to that publisher; a ``publisher``
field, if the message has one, names the same node; the signature is the publisher's over the
content. A copy identical to one already verified (same id, digest and signature) is not
checked again, so a publication's duplicates cost a hash, not a signature check. A refused copy
is counted by reason and traced (``net.forged``, with the claimed publisher), and dropped.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
from collections import OrderedDict
from collections.abc import Mapping
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


def sign(key: SigningKey, message: Message, publisher: NodeId) -> bytes:
    """``publisher``'s signature (with ``key``) of the publication ``message`` carries."""
    return _signature(key, content_digest(message, publisher))


def _signature(key: SigningKey, digest: bytes) -> bytes:
    return bytes(key.sign(_SIG_DOMAIN + digest).signature)


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


@dataclass(frozen=True, slots=True)
class Signed:
    """A publication's signature as it travels: the publisher, the nonce its id is bound to,
    the signature, and (once known) the publisher's credential."""

    publisher: NodeId
    nonce: bytes
    value: bytes
    credential: Credential | None


class Signer:
    """This node's side: draws bound publication ids and signs its own publications."""

    def __init__(self, node: NodeId, key: ed25519.Ed25519PrivateKey, credential: Credential):
        self.node = node
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
        return Signed(self.node, nonce, _signature(self._key, digest), self.credential), digest


class Verifier:
    """Checks copies (module docstring) and keeps the signatures of publications this node
    holds, to forward them with."""

    def __init__(self, signer: Signer) -> None:
        self.signer = signer
        #: pub_id -> (signature as it travels, content digest)
        self.kept: OrderedDict[int, tuple[Signed, bytes]] = OrderedDict()

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
        pub_id = message.publication()
        if pub_id is None or bound_pub_id(signed.publisher, signed.nonce) != pub_id:
            return "id-not-bound"
        named = getattr(message, "publisher", None)
        if named is not None and named != signed.publisher:
            return "publisher-mismatch"
        digest = content_digest(message, signed.publisher)
        kept = self.kept.get(pub_id)
        if kept is not None and kept[1] == digest and kept[0].value == signed.value:
            return None  # a duplicate of a verified copy
        try:
            credential.key.verify(_SIG_DOMAIN + digest, signed.value)
        except (BadSignatureError, ValueError):
            return "bad-signature"
        if kept is None:
            self._keep(pub_id, signed, digest)
        return None


def credential_of(cert: x509.Certificate, publisher: NodeId) -> Credential:
    """The credential of a certificate already checked against the authority."""
    key = cert.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ValueError("not an Ed25519 certificate")
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return Credential(publisher, cert.public_bytes(serialization.Encoding.DER), VerifyKey(raw))
