"""A raw client of a node's shared-key link (the cluster key of :mod:`support.netnode`): the
handshake, frames, and waiting for the node to drop the connection."""

from __future__ import annotations

import socket
import time

from pubmesh.net import security
from pubmesh.net.framing import Sealer
from pubmesh.net.security import ClusterKey
from support.netnode import KEY_TEXT

KEY = ClusterKey.from_text(KEY_TEXT)


# ------------------------------------------------------------------------------------------
# A raw client
# ------------------------------------------------------------------------------------------
def read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    return _read_exactly(sock, int.from_bytes(head, "big"))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def handshake(sock: socket.socket, key: ClusterKey, claimed: int) -> Sealer:
    """Our side of the handshake, as a dialer; returns the sealer for our frames. With the
    cluster key, the target's CONFIRM is read and checked; without it, the target refuses our
    proof and sends nothing more."""
    nonce = security.new_nonce()
    sock.sendall(security.hello(claimed, nonce))
    acceptor, their_nonce = security.parse_challenge(read_frame(sock))
    script = security.transcript(nonce, their_nonce, claimed, acceptor)
    sock.sendall(security.proof_frame(key.proof(security.DIALER_LABEL, script)))
    if key is KEY:
        proof = security.parse_confirm(read_frame(sock))
        security.verify(key.proof(security.ACCEPTOR_LABEL, script), proof, "target")
    send_key, _receive = security.session_keys(key, script)
    return Sealer(send_key)


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> None:
    """The target must drop the connection: EOF or reset, within ``timeout``."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return
        except (ConnectionResetError, BrokenPipeError):
            return
        except TimeoutError:
            break
    raise AssertionError("the target kept a hostile connection open")
