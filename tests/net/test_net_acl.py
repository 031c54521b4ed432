"""Topic permissions: an ACL file says which members may publish and which
may subscribe on which topics, and every node enforces it on what it sends, receives and is
asked to do (:mod:`pubmesh.net.acl`).

The live test runs real node processes in identity mode: a reader and a writer of a secret
topic, and a cheater that runs with its own, more generous ACL (a member controls its own
configuration) and joins the secret topic anyway. The test itself plays an insider without the
right to publish on ``news``, sending its signed publications to the reader directly (the
first hop) and through a colluding member's link (a friendly neighbour).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pubmesh.errors import UserError
from pubmesh.net.acl import parse_acl, topic_matches
from pubmesh.net.identity import init_authority, issue, signing_key
from pubmesh.net.signing import Signer, Verifier, credential_of
from pubmesh.proto.gossip.hyparview import ContactRequest
from pubmesh.proto.gossip.plumtree import Gossip
from support.identity import STACK, free_port, keyless_env
from support.insider import insider_link
from support.netnode import NodeProcess, ShellOnPty

pytestmark = pytest.mark.xdist_group("net_acl")


@pytest.mark.parametrize(
    ("pattern", "topic", "matches"),
    [
        ("news", "news", True),
        ("news", "news.eu", False),
        ("sensors.*", "sensors.t1", True),
        ("sensors.*", "sensors", False),
        ("sensors.*", "sensors.t1.raw", False),
        ("sensors.>", "sensors.t1.raw", True),
        ("sensors.>", "sensors", False),
        (">", "anything.at.all", True),
        ("*.alerts", "eu.alerts", True),
        ("*.alerts", "eu.news", False),
    ],
)
def test_topic_patterns_match_token_by_token(pattern: str, topic: str, matches: bool) -> None:
    assert topic_matches(tuple(pattern.split(".")), topic) is matches


def test_rules_allow_per_member_and_nothing_else() -> None:
    acl = parse_acl(
        """
        [[rule]]
        nodes = ["127.0.0.1:7000", "127.0.0.2:*"]
        publish = ["sensors.>"]
        [[rule]]
        nodes = ["*"]
        subscribe = ["news"]
        """,
        "acl.toml",
    )
    from pubmesh.net.address import node_id

    sensor, other_port, stranger = (
        node_id("127.0.0.1", 7000),
        node_id("127.0.0.2", 9),
        node_id("127.0.0.3", 7000),
    )
    assert acl.may_publish(sensor, "sensors.t1") and acl.may_publish(other_port, "sensors.x.y")
    assert not acl.may_publish(stranger, "sensors.t1")
    assert not acl.may_publish(sensor, "news")
    assert all(acl.may_subscribe(n, "news") for n in (sensor, other_port, stranger))
    assert not acl.may_subscribe(sensor, "sensors.t1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rule", "acl.toml: not TOML"),
        ("", "acl.toml: no [[rule]]"),
        ("[other]\nx = 1", "acl.toml: unknown key 'other'"),
        ('[[rule]]\nnodes = ["*"]\npublsh = ["a"]', "acl.toml: rule 1: unknown key 'publsh'"),
        ('[[rule]]\nnodes = []\npublish = ["a"]', "acl.toml: rule 1: nodes is empty"),
        ('[[rule]]\nnodes = ["*"]', "acl.toml: rule 1: allows nothing"),
        ('[[rule]]\nnodes = ["*"]\npublish = ["a..b"]', "has an empty token"),
        ('[[rule]]\nnodes = ["*"]\npublish = [">.a"]', "'>' may only be the last token"),
        ('[[rule]]\nnodes = ["*"]\npublish = "a"', "publish must be a list of strings"),
        ('[[rule]]\nnodes = ["host-without-port"]\npublish = ["a"]', "rule 1: node"),
    ],
)
def test_a_broken_acl_is_one_line_naming_the_file_and_rule(text: str, message: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_acl(text, "acl.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_refuses_a_broken_acl_or_one_without_identities_in_one_line(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "acl.toml"
    bad.write_text('[[rule]]\nnodes = ["*"]\npublish = ["a..b"]\n')
    init_authority(tmp_path / "ca")
    address = f"127.0.0.1:{free_port()}"
    issue(tmp_path / "ca", address, tmp_path / "n")
    cases = [
        (["--identity", str(tmp_path / "n"), "--acl", str(bad)], "has an empty token"),
        (["--identity", str(tmp_path / "n"), "--acl", str(tmp_path / "none.toml")], "no such"),
        (["--acl", str(bad)], "--acl: permissions rest on signed publications"),
    ]
    for args, expected in cases:
        listen = ["--listen", address]
        proc = subprocess.run(
            [sys.executable, "-m", "pubmesh", "node", "--stack", STACK, *listen, *args],
            capture_output=True,
            text=True,
            env=keyless_env(),
            timeout=60,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, proc.stderr)


def _node(tmp_path: Path, name: str, address: str, acl: Path, contact: str | None) -> NodeProcess:
    args = ["--stack", STACK, "--listen", address, "--identity", str(tmp_path / name)]
    args += ["--acl", str(acl)]
    if contact is not None:
        args += ["--contact", contact]
    return NodeProcess(args, log=tmp_path / f"{name}.log", env=keyless_env())


def test_every_node_enforces_the_acl_on_what_it_sends_receives_and_is_asked(
    tmp_path: Path,
) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    names = ("reader", "writer", "cheater", "insider", "colluder")
    addresses = {name: f"127.0.0.1:{free_port()}" for name in names}
    identities = {name: issue(authority, addresses[name], tmp_path / name) for name in names}
    acl = tmp_path / "acl.toml"
    acl.write_text(
        f"""
        [[rule]]
        nodes = ["*"]
        subscribe = ["news"]
        [[rule]]
        nodes = ["{addresses["writer"]}", "{addresses["colluder"]}"]
        publish = ["news", "secret"]
        [[rule]]
        nodes = ["{addresses["reader"]}", "{addresses["writer"]}"]
        subscribe = ["secret"]
        """
    )
    # the cheater's own copy lets it read the secret topic; nobody else's does
    generous = tmp_path / "generous.toml"
    generous.write_text('[[rule]]\nnodes = ["*"]\nsubscribe = [">"]\npublish = [">"]\n')
    reader = _node(tmp_path, "reader", addresses["reader"], acl, None)
    writer = _node(tmp_path, "writer", addresses["writer"], acl, reader.address)
    cheater = _node(tmp_path, "cheater", addresses["cheater"], generous, reader.address)
    try:
        # what a node is asked to do: refused with the reason, in its own process
        refused = reader.command({"op": "publish", "topic": "news", "payload": "x"})
        assert not refused["ok"] and "may not publish on 'news'" in refused["error"], refused
        refused = cheater.command({"op": "subscribe", "topic": "secret"})
        assert refused["ok"], refused  # its own ACL lets it: it cheats
        for node in (reader, writer):
            assert node.command({"op": "subscribe", "topic": "secret"})["ok"]
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        # the writer's secrets reach the reader, never the cheater: honest nodes do not send
        # them to a member that may not subscribe
        sent: set[int] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            sent.add(writer.command({"op": "publish", "topic": "secret", "payload": "s"})["pub_id"])
            time.sleep(0.2)
            if len(sent & reader.deliveries()) >= 5:
                break
        assert len(sent & reader.deliveries()) >= 5, "the reader did not get the secrets"
        time.sleep(1.0)
        assert not sent & cheater.deliveries(), "the cheater received a secret"
        # the cheater could not even join the secret topic's swarm: honest nodes refuse the
        # swarm messages of a member that may neither publish nor subscribe on their topic
        # now; before, they let it join and withheld every copy from it instead
        refused = sum(
            n.command({"op": "stats"})["stats"]["denied"].get("topic", 0) for n in (reader, writer)
        )
        assert refused >= 1, "no honest node refused the cheater's swarm messages for secret"

        # the insider may not publish on news: its signed publications are dropped at the
        # first hop, and at the neighbour of a colluding member that relays them
        insider = Signer(
            identities["insider"].node,
            signing_key(identities["insider"]),
            credential_of(identities["insider"].certificate, identities["insider"].node),
        )
        copies = []
        for payload in (b"direct", b"relayed"):
            message = Gossip(topic="news", pub_id=insider.new_pub_id(), round=0, payload=payload)
            copies.append((message, Verifier(insider).signature(message)))
        before = reader.mark()
        with insider_link(tmp_path / "insider", insider.node, reader.address) as send:
            send([(copies[0][0], copies[0][1], True)])
        with insider_link(
            tmp_path / "colluder", identities["colluder"].node, reader.address
        ) as send:
            send([(copies[1][0], copies[1][1], True)])
        denied = [
            reader.wait_event(
                lambda r, m=message: (
                    r.get("event") == "net"
                    and r["kind"] == "net.denied"
                    and r["detail"]["pub_id"] == m.pub_id
                ),
                10,
                f"the refusal of {message.payload!r}",
                before,
            )["detail"]
            for message, _signed in copies
        ]
        assert {d["reason"] for d in denied} == {"may-not-publish"}, denied
        assert {d["publisher"] for d in denied} == {addresses["insider"]}, denied
        assert {d["address"] for d in denied} == {addresses["insider"], addresses["colluder"]}
        # the writer's news still flows after them
        news = writer.command({"op": "publish", "topic": "news", "payload": "n"})["pub_id"]
        reader.wait_event(
            lambda r: r.get("event") == "deliver" and r["pub_id"] == news, 10, "news", before
        )
        got = {r["payload"] for r in reader.records[before:] if r.get("event") == "deliver"}
        assert "direct" not in got and "relayed" not in got, got
        assert reader.command({"op": "stats"})["stats"]["denied"]["publish"] == 2
        # the contact's directory is ACL-checked (its state stays bounded): a member asking for the
        # swarm of a topic it may neither publish nor subscribe on is refused and charged
        before_topic = reader.command({"op": "stats"})["stats"]["denied"].get("topic", 0)
        with insider_link(tmp_path / "insider", insider.node, reader.address) as send:
            send([(ContactRequest(topic="payroll"), None, False)])
            send([(ContactRequest(topic="news"), None, False)])  # it may subscribe: fine
            time.sleep(0.5)
        denied = reader.command({"op": "stats"})["stats"]["denied"]
        assert denied.get("topic", 0) - before_topic == 1, denied
    finally:
        for node in (cheater, writer, reader):
            node.stop()


def test_the_shell_in_identity_mode_signs_and_says_what_the_acl_refuses(tmp_path: Path) -> None:
    """The node shell on a terminal, identity mode with an ACL: a publication it may make is
    signed and delivered, one it may not is refused in a line naming the ACL, and ``stats``
    shows the signature counters."""
    init_authority(tmp_path / "ca")
    address = f"127.0.0.1:{free_port()}"
    issue(tmp_path / "ca", address, tmp_path / "me")
    acl = tmp_path / "acl.toml"
    acl.write_text('[[rule]]\nnodes = ["*"]\npublish = ["news"]\nsubscribe = ["news"]\n')
    args = ["--stack", STACK, "--listen", address, "--identity", str(tmp_path / "me")]
    with ShellOnPty([*args, "--acl", str(acl)], env=keyless_env()) as shell:
        shell.read_until(b"pubmesh> ")
        shell.type_line("subscribe news")
        shell.read_until(b"subscribed to news")
        shell.type_line("publish news signed hello")
        shell.read_until(b"hops): signed hello")
        shell.type_line("publish weather rain")
        shell.read_until(f"error: {address} may not publish on 'weather' (the ACL {acl})".encode())
        shell.type_line("subscribe weather")
        shell.read_until(b"may not subscribe on 'weather'")
        shell.type_line("stats --json")
        shell.read_until(b'"forged": {}')
        shell.type_line("quit")
        assert shell.process.wait(15) == 0
