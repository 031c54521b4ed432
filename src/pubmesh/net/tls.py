"""A TLS session driven by hand over a TCP transport (identity mode's links).

Why not ``loop.start_tls``
==========================
asyncio's ``start_tls`` hides the TLS handshake inside its own protocol: until it completes,
the connection's owner sees nothing, not even whether the peer has sent a byte. The transport
must see that. Its door against strangers (:mod:`pubmesh.net.transport`, "No door a stranger can
hold shut") keeps an unproven connection that is *talking* and closes the oldest idle one
first; with ``start_tls`` an honest dialer in the middle of its TLS handshake looked exactly as
idle as a stranger's silent socket, was closed first under a flood of them, and the first
handshake message's one-second deadline covered the whole TLS handshake. Here the connection
feeds what TCP delivers into the session itself (``ssl.MemoryBIO``, as asyncio's own
``sslproto`` does), so it knows how many bytes the peer sent, when the session is established,
and which error ended it, in the order the bytes arrived.

A :class:`TlsLink` has the write side of an ``asyncio.Transport`` (write, close, abort, buffer
size, extra info), so the connection writes its frames to it as it would to TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

#: plaintext read from the session at once
_READ = 1 << 16


class TlsLink(asyncio.Transport):
    """One TLS session over ``raw``; ``server_side`` for an accepted connection.

    The owner calls :meth:`receive` with every chunk TCP delivers, then :meth:`handshake`
    until it says the session is established, then :meth:`read` for the plaintext. An
    ``ssl.SSLError`` from either is the session's end (a refused certificate, the peer's alert,
    a corrupt record); what TLS had to say about it (an alert) has been sent by then.
    """

    def __init__(self, raw: asyncio.Transport, context: ssl.SSLContext, server_side: bool) -> None:
        super().__init__()
        self.raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.session = context.wrap_bio(self._incoming, self._outgoing, server_side=server_side)
        #: bytes the peer sent (TLS records, handshake included)
        self.received = 0
        #: the handshake is over and certificates checked by TLS
        self.established = False
        #: the peer ended the session (close_notify): nothing more to read
        self.ended = False
        if not server_side:
            self.handshake()  # the ClientHello

    # ------------------------------------------------------------------ reading
    def receive(self, data: bytes) -> None:
        """Bytes from TCP, in order."""
        self.received += len(data)
        self._incoming.write(data)

    def handshake(self) -> bool:
        """Advance the handshake with what was received; True once established."""
        if self.established:
            return True
        try:
            self.session.do_handshake()
        except ssl.SSLWantReadError:
            return False
        finally:
            self._send()  # the next flight, or the alert that says why TLS failed
        self.established = True
        return True

    def read(self) -> bytes:
        """The plaintext that has arrived (b"" if none)."""
        chunks = []
        try:
            while not self.ended:
                chunk = self.session.read(_READ)
                if not chunk:
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            self.ended = True
        finally:
            self._send()  # TLS 1.3 answers some records (key updates)
        return b"".join(chunks)

    # ------------------------------------------------------------------ writing
    def _send(self) -> None:
        if self._outgoing.pending and not self.raw.is_closing():
            self.raw.write(self._outgoing.read())

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.session.write(data)
        self._send()

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size() + self._outgoing.pending

    def is_closing(self) -> bool:
        return self.raw.is_closing()

    def close(self) -> None:
        """Say close_notify, then close TCP once what was written has gone."""
        if self.established and not self.raw.is_closing():
            # the peer's close_notify is not awaited
            with contextlib.suppress(ssl.SSLError):
                self.session.unwrap()
            self._send()
        self.raw.close()

    def abort(self) -> None:
        self.raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self.session
        return self.raw.get_extra_info(name, default)
