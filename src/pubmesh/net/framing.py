"""The data frame, whole: how bytes on a TCP connection are cut into frames, how a frame is
sealed and opened in each security mode, and the signature block a signed publication carries.
Nothing else in :mod:`pubmesh.net` knows a frame's layout.

How it works
============
Every frame starts with a 4-byte big-endian length ``L`` of what follows (:class:`FrameBuffer`
cuts them). A shared-key connection's first frames are the four handshake frames of
:mod:`pubmesh.net.security` (fixed layouts, magic ``PMSH``); an identity-mode connection's
first bytes are TLS 1.3's (:mod:`pubmesh.net.tls`). After them every frame is a *data frame*::

    offset  size  field
    0       4     L, length of the rest (header + payload + tag)
    4       1     version (:data:`VERSION`)
    5       2     type tag: 0 = runtime control (payload: one byte, CONTROL_*),
                  1..32767 = a message class of pubmesh.proto.core.MESSAGE_TYPES, with the top
                  bit (:data:`TAG_SIGNED`) set for a signed publication
    7       8     sequence number of this frame in its direction of this connection (0, 1, ...)
    15      8     send time (float64, the sender's clock; used by the trace only)
    23      n     payload: the message's fields as a msgpack array (pubmesh.net.codec)
    23+n    16    shared-key mode only: the AES-256-GCM tag

**Sealing.** In shared-key mode (:class:`Sealer`, :class:`Opener`) the payload is encrypted
with AES-256-GCM under the direction's session key, the nonce is the sequence number and the
tag covers the length, the header and the payload. In identity mode (:class:`TlsSealer`,
:class:`TlsOpener`) TLS encrypts and authenticates the stream, so a frame has no tag.

**The signed block.** A signed data frame (identity mode's publications,
:mod:`pubmesh.net.signing`) starts its payload with :data:`SIGNATURE`: the publisher's id (8
bytes), the nonce its publication id is bound to (8), the publisher's clock when it signed (8,
microseconds since the epoch), the Ed25519 signature of its batch's Merkle root (64), the
batch's size (2), the publication's index in it (2), the number of hashes of its audit path
(1), the length of the publisher's certificate (2; 0 when this connection carried it before),
then the audit path (32 bytes a hash) and that certificate (DER); the message's fields follow
(:func:`signature_block`, :func:`read_signature_block`).

The rules that keep it correct
==============================
* **Every frame is checked before anything reads it**: a length above the connection's limit
  is refused before the frame is read (a peer cannot make a node buffer more than one maximal
  frame); the tag (shared key) or TLS (identity) before the header is trusted; then the
  version and the sequence number, which must be exactly the next one, so a replayed,
  reordered or dropped frame fails (:class:`FrameError`).
* **A nonce is never used twice under one key**: it is the direction's sequence number, and
  each direction of each connection has its own session key.
* **A signed block is bounded before it is read**: its path, its batch and its certificate
  have limits (:data:`MAX_PATH`, :data:`~pubmesh.net.signing.MAX_BATCH`,
  :data:`MAX_CERTIFICATE`), checked before a byte of them is copied.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pubmesh.net.signing import HASH_BYTES, MAX_BATCH, Signed

#: 5: a signature covers a batch of publications (a Merkle root) and a signed publication's
#: block carries its place in the batch; 4: a signed publication's block carries the
#: publisher's signing time, and a control frame carries the authority's revocation list
#: (against replayed copies and revoked members); 3: payloads encrypted (AES-256-GCM)
#: and the four-frame handshake (2: keyed BLAKE2b MACs, 1: HMAC-SHA256); handshakes of other
#: versions fail, so a node of another version is refused in one line, not misread
VERSION = 5
LENGTH = struct.Struct(">I")
#: version, tag, sequence number, send time
HEADER = struct.Struct(">BHQd")
PREFIX = struct.Struct(">IBHQd")
#: the GCM tag's bytes
MAC_SIZE = 16
#: Bytes a data frame spends besides its payload.
OVERHEAD = PREFIX.size + MAC_SIZE
#: Default limit on a frame's length (everything after the length prefix).
DEFAULT_MAX_FRAME = 1 << 20

TAG_CONTROL = 0
CONTROL_GOODBYE = 1
"""Graceful close: the sender will send nothing more on this connection and is not down."""
CONTROL_GOODBYE_ACK = 2
"""Answer to a goodbye: the answerer has stopped sending too; the initiator may close."""
CONTROL_PING = 3
"""No-op keepalive: keeps a connection from counting as idle; carries nothing."""
CONTROL_REVOKED = 4
"""The authority's revocation list follows, as signed (pubmesh.net.revocation)."""


