"""The shared-key mode: mutual authentication of every connection, and every frame encrypted.

How it works
============
Every node of a cluster holds the same secret, the *cluster key*: at least 128 bits of
randomness written as hex digits (``pubmesh key new`` prints one of 256 bits), given with
``--key FILE`` or the environment variable ``PUBMESH_KEY``. Nothing else is trusted: a
connection is only used once both ends have proved they hold the key, and afterwards every
frame is encrypted and authenticated under a key derived for that connection and direction.

A passphrase is refused: whoever sees one handshake, or makes a node answer one, holds an HMAC
of the key and can test guesses offline as fast as they can compute HMACs (a 16-character
passphrase fell in 75 guesses). 128 random bits put that out of reach; the loader cannot
measure a text's randomness, so it accepts only the form a random key takes (hex, at least 32
digits, not a short repeated pattern) and names ``pubmesh key new`` when it refuses.

The handshake is a challenge-response with HMAC-SHA256, four frames (length-prefixed like all
frames, fixed layouts, magic ``PMSH`` and the protocol version first)::

    dialer   -> acceptor   HELLO      node id of the dialer, nonce_d (32 random bytes)
    acceptor -> dialer     CHALLENGE  node id of the acceptor, nonce_a
    dialer   -> acceptor   PROOF      proof_d = HMAC(K, "pubmesh-v1 dialer" | transcript)
    acceptor -> dialer     CONFIRM    proof_a = HMAC(K, "pubmesh-v1 acceptor" | transcript)
                   or      REFUSED    proof_d was wrong, the keys differ (no reason text)

    transcript = nonce_d | nonce_a | id_d | id_a

The acceptor proves nothing until the dialer has proved it holds the key, so a stranger who
connects learns only a nonce: nothing that tests a guess of the key offline. (The dialer proves
first, to whatever answers at the address it dialed; against a key of 128 random bits that
proof is useless to a stranger, which is why weak keys are refused.) The acceptor checks
proof_d before it sends CONFIRM or reads a data frame; the dialer checks proof_a (and that the
acceptor is the node it meant to dial) before it sends or reads any data frame. A dialer whose
proof fails hears REFUSED before the close, so both ends can say the keys differ (it tells a
stranger only what the close would). Each side's
proof covers the other side's fresh nonce, so a recorded handshake cannot be replayed, and the
two proofs carry different labels, so one cannot be reflected back as the other. Comparisons
are constant-time (``hmac.compare_digest``).

Both ends then derive ``session = HMAC(K, "pubmesh-v1 session" | transcript)`` and one key per
direction, ``HMAC(session, "dialer->acceptor")`` and ``HMAC(session, "acceptor->dialer")``.
Each data frame's payload is encrypted with AES-256-GCM under that key (:class:`Sealer`): the
nonce is the frame's per-direction sequence number, unique under its key, and the frame's
header (length, version, type tag, sequence number, send time) is authenticated as associated
data. A frame replayed on the same connection is out of sequence; one replayed on another
connection, or altered anywhere, fails its tag; a reader of the wire sees lengths, tags and
timing, never payloads, topics or membership.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import struct
from pathlib import Path
from typing import Any

from pubmesh.errors import UserError
from pubmesh.net.framing import LENGTH, VERSION
from pubmesh.private import write_new

KEY_ENV = "PUBMESH_KEY"
#: A cluster key's least randomness: 128 bits, 32 hex digits.
MIN_KEY_BITS = 128
MIN_KEY_BYTES = MIN_KEY_BITS // 8
NONCE_BYTES = 32
PROOF_BYTES = 32
MAGIC = b"PMSH"
#: What every refusal of a key ends with.
MAKE_ONE = "make one with: pubmesh key new"

KIND_HELLO = 1
KIND_CHALLENGE = 2
KIND_PROOF = 3
KIND_CONFIRM = 4
KIND_REFUSED = 5

_HEAD = struct.Struct(">4sBB")  # magic, version, kind
_HELLO = struct.Struct(f">4sBBQ{NONCE_BYTES}s")
_CHALLENGE = _HELLO
_PROOF = struct.Struct(f">4sBB{PROOF_BYTES}s")
_REFUSED = _HEAD
#: a REFUSED frame's reason text (identity mode: what was wrong with a certificate), at most
MAX_REASON_BYTES = 240
#: Largest handshake frame (after the length prefix); anything longer is refused.
MAX_HANDSHAKE_FRAME = max(_HELLO.size, _PROOF.size, _REFUSED.size + MAX_REASON_BYTES)


class AuthError(Exception):
    """A handshake that fails: wrong magic, version or layout, a bad proof, the wrong peer."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# --------------------------------------------------------------------------------------------
