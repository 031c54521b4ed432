"""What a reader of the wire sees: lengths and timing, not payloads.

Two node processes on loopback share a cluster key; the test captures every packet on the
loopback interface (a raw ``AF_PACKET`` socket, as tcpdump does) while they subscribe and
publish under a topic name and payloads that carry a marker. The marker must not appear in
any captured byte. The same capture must see it when it is sent in the clear over another
loopback connection, so the check is known to be able to fail.
"""

from __future__ import annotations

import secrets
import socket
import struct
import time

import pytest

from support.netnode import BackgroundLoop, NodeProcess, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
ETH_P_ALL = 0x0003

pytestmark = pytest.mark.xdist_group("net_wire")


class LoopbackCapture(BackgroundLoop):
    """Every frame seen on ``lo`` while open, with the TCP ports of each IPv4 packet."""

    def __init__(self) -> None:
        super().__init__()
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.packets: list[tuple[int, int, bytes]] = []  # (source port, destination port, bytes)

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.sock.recv(65536)
            except TimeoutError:
                continue
            ip = frame[14:]  # lo's link header is an all-zero Ethernet header
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
                continue
            tcp = ip[(ip[0] & 0x0F) * 4 :]
            source, destination = struct.unpack_from(">HH", tcp)
            self.packets.append((source, destination, frame))

    def between(self, ports: set[int]) -> bytes:
        """The bytes of every captured packet from or to one of ``ports``."""
        return b"".join(f for s, d, f in self.packets if s in ports or d in ports)


def test_a_captured_loopback_stream_holds_no_payload_or_topic_bytes(
    contact_and_peer: tuple[NodeProcess, NodeProcess],
) -> None:
    contact, peer = contact_and_peer
    marker = f"MARKER-{secrets.token_hex(8)}"
    topic = f"topic-{marker}"
    ports = {int(node.address.rsplit(":", 1)[1]) for node in (contact, peer)}
    with LoopbackCapture() as capture:
        for node in (contact, peer):
            assert node.command({"op": "subscribe", "topic": topic})["ok"]
        sent: set[int] = set()
        deadline = time.monotonic() + 20
        while not (sent & contact.deliveries()) and time.monotonic() < deadline:
            reply = peer.command({"op": "publish", "topic": topic, "payload": f"{marker} " * 8})
            sent.add(reply["pub_id"])
            time.sleep(0.2)
        assert sent & contact.deliveries(), "no publication crossed the link"
        # the control: the same marker in the clear over another loopback connection
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            with socket.create_connection(("127.0.0.1", port)) as client:
                accepted, _ = server.accept()
                client.sendall(marker.encode())
                assert accepted.recv(100) == marker.encode()
                accepted.close()
            time.sleep(0.3)
    between_nodes = capture.between(ports)
    assert len(between_nodes) > 2000, f"only {len(between_nodes)} bytes captured between nodes"
    assert marker.encode() in capture.between({port}), "the capture misses plain TCP payloads"
    assert marker.encode() not in between_nodes, "a payload or topic crossed the wire readable"
    assert b"MARKER" not in between_nodes
