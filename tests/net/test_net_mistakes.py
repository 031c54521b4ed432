"""The first hour's mistakes, each named in one sentence, once (issue "first hour").

* a contact nobody listens at: ``cannot reach the contact ADDRESS: nothing listens there
  (connection refused); retrying quietly``, once, then quiet redials with a backoff; ``stats``
  says the node is alone and since when the contact is unreachable; when the contact comes up
  the node says so once and joins;
* a shared-key node and an identity-mode node: each names the other's mode, once per address,
  whichever of them dials;
* two shared-key nodes with different keys: each says the keys differ, once.

Real node processes on 127.0.0.1; the sentences are ``net.trouble`` events on the JSON channel
and plain lines in the shell.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from pubmesh.net.identity import init_authority
from support.identity import STACK, free_port, identity_node
from support.netnode import OTHER_KEY, NodeProcess, ShellOnPty, node_env

#: how long a node is watched for repeats after its first sentence (seconds)
WATCH = 6.5
UNREACHABLE = "cannot reach the contact {address}: nothing listens there (connection refused)"


def _troubles(node: NodeProcess, address: str | None = None) -> list[dict[str, Any]]:
    return node.matching(
        lambda r: (
            r.get("event") == "net"
            and r["kind"] == "net.trouble"
            and (address is None or r["detail"]["address"] == address)
        )
    )


def _net_lines(node: NodeProcess) -> list[str]:
    """What the node said on its JSON channel about the network (for failure messages)."""
    return [json.dumps(r)[:300] for r in node.matching(lambda r: r.get("event") == "net")][-30:]


def _said_once(node: NodeProcess, address: str, problem: str, what: str) -> dict[str, Any]:
    """The node's one sentence about ``address`` (``problem``): it comes within 15 s, and no
    other comes over the next WATCH seconds."""
    try:
        first = node.wait_event(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] == "net.trouble"
                and r["detail"]["address"] == address
            ),
            15,
            what,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\nits network lines: {_net_lines(node)}") from None
    assert first["detail"]["problem"] == problem, first
    time.sleep(WATCH)
    said = _troubles(node, address)
    assert len(said) == 1, f"{what}: said {len(said)} times: {said}"
    return dict(first["detail"])


def _trouble_stats(node: NodeProcess, address: str) -> dict[str, Any]:
    stats = node.command({"op": "stats"})["stats"]
    found = [t for t in stats.get("troubles", []) if t.get("address") == address]
    assert found, f"stats name no trouble with {address}: {stats.get('troubles')!r}"
    return dict(found[0])


def test_an_unreachable_contact_is_said_once_the_node_is_alone_and_joins_when_it_comes(
    tmp_path: Path,
) -> None:
    port = free_port()
    contact = f"127.0.0.1:{port}"
    node = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", contact],
        log=tmp_path / "node.log",
    )
    later: NodeProcess | None = None
    try:
        started = time.monotonic()
        assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        said = _said_once(node, contact, "unreachable", "the unreachable contact's sentence")
        took = time.monotonic() - started - WATCH
        assert said["message"].startswith(UNREACHABLE.format(address=contact)), said
        assert said["contact"] is True and said["reason"] == "refused", said
        # neither the raw drop nor peer-down pairs on the JSON channel: the one line says it
        pairs = node.matching(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] in ("net.dropped", "net.peer-down")
                and r["detail"].get("address") == contact
            )
        )
        assert not pairs, f"repeated drop/peer-down lines: {pairs}"
        stats = node.command({"op": "stats"})["stats"]
        assert stats["alone"] is True, {k: stats.get(k) for k in ("alone", "troubles")}
        trouble = _trouble_stats(node, contact)
        assert trouble["problem"] == "unreachable" and trouble["contact"] is True, trouble
        assert trouble["since"] <= time.time(), trouble
        # it was retried (quietly), with a backoff: a few dials, not the dozens of a loop
        assert trouble["count"] >= 2, f"not retried: {trouble}"
        dials = stats["transport"]["dials_failed"]
        assert dials <= 12, f"{dials} failed dials in {WATCH + took:.1f} s: not backing off"

        # the contact comes up: the node says so once and joins
        later = NodeProcess(["--stack", STACK, "--listen", contact], log=tmp_path / "contact.log")
        assert later.command({"op": "subscribe", "topic": "news"})["ok"]
        try:
            over = node.wait_event(
                lambda r: r.get("event") == "net" and r["kind"] == "net.trouble-over",
                45,
                "the contact reached",
            )
        except AssertionError as error:
            raise AssertionError(f"{error}\nits network lines: {_net_lines(node)}") from None
        assert over["detail"]["address"] == contact, over
        assert f"reached the contact {contact}" in over["detail"]["message"], over
        deadline = time.monotonic() + 20
        while True:
            neighbors = node.command({"op": "neighbors"})["neighbors"]
            if later.node_id in neighbors.get("news", []):
                break
            assert time.monotonic() < deadline, f"never joined the contact: {neighbors}"
            time.sleep(0.2)
        stats = node.command({"op": "stats"})["stats"]
        assert stats["alone"] is False and not stats["troubles"], stats["troubles"]
        assert node.count(lambda r: r.get("kind") == "net.trouble-over") == 1
        print(
            f"unreachable contact said once after {took:.1f} s, {trouble['count']} quiet "
            f"retries in {WATCH:g} s; joined when it came"
        )
    finally:
        node.stop()
        if later is not None:
            later.stop()


def test_the_shell_says_an_unreachable_contact_once_and_stats_say_alone() -> None:
    contact = f"127.0.0.1:{free_port()}"
    with ShellOnPty(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", contact], env=node_env()
    ) as shell:
        shell.read_until(b"type 'help'")
        shell.type_line("subscribe news")
        sentence = UNREACHABLE.format(address=contact).encode()
        shell.read_until(sentence, timeout=10)
        time.sleep(WATCH)
        shell.type_line("stats")
        shell.read_until(b"(stats --json", timeout=10)
        screen = shell.seen.decode(errors="replace")
        assert screen.count(sentence.decode()) == 1, screen[-3000:]
        assert "net.peer-down" not in screen and "net.dropped" not in screen, screen[-3000:]
        stats = screen[screen.rindex("node 127.0.0.1") :]
        assert "alone: no neighbours, no connections" in stats, stats
        assert re.search(
            rf"the contact {re.escape(contact)}: unreachable: nothing listens there .* since "
            r"\d\d:\d\d:\d\d",
            stats,
        ), stats
        shell.type_line("quit")


def test_a_shared_key_node_and_identity_nodes_name_each_others_mode_once(
    tmp_path: Path,
) -> None:
    init_authority(tmp_path / "ca")
    member = identity_node(tmp_path, tmp_path / "ca", "member")
    keyed: NodeProcess | None = None
    dialer: NodeProcess | None = None
    try:
        # the shared-key node dials the identity node ...
        keyed = NodeProcess(
            ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", member.address],
            log=tmp_path / "keyed.log",
        )
        # ... and another identity node dials the shared-key node
        dialer = identity_node(tmp_path, tmp_path / "ca", "dialer", keyed)
        for node in (keyed, member, dialer):
            assert node.command({"op": "subscribe", "topic": "t"})["ok"]
        tls = _said_once(keyed, member.address, "speaks-tls", "the shared-key node's sentence")
        assert tls["message"].startswith(
            f"{member.address} speaks TLS: it runs in identity mode; this node uses a shared key"
        ), tls
        shared = _said_once(
            member, keyed.address, "speaks-shared-key", "the identity node's sentence"
        )
        assert shared["message"] == (
            f"{keyed.address} speaks pubmesh's shared-key handshake: it runs with a cluster "
            "key; this node uses identity mode (certificates)"
        ), shared
        dialed = _said_once(
            dialer, keyed.address, "speaks-shared-key", "the identity dialer's sentence"
        )
        assert dialed["message"].startswith(f"{keyed.address} speaks pubmesh's shared-key"), dialed
        # the identity dialer named no address of its own: the shared-key node names its host
        host = keyed.matching(
            lambda r: r.get("kind") == "net.trouble" and r["detail"]["problem"] == "speaks-tls"
        )
        accepted = [r["detail"] for r in host if r["detail"]["address"] == "127.0.0.1"]
        assert len(accepted) == 1, f"the shared-key node's sentences: {host}"
        assert accepted[0]["message"].startswith("127.0.0.1 speaks TLS"), accepted
        # it was retried and refused again meanwhile, quietly
        assert _trouble_stats(keyed, member.address)["count"] >= 2
        assert _trouble_stats(member, keyed.address)["count"] >= 2
        for node in (keyed, member, dialer):
            assert node.count(lambda r: r.get("event") == "deliver") == 0
    finally:
        for node in (keyed, dialer, member):
            if node is not None:
                node.stop()


def test_two_nodes_with_different_keys_say_so_once_each(tmp_path: Path) -> None:
    first = NodeProcess(["--stack", STACK, "--listen", "127.0.0.1:0"], log=tmp_path / "a.log")
    other_env = node_env(PUBMESH_KEY="a0c4e19f7b2d5836c1f0e8a7d9b3c642")
    second: NodeProcess | None = None
    try:
        second = NodeProcess(
            ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", first.address],
            log=tmp_path / "b.log",
            env=other_env,
        )
        for node in (first, second):
            assert node.command({"op": "subscribe", "topic": "t"})["ok"]
        dialing = _said_once(second, first.address, "wrong-key", "the dialer's sentence")
        accepting = _said_once(first, second.address, "wrong-key", "the contact's sentence")
        assert OTHER_KEY.fingerprint in dialing["message"], dialing
        for said in (dialing, accepting):
            assert "holds another cluster key: the cluster keys differ" in said["message"], said
        assert _trouble_stats(second, first.address)["count"] >= 2
        assert _trouble_stats(first, second.address)["count"] >= 2
    finally:
        first.stop()
        if second is not None:
            second.stop()