class FrameTooLarge(Exception):
    """A length prefix above the limit."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"frame of {length} bytes exceeds the limit of {limit}")
        self.length = length
        self.limit = limit


class FrameBuffer:
    """Accumulates received bytes and cuts them into frames (each with its length prefix).

    ``extend`` appends what the socket gave; ``next`` returns the next complete frame or None,
    checking each length against the *current* ``limit`` (a connection raises it once the
    handshake is over). A length above the limit raises :class:`FrameTooLarge` at once, before
    any of the frame is buffered beyond what already arrived.
    """

    __slots__ = ("_buffer", "_offset", "limit")

    def __init__(self, limit: int) -> None:
        self._buffer = bytearray()
        self._offset = 0
        self.limit = limit

    def extend(self, data: bytes) -> None:
        self._buffer += data

    def next(self) -> bytes | None:
        buffer = self._buffer
        offset = self._offset
        available = len(buffer) - offset
        if available >= 4:
            (length,) = LENGTH.unpack_from(buffer, offset)
            if length > self.limit:
                raise FrameTooLarge(length, self.limit)
            stop = offset + 4 + length
            if stop <= len(buffer):
                self._offset = stop
                return bytes(buffer[offset:stop])
        if offset:
            del buffer[:offset]
            self._offset = 0
        return None

    def feed(self, data: bytes) -> list[bytes]:
        """``extend`` then every complete frame."""
        self.extend(data)
        frames = []
        while (frame := self.next()) is not None:
            frames.append(frame)
        return frames

    def pending(self) -> int:
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer) - self._offset


# --------------------------------------------------------------------------------------------
# Data frames
# --------------------------------------------------------------------------------------------
class FrameError(Exception):
    """A data frame refused by :class:`Opener`: ``reason`` is bad-mac, replayed-frame,
    out-of-sequence, bad-version or truncated-frame."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_NONCE_PAD = bytes(4)


def _check_order(version: int, seq: int, expected: int) -> None:
    """An authentic frame's version and sequence number (the next one expected)."""
    if version != VERSION:
        raise FrameError("bad-version", f"frame version {version}, expected {VERSION}")
    if seq != expected:
        reason = "replayed-frame" if seq < expected else "out-of-sequence"
        raise FrameError(reason, f"sequence number {seq}, expected {expected}")


class Sealer:
    """Builds this direction's data frames: header, then the payload encrypted with AES-256-GCM
    (the header as associated data, the 16-byte tag last); counts sequence numbers. The nonce
    is the sequence number: never repeated under one direction's key."""

    __slots__ = ("_aead", "seq")

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.seq = 0

    def seal(
        self,
        tag: int,
        payload: bytes,
        t_send: float,
        signed: Signed | None = None,
        der: bytes = b"",
    ) -> bytes:
        """The frame of ``payload`` (a shared-key frame carries no signature: ValueError for
        ``signed``, which only identity mode's :class:`TlsSealer` seals)."""
        if signed is not None:
            raise ValueError("a shared-key frame carries no signature block")
        seq = self.seq
        head = PREFIX.pack(HEADER.size + len(payload) + MAC_SIZE, VERSION, tag, seq, t_send)
        self.seq = seq + 1
        return head + self._aead.encrypt(_NONCE_PAD + seq.to_bytes(8, "big"), payload, head)


class Opener:
    """Checks and decrypts the other direction's data frames: the tag first (over header and
    ciphertext), then version and sequence."""

    __slots__ = ("_aead", "seq")

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.seq = 0

    def open(self, frame: bytes) -> tuple[int, float, bytes]:
        """(tag, send time, payload) of ``frame`` (length prefix included)."""
        if len(frame) < PREFIX.size + MAC_SIZE:
            raise FrameError("truncated-frame", f"data frame of {len(frame)} bytes")
        _length, version, tag, seq, t_send = PREFIX.unpack_from(frame)
        view = memoryview(frame)
        try:
            payload = self._aead.decrypt(
                _NONCE_PAD + seq.to_bytes(8, "big"), view[PREFIX.size :], view[: PREFIX.size]
            )
        except InvalidTag:
            raise FrameError("bad-mac", f"frame of {len(frame)} bytes fails its tag") from None
        _check_order(version, seq, self.seq)
        self.seq += 1
        return tag, t_send, payload

    def open_frame(self, frame: bytes) -> tuple[int, float, bytes, None]:
        """:meth:`open`, as :meth:`TlsOpener.open_frame` answers: a shared-key frame has no
        signature block (a tag with :data:`TAG_SIGNED` set names no message type)."""
        tag, t_send, payload = self.open(frame)
        return tag, t_send, payload, None