# The key
# --------------------------------------------------------------------------------------------
class ClusterKey:
    """The cluster secret, normalised to 32 bytes (HMAC-SHA256 of the raw key bytes).

    ``material`` is the key's random bytes (at least :data:`MIN_KEY_BYTES`); a key's text
    form goes through :func:`parse_key_text` (:meth:`from_text`)."""

    __slots__ = ("_key", "source")

    def __init__(self, material: bytes, source: str = "the key given") -> None:
        if len(material) < MIN_KEY_BYTES:
            raise ValueError(f"a cluster key needs at least {MIN_KEY_BYTES} bytes")
        self._key = hmac.digest(material, b"pubmesh-v1 cluster key", hashlib.sha256)
        #: where this node's key came from (``$PUBMESH_KEY``, ``key file PATH``), for messages
        self.source = source

    @classmethod
    def from_text(cls, text: str, where: str = "the cluster key") -> ClusterKey:
        return cls(parse_key_text(text, where), where)

    @property
    def fingerprint(self) -> str:
        """8 hex digits that name the key in messages: two nodes whose keys differ show
        different fingerprints (``pubmesh key show`` prints a key's). A one-way hash of the
        key: it tells a stranger nothing of a key of 128 or more random bits."""
        return hmac.digest(self._key, b"pubmesh-v1 fingerprint", hashlib.sha256)[:4].hex()

    def mismatch(self) -> str:
        """The end of a message about a peer whose key differs: ours, and where to fix it."""
        return (
            f"the cluster keys differ: this node's is {self.fingerprint} (from {self.source}); "
            "every node of a cluster needs the same key: give both the same --key FILE or "
            f"{KEY_ENV}"
        )

    @classmethod
    def generate(cls) -> tuple[ClusterKey, str]:
        """A fresh random key of 256 bits and its text form (for ``PUBMESH_KEY`` or a file)."""
        text = new_key_text()
        return cls.from_text(text), text

    def proof(self, label: bytes, transcript: bytes) -> bytes:
        return hmac.digest(self._key, label + transcript, hashlib.sha256)

    def __repr__(self) -> str:
        return "ClusterKey(<secret>)"


_HEX = re.compile(r"[0-9a-fA-F]+")


def parse_key_text(text: str, where: str = "the cluster key") -> bytes:
    """The random bytes a key's text form holds: hex digits (whitespace anywhere ignored, so
    ``xxd -p``'s line breaks are fine), at least 32 of them (128 bits), not a pattern of a
    few digits repeated. Raises :class:`UserError` naming ``where`` and ``pubmesh key new``."""
    digits = "".join(text.split())
    if not digits:
        raise UserError(f"{where} is empty; {MAKE_ONE}")
    if not _HEX.fullmatch(digits):
        raise UserError(
            f"{where} is not a cluster key: a key is {MIN_KEY_BITS} or more random bits as hex "
            f"digits, not a passphrase (one can be guessed offline); {MAKE_ONE}"
        )
    if len(digits) < 2 * MIN_KEY_BYTES:
        raise UserError(
            f"{where} has {len(digits) * 4} bits, a cluster key needs at least {MIN_KEY_BITS}; "
            f"{MAKE_ONE}"
        )
    if len(digits) % 2:
        raise UserError(f"{where} has an odd number of hex digits ({len(digits)}); {MAKE_ONE}")
    if _repetitive(digits.lower()):
        raise UserError(f"{where} is a repeated pattern, not random; {MAKE_ONE}")
    return bytes.fromhex(digits)


