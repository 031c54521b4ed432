"""Names a user knows (issue "first hour", item "names a user knows"): a node is shown as the
address it listens on (``127.0.0.1:7000``), never as its id (``ip << 16 | port``, a number
nobody recognises), wherever a person reads: the shell, ``stats``, ``/metrics`` labels and the
JSON event lines (which keep the integer ids for scripts, each with its address beside it).
The banner and ``stats`` say how the node runs: a shared key or identity mode, signed
publications, the ACL file, the data directory. The cluster's live table says what its
``dropped`` column counts.

Real node processes on 127.0.0.1: a peer that stops answering (SIGSTOP) makes its neighbour
say so (``net.rejected``, ``peer-silent``), an event that names the peer by its id.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net.address import format_id, node_id
from pubmesh.net.identity import init_authority, issue
from support.identity import free_port, keyless_env
from support.netnode import NodeProcess, ShellOnPty, node_env

STACK = "gossip"
#: (gossip connects the members of a topic's swarm: every node subscribes to news)
#: a silent peer is lost within a second and a half (the heartbeat's bounds, shortened)
FAST_SILENCE = ["--net", "ping_interval=0.3", "--net", "suspect_after=1"]
#: node ids are 48-bit integers: a bare one is a run of 10 or more digits
BARE_ID = re.compile(rb"(?<![\d.:])\d{10,}(?![\d.])")


def _node(tmp: Path, name: str, *extra: str) -> NodeProcess:
    return NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--subscribe", "news", *extra],
        log=tmp / f"{name}.log",
    )


@pytest.fixture
def nodes() -> Iterator[list[NodeProcess]]:
    started: list[NodeProcess] = []
    yield started
    for node in started:
        with_signal(node, signal.SIGCONT)
        node.stop(signal.SIGKILL)


def with_signal(node: NodeProcess, signum: int) -> None:
    if node.proc.poll() is None:
        os.killpg(node.proc.pid, signum)


def _silent_peer_event(node: NodeProcess, peer: NodeProcess) -> dict[str, Any]:
    """Stop ``peer`` (SIGSTOP, its sockets open) and wait for ``node`` to find it silent."""
    with_signal(peer, signal.SIGSTOP)
    record: dict[str, Any] = node.wait_event(
        lambda r: (
            r.get("event") == "net"
            and r["kind"] == "net.rejected"
            and r["detail"].get("reason") == "peer-silent"
        ),
        10,
        "net.rejected peer-silent",
    )
    return record


def _joined(contact: NodeProcess, peer: NodeProcess) -> None:
    deadline = time.monotonic() + 10
    while (
        peer.node_id
        not in contact.command({"op": "stats"})["stats"]["transport"]["peers_connected"]
    ):
        assert time.monotonic() < deadline, "the peer never connected"
        time.sleep(0.1)


def test_json_event_lines_give_every_node_id_its_address(
    tmp_path: Path, nodes: list[NodeProcess]
) -> None:
    contact = _node(tmp_path, "contact", *FAST_SILENCE, "--stats-interval", "0.5")
    nodes.append(contact)
    peer = _node(tmp_path, "peer", "--contact", contact.address)
    nodes.append(peer)
    _joined(contact, peer)
    record = _silent_peer_event(contact, peer)
    events = contact.matching(lambda r: r.get("event") == "net")
    print("event lines:", *map(json.dumps, events), sep="\n  ")
    detail = record["detail"]
    # the integer id stays (scripts read it), the address a person knows is beside it
    assert detail["peer"] == peer.node_id, detail
    assert detail.get("address") == peer.address, detail
    for event in events:
        for key, value in event["detail"].items():
            if type(value) is int and value in (peer.node_id, contact.node_id):
                named = event["detail"].get("address" if key == "peer" else f"{key}_address")
                assert named == format_id(value), f"{key}={value} has no address: {event}"
    # the ready line says the mode; the neighbours answer and the stats lines carry addresses
    ready = contact.records[0]
    assert ready["event"] == "ready" and ready["mode"]["links"] == "shared-key", ready
    with_signal(peer, signal.SIGCONT)
    answer = contact.command({"op": "neighbors"})
    for topic, ids in answer["neighbors"].items():
        assert answer["addresses"][topic] == [format_id(i) for i in ids], answer
    line = contact.wait_event(lambda r: r.get("event") == "stats", 10, "a stats line")
    assert line["address"] == contact.address, line
    assert line["neighbor_addresses"] == {
        t: [format_id(i) for i in ids] for t, ids in line["neighbors"].items()
    }, line


def test_the_shell_names_peers_by_address_in_events_and_stats(
    tmp_path: Path, nodes: list[NodeProcess]
) -> None:
    port = free_port()
    args = ["--stack", STACK, "--listen", f"127.0.0.1:{port}", "--subscribe", "news"]
    args += FAST_SILENCE
    with ShellOnPty(args) as shell:
        shell.read_until(b"type 'help'")
        peer = _node(tmp_path, "peer", "--contact", f"127.0.0.1:{port}")
        nodes.append(peer)
        shell.read_until(b"neighbour up")
        shell.type_line("stats")
        shell.read_until(b"(stats --json")
        shell.type_line("stats --json")
        shell.read_until(b'"lagged"')
        with_signal(peer, signal.SIGSTOP)
        shell.read_until(b"peer-silent")
        shell.read_until(b'"connection-lost"})')  # the net.peer-down line that follows
        screen = shell.seen
        print(screen.decode(errors="replace"))
        own = str(node_id("127.0.0.1", port)).encode()
        assert str(peer.node_id).encode() not in screen and own not in screen
        assert BARE_ID.search(screen) is None, BARE_ID.search(screen)
        text = screen.decode(errors="replace")
        assert f"connected to {peer.address}" in text
        assert f'"peers_connected": [\r\n      "{peer.address}"' in text
        assert re.search(rf'\(net\.rejected: {{"peer": "{peer.address}"', text), text[-800:]
        # the banner and stats say the node's mode
        assert text.count("security: shared key (every link authenticated") == 2, text
        assert text.count("data directory: none") == 2, text


def test_banner_and_stats_say_shared_key_mode(tmp_path: Path, nodes: list[NodeProcess]) -> None:
    node = _node(tmp_path, "node", "--data-dir", str(tmp_path / "data"))
    nodes.append(node)
    stats = node.command({"op": "stats"})["stats"]
    print(json.dumps(stats.get("mode")), stats["transport"].get("peers_connected_addresses"))
    assert stats["mode"] == {
        "links": "shared-key",
        "signed": False,
        "acl": None,
        "revocations": None,
        "data_dir": str(tmp_path / "data"),
    }
    assert stats["transport"]["peers_connected_addresses"] == []


def test_banner_and_stats_say_identity_mode_signed_and_the_acl(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    port = free_port()
    issue(authority, f"127.0.0.1:{port}", tmp_path / "me")
    acl = tmp_path / "acl.toml"
    acl.write_text('[[rule]]\nnodes = ["*"]\npublish = ["news"]\nsubscribe = ["news"]\n')
    args = ["--stack", STACK, "--listen", f"127.0.0.1:{port}"]
    args += ["--identity", str(tmp_path / "me"), "--acl", str(acl)]
    with ShellOnPty(args, env=keyless_env()) as shell:
        shell.read_until(b"type 'help'")
        shell.type_line("stats")
        shell.read_until(b"(stats --json")
        time.sleep(0.2)
        text = shell.seen.decode(errors="replace")
        print(text)
        said = f"security: identity mode (certificates, TLS 1.3), publications signed, ACL {acl}"
        assert text.count(said) == 2, "the banner and stats each say it once"
        assert "shared key" not in text


def test_metrics_labels_carry_the_address(tmp_path: Path, nodes: list[NodeProcess]) -> None:
    node = _node(tmp_path, "node", "--metrics", "127.0.0.1:0")
    nodes.append(node)
    ready = node.records[0]
    with urllib.request.urlopen(f"http://{ready['metrics']}/metrics", timeout=5) as answer:
        body = answer.read().decode()
    info = next(line for line in body.splitlines() if line.startswith("pubmesh_info{"))
    print(info)
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    assert labels["node"] == node.address, labels
    assert str(node.node_id) not in body
    assert labels["links"] == "shared-key" and labels["signed"] == "false", labels


def test_the_cluster_table_says_what_dropped_counts(tmp_path: Path) -> None:
    """``pubmesh cluster`` on a terminal: its live table has a legend for ``dropped``."""
    import pty
    import select

    master, slave = pty.openpty()
    command = [sys.executable, "-m", "pubmesh", "cluster", "--stack", STACK, "--nodes", "2"]
    command += ["--duration", "3", "--out", str(tmp_path / "run")]
    process = subprocess.Popen(
        command, stdin=slave, stdout=slave, stderr=slave, env=node_env(), start_new_session=True
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 12
        while b"dropped: messages" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)
        os.close(master)
    screen = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen).decode(errors="replace")
    print(screen[-3000:])
    assert "dropped: messages this node's transport gave up sending" in " ".join(screen.split())
