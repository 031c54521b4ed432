"""No door a stranger can hold shut, against live node processes.

A stranger without the cluster key can open TCP connections to any node. Before, 128 idle
sockets took every handshake slot of a node and honest connections were refused for as long as
the sockets stayed open. Now an accepted connection must send its first handshake message
within ``hello_timeout`` (1 s), at most 16 unproven connections come from one address and 128
in all, and when the slots are full the oldest unproven connection is closed for the new one
(:mod:`pubmesh.net.transport`). These tests attack a contact node with 1,000 idle sockets that
reopen when closed (up to 2,000 a second), and an honest node joins through it meanwhile and
delivers; an unproven connection's claimed id shows as a claim, not a peer.

The stranger's sockets come from 127.0.0.2, another host as the node sees it (loopback is all
of 127.0.0.0/8); the spread case uses 64 such addresses, to fill the node-wide limit too.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net import security
from pubmesh.net.address import format_id
from pubmesh.net.identity import init_authority
from support.hostile import read_frame, wait_closed
from support.identity import identity_node
from support.netnode import BackgroundLoop, NodeProcess, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
SOCKETS = 1000
#: sockets reopened per second at most, beyond the first SOCKETS: the attack is the 1,000
#: sockets; an unpaced churn only made this test take both cores from the suite's other
#: network tests (it reached ~6,000 a second)
REOPEN_RATE = 2000

pytestmark = pytest.mark.xdist_group("net_door")


class IdleFlood(BackgroundLoop):
    """A keyless stranger: keeps ``sockets`` idle TCP connections open to ``address`` from
    the given source addresses, reopening each one the node closes, until stopped. With
    ``hello``, each socket first sends a HELLO (which takes no key) and then stalls."""

    def __init__(self, address: str, sources: list[str], sockets: int, hello: bool) -> None:
        super().__init__()
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))
        self.sources = sources
        self.sockets = sockets
        self.hello = hello
        self.opened = 0
        self.closed_by_node = 0
        self.refused = 0

    def _open(self, selector: selectors.BaseSelector) -> None:
        sock = socket.socket()
        sock.setblocking(False)
        sock.bind((self.sources[self.opened % len(self.sources)], 0))
        try:
            sock.connect((self.target[0], self.target[1]))
        except BlockingIOError:
            pass
        except OSError:
            self.refused += 1
            sock.close()
            return
        self.opened += 1
        selector.register(sock, selectors.EVENT_WRITE if self.hello else selectors.EVENT_READ)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        started = time.monotonic()
        try:
            while not self._stop.is_set():
                allowed = self.sockets + REOPEN_RATE * (time.monotonic() - started)
                while (
                    len(selector.get_map()) < self.sockets
                    and self.opened < allowed
                    and not self._stop.is_set()
                ):
                    self._open(selector)
                for key, events in selector.select(0.05):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if events & selectors.EVENT_WRITE:  # connected: HELLO, then only read
                        selector.modify(sock, selectors.EVENT_READ)
                        with contextlib.suppress(OSError):
                            sock.send(security.hello(1, security.new_nonce()))
                        continue
                    try:
                        data = sock.recv(4096)
                    except OSError:
                        data = b""
                    if not data:  # the node closed it: reopen (in the loop above)
                        self.closed_by_node += 1
                        selector.unregister(sock)
                        sock.close()
        finally:
            for key in list(selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            selector.close()


def _joins_and_delivers(
    contact: NodeProcess, subscriber: NodeProcess, start_honest: Callable[[], NodeProcess]
) -> float:
    """An honest node (``start_honest``) joins through ``contact`` and its publications reach
    ``subscriber`` (and the subscriber's reach it); seconds from its start until both
    directions delivered."""
    started = time.monotonic()
    honest = start_honest()
    try:
        for node in (subscriber, honest):
            assert node.command({"op": "subscribe", "topic": "door"})["ok"]
        sent_by_honest: set[int] = set()
        sent_to_honest: set[int] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sent_by_honest.add(
                honest.command({"op": "publish", "topic": "door", "payload": "in"})["pub_id"]
            )
            sent_to_honest.add(
                subscriber.command({"op": "publish", "topic": "door", "payload": "out"})["pub_id"]
            )
            time.sleep(0.2)
            if sent_by_honest & subscriber.deliveries() and sent_to_honest & honest.deliveries():
                return time.monotonic() - started
        log = honest.log.read_text(errors="replace")[-1500:]
        raise AssertionError(f"the honest node did not join and deliver within 30 s: {log}")
    finally:
        honest.stop()


def _rejected(node: NodeProcess) -> dict[str, int]:
    stats: dict[str, Any] = node.command("stats")["stats"]
    return dict(stats["transport"]["rejected"])


@pytest.mark.parametrize(
    ("sources", "hello"),
    [(1, False), (64, False), (64, True)],
    ids=["one-stranger", "64-strangers", "64-strangers-saying-hello"],
)
def test_an_honest_node_joins_through_a_contact_under_an_idle_socket_flood(
    contact_and_peer: tuple[NodeProcess, NodeProcess],
    tmp_path: Path,
    sources: int,
    hello: bool,
) -> None:
    contact, subscriber = contact_and_peer

    def start_honest() -> NodeProcess:
        args = ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", contact.address]
        return NodeProcess(args, log=tmp_path / "honest.log")

    _flood_and_join(contact, subscriber, start_honest, sources, hello)


def test_in_identity_mode_too_an_honest_node_joins_under_the_flood(tmp_path: Path) -> None:
    """Identity mode: the contact drives each TLS session itself, so the eviction rule sees
    an honest TLS handshake's bytes arrive and keeps it over 64 strangers' idle sockets (with
    asyncio's ``start_tls`` it could not, and the join took 6 s here, over 30 s under load)."""
    init_authority(tmp_path / "ca")
    contact = identity_node(tmp_path, tmp_path / "ca", "contact")
    subscriber = identity_node(tmp_path, tmp_path / "ca", "subscriber", contact)
    try:
        _flood_and_join(
            contact,
            subscriber,
            lambda: identity_node(tmp_path, tmp_path / "ca", "honest", contact),
            64,
            False,
        )
    finally:
        subscriber.stop()
        contact.stop()


def _flood_and_join(
    contact: NodeProcess,
    subscriber: NodeProcess,
    start_honest: Callable[[], NodeProcess],
    sources: int,
    hello: bool,
) -> None:
    addresses = [f"127.0.0.{2 + i}" for i in range(sources)]
    with IdleFlood(contact.address, addresses, SOCKETS, hello) as flood:
        deadline = time.monotonic() + 20
        while flood.opened < SOCKETS or flood.closed_by_node < 100:
            assert time.monotonic() < deadline, (flood.opened, flood.closed_by_node)
            time.sleep(0.05)
        took = _joins_and_delivers(contact, subscriber, start_honest)
        opened, closed = flood.opened, flood.closed_by_node
    assert contact.proc.poll() is None, "the contact died under the flood"
    rejected = _rejected(contact)
    # the node made room by closing the stranger's oldest sockets, and timed out idle ones;
    # it never turned a new connection away
    assert rejected.get("evicted", 0) + rejected.get("handshake-timeout", 0) >= 100, rejected
    assert rejected.get("too-many-connections", 0) == 0, rejected
    print(
        f"{sources} source(s), hello {hello}: {opened} sockets opened, {closed} closed by the "
        f"node, honest node joined and delivered in {took:.1f} s; refusals {rejected}"
    )


def test_a_silent_connection_is_closed_after_the_hello_deadline(
    contact_and_peer: tuple[NodeProcess, NodeProcess],
) -> None:
    contact, _ = contact_and_peer
    host, port = contact.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        opened = time.monotonic()
        wait_closed(sock, timeout=5)
        waited = time.monotonic() - opened
    assert 0.9 <= waited <= 2.5, f"closed after {waited:.2f} s; the deadline is 1 s"
    assert _rejected(contact).get("handshake-timeout", 0) >= 1


def test_an_unproven_id_is_a_claim_never_a_peer(
    contact_and_peer: tuple[NodeProcess, NodeProcess],
) -> None:
    contact, subscriber = contact_and_peer
    host, port = contact.address.rsplit(":", 1)
    before = contact.mark()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        remote = f"127.0.0.1:{sock.getsockname()[1]}"
        # a stranger's HELLO in the subscriber's name, then a proof made without the key
        sock.sendall(security.hello(subscriber.node_id, security.new_nonce()))
        read_frame(sock)  # the challenge
        sock.sendall(security.proof_frame(bytes(32)))
        wait_closed(sock)
    record = contact.wait_event(
        lambda r: r.get("kind") == "net.rejected" and r["detail"].get("remote") == remote,
        10,
        "the stranger's rejection",
        before,
    )
    detail = record["detail"]
    assert detail["peer"] is None, json.dumps(record)
    claim = f"claimed to be {format_id(subscriber.node_id)}, unproven"
    assert claim in detail["detail"], json.dumps(record)


def test_in_identity_mode_the_first_deadline_covers_the_clienthello_only(tmp_path: Path) -> None:
    """A silent socket is closed at the 1 s hello deadline; one that sent a TLS ClientHello
    and stalled has begun a handshake and is closed at the whole handshake's deadline (5 s),
    so a TLS handshake slowed by load is not cut at one second."""
    init_authority(tmp_path / "ca")
    contact = identity_node(tmp_path, tmp_path / "ca", "contact")
    try:
        host, port = contact.address.rsplit(":", 1)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client.check_hostname = False
        client.verify_mode = ssl.CERT_NONE
        hello = client.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO())
        with pytest.raises(ssl.SSLWantReadError):
            hello.do_handshake()
        client_hello = outgoing.read()
        assert client_hello[:1] == b"\x16"  # a TLS handshake record
        with (
            socket.create_connection((host, int(port)), timeout=10) as silent,
            socket.create_connection((host, int(port)), timeout=10) as stalled,
        ):
            opened = time.monotonic()
            stalled.sendall(client_hello)
            wait_closed(silent, timeout=10)
            silent_for = time.monotonic() - opened
            wait_closed(stalled, timeout=10)
            stalled_for = time.monotonic() - opened
        assert 0.9 <= silent_for <= 2.5, f"the silent socket closed after {silent_for:.2f} s"
        assert 4.9 <= stalled_for <= 7.0, (
            f"the stalled TLS handshake closed after {stalled_for:.2f} s"
        )
        log = contact.log.read_text(errors="replace")
        assert "no handshake message within 1 s" in log, log[-1500:]
        assert "no complete handshake within 5 s" in log, log[-1500:]
    finally:
        contact.stop()