def _repetitive(digits: str) -> bool:
    """A short pattern repeated (``0000...``, ``abababab...``, ``0123456789abcdef`` twice):
    what a person types, where 32 random hex digits almost never are (fewer than 8 distinct
    digits: odds about 1 in 10^8)."""
    if len(set(digits)) < 8:
        return True
    return any(digits == (digits[:n] * (len(digits) // n + 1))[: len(digits)] for n in range(1, 17))


def new_key_text() -> str:
    """A fresh key's text form, 256 random bits (``pubmesh key new``)."""
    return secrets.token_hex(32)


def write_private(path: Path, data: bytes, force: bool) -> None:
    """Write a secret (a cluster key, a private key) to ``path`` readable by its owner only
    (0600 from creation); an existing file is replaced only with ``force``, and then by a new
    file renamed over it, so a link planted at ``path`` is replaced, never written through.
    UserError names the file and the problem."""
    write_new(path, data, force=force)


def load_key(path: str | Path | None = None, *, env: dict[str, str] | None = None) -> ClusterKey:
    """The cluster key from ``path`` (its text) or, without a path, from ``$PUBMESH_KEY``.
    Raises :class:`UserError` with what to do when neither works."""
    environment = os.environ if env is None else env
    if path is not None:
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise UserError(f"key file {path}: no such file ({MAKE_ONE} --out {path})") from None
        except OSError as error:
            raise UserError(f"key file {path}: cannot read it ({error.strerror})") from None
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise UserError(
                f"key file {path}: not a key's text (binary bytes); {MAKE_ONE} --out {path}"
            ) from None
        return ClusterKey.from_text(text, f"key file {path}")
    text_env = environment.get(KEY_ENV)
    if text_env is None:
        raise UserError(
            f"no cluster key: give --key FILE or set {KEY_ENV} (every node of a cluster "
            f"needs the same key; {MAKE_ONE})"
        )
    return ClusterKey.from_text(text_env, f"${KEY_ENV}")


def as_key(key: ClusterKey | bytes | str | Path | None) -> ClusterKey:
    """Accept the forms the Python API takes: a ClusterKey, a key's text (str, or its ASCII
    bytes, as in ``PUBMESH_KEY`` or a key file), a Path to a key file, or None for
    ``$PUBMESH_KEY``."""
    if isinstance(key, ClusterKey):
        return key
    if isinstance(key, Path):
        return load_key(key)
    if key is None:
        return load_key(None)
    if isinstance(key, bytes):
        try:
            key = key.decode("ascii")
        except UnicodeDecodeError:
            raise UserError(f"the key given is binary, not a key's text; {MAKE_ONE}") from None
    return ClusterKey.from_text(key, "the key given")


# --------------------------------------------------------------------------------------------
# Handshake frames
# --------------------------------------------------------------------------------------------
def _framed(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def hello(node: int, nonce: bytes) -> bytes:
    return _framed(_HELLO.pack(MAGIC, VERSION, KIND_HELLO, node, nonce))


def challenge(node: int, nonce: bytes) -> bytes:
    return _framed(_CHALLENGE.pack(MAGIC, VERSION, KIND_CHALLENGE, node, nonce))


def proof_frame(proof: bytes) -> bytes:
    """The dialer's PROOF."""
    return _framed(_PROOF.pack(MAGIC, VERSION, KIND_PROOF, proof))


def confirm_frame(proof: bytes) -> bytes:
    """The acceptor's CONFIRM: its proof, once the dialer's has checked out."""
    return _framed(_PROOF.pack(MAGIC, VERSION, KIND_CONFIRM, proof))


def _check_head(body: bytes, kind: int, layout: struct.Struct) -> tuple[Any, ...]:
    if len(body) < _HEAD.size:
        raise AuthError("bad-handshake", f"handshake frame of {len(body)} bytes")
    magic, version, got_kind = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise AuthError("bad-handshake", f"not a pubmesh peer (magic {magic!r})")
    if version != VERSION:
        raise AuthError("bad-version", f"protocol version {version}, this node speaks {VERSION}")
    if got_kind != kind or len(body) != layout.size:
        raise AuthError(
            "bad-handshake", f"expected handshake frame {kind}, got {got_kind} ({len(body)} B)"
        )
    return layout.unpack(body)


def parse_hello(body: bytes) -> tuple[int, bytes]:
    """(dialer id, dialer nonce) of a HELLO frame (``body`` without the length prefix)."""
    _m, _v, _k, node, nonce = _check_head(body, KIND_HELLO, _HELLO)
    return int(node), bytes(nonce)


def parse_challenge(body: bytes) -> tuple[int, bytes]:
    """(acceptor id, acceptor nonce) of a CHALLENGE frame."""
    _m, _v, _k, node, nonce = _check_head(body, KIND_CHALLENGE, _CHALLENGE)
    return int(node), bytes(nonce)


def parse_proof(body: bytes) -> bytes:
    _m, _v, _k, proof = _check_head(body, KIND_PROOF, _PROOF)
    return bytes(proof)


def refused_frame(reason: str = "") -> bytes:
    """REFUSED, before a close: without ``reason``, the dialer's proof failed (the keys
    differ); with one, why a certificate is not accepted (identity mode)."""
    text = reason.encode("utf-8", "replace")[:MAX_REASON_BYTES]
    return _framed(_REFUSED.pack(MAGIC, VERSION, KIND_REFUSED) + text)


def check_refusal(body: bytes, key: ClusterKey | None = None) -> None:
    """Raise the AuthError a REFUSED frame carries; any other frame passes."""
    if len(body) < _REFUSED.size or body[: _REFUSED.size] != _REFUSED.pack(
        MAGIC, VERSION, KIND_REFUSED
    ):
        return
    reason = body[_REFUSED.size :].decode("utf-8", "replace")
    if reason == IDENTITY_MODE_REFUSAL:
        raise AuthError(
            "speaks-tls",
            "the peer runs in identity mode (TLS with certificates); this node uses a shared "
            "cluster key",
        )
    if not reason:
        why = key.mismatch() if key is not None else "the cluster keys differ"
        raise AuthError("auth-failed", f"the peer refused our proof: {why}")
    cleaned = "".join(c if c.isprintable() else "?" for c in reason)
    raise AuthError("identity-refused", f"the peer refused us: {cleaned}")


def parse_confirm(body: bytes) -> bytes:
    """The acceptor's proof from a CONFIRM (a REFUSED raises its AuthError)."""
    check_refusal(body)
    _m, _v, _k, proof = _check_head(body, KIND_CONFIRM, _PROOF)
    return bytes(proof)


def transcript(nonce_dialer: bytes, nonce_acceptor: bytes, dialer: int, acceptor: int) -> bytes:
    return nonce_dialer + nonce_acceptor + struct.pack(">QQ", dialer, acceptor)


ACCEPTOR_LABEL = b"pubmesh-v1 acceptor"
DIALER_LABEL = b"pubmesh-v1 dialer"


def verify(expected: bytes, got: bytes, who: str, key: ClusterKey | None = None) -> None:
    if not hmac.compare_digest(expected, got):
        why = key.mismatch() if key is not None else "the cluster keys differ"
        raise AuthError("auth-failed", f"{who}'s proof does not match: {why}")


def session_keys(key: ClusterKey, script: bytes) -> tuple[bytes, bytes]:
    """(dialer->acceptor key, acceptor->dialer key) for a connection's transcript."""
    session = key.proof(b"pubmesh-v1 session", script)
    return (
        hmac.digest(session, b"dialer->acceptor", hashlib.sha256),
        hmac.digest(session, b"acceptor->dialer", hashlib.sha256),
    )


# --------------------------------------------------------------------------------------------
# Another security mode at the other end (identity mode's TLS, or this handshake)
# --------------------------------------------------------------------------------------------
#: The REFUSED reason an identity-mode node sends a dialer that opened with this module's HELLO
#: (shared-key mode): the dialer then names the mismatch (check_refusal: ``speaks-tls``).
IDENTITY_MODE_REFUSAL = "identity mode: this node speaks TLS with certificates, not a cluster key"
#: The REFUSED reason a shared-key node sends a dialer that opened with a TLS ClientHello
#: (identity mode); its TLS session fails on it and it names the mismatch from these bytes
#: (:func:`speaks_shared_key`).
SHARED_KEY_REFUSAL = "shared-key mode: this node speaks pubmesh's handshake with a cluster key"


def speaks_tls(data: bytes) -> bool:
    """``data`` (a connection's first bytes) opens a TLS record: content type 20-23
    (a ClientHello is a handshake record, 22; an alert 21), then version 3.x. This
    handshake's first bytes are a frame's length, under 256: never 0x14-0x17 first."""
    return len(data) >= 3 and 20 <= data[0] <= 23 and data[1] == 3 and data[2] <= 4


def speaks_shared_key(data: bytes) -> bool:
    """``data`` (a connection's first bytes) is a frame of this module's handshake: a length,
    then the magic (a TLS record never has it there)."""
    return data[LENGTH.size : LENGTH.size + len(MAGIC)] == MAGIC


def hello_claim(data: bytes) -> int | None:
    """The node id a HELLO at the start of ``data`` claims (unproven), or None if ``data`` does
    not start with a whole HELLO frame."""
    size = LENGTH.size + _HELLO.size
    if len(data) < size or LENGTH.unpack_from(data)[0] != _HELLO.size:
        return None
    try:
        node, _nonce = parse_hello(data[LENGTH.size : size])
    except AuthError:
        return None
    return node
