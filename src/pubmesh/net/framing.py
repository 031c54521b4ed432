"""Frames: how bytes on a TCP connection are cut into messages.

Every frame starts with a 4-byte big-endian length ``L`` of what follows. A connection's first
frames are the four handshake frames of :mod:`pubmesh.net.security` (fixed layouts, magic
``PMSH``); after them every frame is a *data frame*::

    offset  size  field
    0       4     L, length of the rest (header + encrypted payload + tag)
    4       1     version (3)
    5       2     type tag: 0 = runtime control (payload: one byte, CONTROL_*),
                  1..65535 = a message class of pubmesh.proto.core.MESSAGE_TYPES
    7       8     sequence number of this frame in its direction of this connection (0, 1, ...)
    15      8     send time (float64, the sender's clock; used by the trace only)
    23      n     payload: the message's fields as a msgpack array (pubmesh.net.codec),
                  encrypted with AES-256-GCM under the direction's session key, nonce = the
                  sequence number
    23+n    16    the GCM tag, over the encrypted payload and bytes 0..23 (associated data)

A *signed* data frame (identity mode's publications, :mod:`pubmesh.net.signing`) sets the
type tag's top bit (0x8000) and starts its payload with a signature block: the publisher's
id (8 bytes), the nonce its publication id is bound to (8), the publisher's clock when it
signed (8, microseconds since the epoch), the Ed25519 signature of its batch's Merkle root
(64), the batch's size (2), the publication's index in it (2), the number of hashes of its
audit path (1), the length of the publisher's certificate (2; 0 when this connection carried
it before), the audit path (32 bytes a hash) and that certificate (DER); the message's fields
follow.

(Version 2 sent the payload in the clear with a keyed BLAKE2b MAC; version 1 with HMAC-SHA256.)
The tag covers the length, the header and the payload; the sequence number makes a replayed or
reordered frame fail (the receiver expects exactly the next number). A length above the
connection's limit is refused *before* the frame is read, so a peer cannot make a node buffer
more than one maximal frame.
"""

from __future__ import annotations

import struct

#: 5: a signature covers a batch of publications (a Merkle root) and a signed publication's
#: block carries its place in the batch (issue 61); 4: a signed publication's block carries the
#: publisher's signing time, and a control frame carries the authority's revocation list
#: (issue 58); 3: payloads encrypted (AES-256-GCM)
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