class TlsSealer:
    """Identity mode's data frames: TLS encrypts and authenticates the stream, so a frame is
    the header and the payload, without a tag (same header, same sequence numbers)."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0

    def seal(
        self,
        tag: int,
        payload: bytes,
        t_send: float,
        signed: Signed | None = None,
        der: bytes = b"",
    ) -> bytes:
        """The frame of ``payload``; with ``signed``, a signed publication's frame: its
        signature block (with the publisher's certificate ``der``, empty if sent before) goes
        first and the tag gets :data:`TAG_SIGNED`."""
        if signed is not None:
            payload = signature_block(signed, der) + payload
            tag |= TAG_SIGNED
        seq = self.seq
        self.seq = seq + 1
        return PREFIX.pack(HEADER.size + len(payload), VERSION, tag, seq, t_send) + payload


class TlsOpener:
    """Checks identity mode's data frames: version and sequence (TLS did the rest)."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0

    def open(self, frame: bytes) -> tuple[int, float, memoryview]:
        if len(frame) < PREFIX.size:
            raise FrameError("truncated-frame", f"data frame of {len(frame)} bytes")
        _length, version, tag, seq, t_send = PREFIX.unpack_from(frame)
        _check_order(version, seq, self.seq)
        self.seq += 1
        return tag, t_send, memoryview(frame)[PREFIX.size :]

    def open_frame(
        self, frame: bytes
    ) -> tuple[int, float, memoryview, tuple[Signed, bytes] | None]:
        """:meth:`open`, and a signed publication's block read off its payload: (tag without
        :data:`TAG_SIGNED`, send time, the message's bytes, (the signature as it travels, the
        certificate it carries, empty if none)), the block None for an unsigned frame.
        :class:`FrameError` for a block cut short or over its limits."""
        tag, t_send, payload = self.open(frame)
        if not tag & TAG_SIGNED:
            return tag, t_send, payload, None
        signed, der, end = read_signature_block(payload)
        return tag & ~TAG_SIGNED, t_send, payload[end:], (signed, der)


# --------------------------------------------------------------------------------------------
# Signed publications' block
# --------------------------------------------------------------------------------------------
#: bytes of a publisher's certificate, at most (ours are ~300)
MAX_CERTIFICATE = 4096
#: a data frame's tag with this bit: a signed publication (framing docstring)
TAG_SIGNED = 0x8000
#: a signed frame's block before the message: publisher, nonce, the publisher's clock when it
#: signed (microseconds since the epoch), Ed25519 signature of the batch's root, the batch's
#: size, the publication's index in it, the hashes of its audit path that follow, and the
#: length of the publisher's certificate after them (0: sent earlier on this connection)
SIGNATURE = struct.Struct(">Q8sQ64sHHBH")
#: hashes of an audit path, at most (a batch of MAX_BATCH publications)
MAX_PATH = (MAX_BATCH - 1).bit_length()


def signature_block(signed: Signed, der: bytes = b"") -> bytes:
    """A signed frame's block before the message (framing docstring): :data:`SIGNATURE`,
    the audit path, and the publisher's certificate ``der`` (empty: sent before)."""
    path = signed.path
    return (
        SIGNATURE.pack(
            signed.publisher,
            signed.nonce,
            signed.t_us,
            signed.value,
            signed.size,
            signed.index,
            len(path) // HASH_BYTES,
            len(der),
        )
        + path
        + der
    )


def read_signature_block(payload: bytes | memoryview) -> tuple[Signed, bytes, int]:
    """A signed frame's block (framing docstring), read back: the signature as it travels
    (its credential not looked up yet), the publisher's certificate it carries (empty: none)
    and where the message starts. :class:`FrameError` for a block cut short or over the
    limits (:data:`MAX_PATH`, :data:`MAX_BATCH`, :data:`MAX_CERTIFICATE`)."""
    if len(payload) < SIGNATURE.size:
        raise FrameError("truncated-frame", f"signed frame of {len(payload)} bytes")
    publisher, nonce, t_us, value, size, index, hashes, cert_size = SIGNATURE.unpack_from(payload)
    if hashes > MAX_PATH or size > MAX_BATCH:
        raise FrameError("oversized-batch", f"a batch of {size} and a path of {hashes} hashes")
    if cert_size > MAX_CERTIFICATE:
        raise FrameError("oversized-certificate", f"a certificate of {cert_size} bytes")
    start = SIGNATURE.size + hashes * HASH_BYTES
    end = start + cert_size
    if len(payload) < end:
        raise FrameError("truncated-frame", f"signature block of {end} bytes cut short")
    path = bytes(payload[SIGNATURE.size : start])
    signed = Signed(publisher, nonce, t_us, value, None, size, index, path)
    return signed, bytes(payload[start:end]), end
