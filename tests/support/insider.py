"""An insider's own link to a node in identity mode: TLS, then data frames built by hand."""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cryptography import x509

from pubmesh.net import security
from pubmesh.net.codec import decode, encode
from pubmesh.net.framing import (
    TAG_CONTROL,
    TlsOpener,
    TlsSealer,
)
from pubmesh.net.signing import Credential, Signed, credential_of
from pubmesh.proto.core import Message
from support.hostile import read_frame

#: a frame as an insider sends it: the message, its signature block (None: unsigned) and
#: whether the block carries the publisher's certificate
InsiderFrame = tuple[Message, Signed | None, bool]


Sender = Callable[[list[InsiderFrame | tuple[int, bytes]]], None]
#: the next message the node sent on the link, with its signature block (None: unsigned)
Receiver = Callable[[], tuple[Message, Signed | None]]


@contextlib.contextmanager
def insider_link(identity_dir: Path, claimed: int, address: str) -> Iterator[Sender]:
    """A member's own link to the node at ``address``: TLS with the identity in
    ``identity_dir``, the HELLO naming ``claimed`` (its own id), then data frames built by
    hand, signed or not as each frame says."""
    with insider_session(identity_dir, claimed, address) as (send, _receive):
        yield send


@contextlib.contextmanager
def insider_session(
    identity_dir: Path, claimed: int, address: str
) -> Iterator[tuple[Sender, Receiver]]:
    """:func:`insider_link`, and what the node sends back: data frames opened and decoded,
    a signature block read as the transport reads it (its certificate kept for the link)."""
    host, port = address.rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(identity_dir / "node.crt", identity_dir / "node.key")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        tls.sendall(security.hello(claimed, security.new_nonce()))
        security.parse_challenge(read_frame(tls))
        sealer = TlsSealer()

        def send(frames: list[InsiderFrame | tuple[int, bytes]]) -> None:
            """Frames of messages, or ``(tag, payload)`` frames as they are."""
            out = []
            for frame in frames:
                if len(frame) == 2:
                    tag, payload = frame
                    out.append(sealer.seal(tag, payload, time.time()))
                    continue
                message, signed, with_cert = frame
                tag, payload = encode(message)
                cert = b""
                if signed is not None and with_cert and signed.credential is not None:
                    cert = signed.credential.der
                out.append(sealer.seal(tag, payload, time.time(), signed, cert))
            tls.sendall(b"".join(out))

        opener = TlsOpener()
        credentials: dict[int, Credential] = {}

        def receive() -> tuple[Message, Signed | None]:
            while True:
                body = read_frame(tls)
                frame = len(body).to_bytes(4, "big") + body
                tag, _t_send, payload, block = opener.open_frame(frame)
                if tag == TAG_CONTROL:
                    continue
                signed = None
                if block is not None:
                    signed, der = block
                    publisher = signed.publisher
                    if der:
                        cert = x509.load_der_x509_certificate(der)
                        credentials[publisher] = credential_of(cert, publisher)
                    signed.credential = credentials.get(publisher)
                return decode(tag, payload), signed

        yield send, receive
