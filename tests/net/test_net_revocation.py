"""Revocation that reaches every copy: ``pubmesh ca revoke`` signs a list,
one node reads it, and every node of the cluster closes the revoked member's links, refuses
its handshakes and refuses its publications, whoever relays them (pubmesh.net.revocation).

Before, expiry was the only revocation: a member's certificate stayed good until it ran out.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pubmesh.net.identity import init_authority, issue, load_authority, load_identity, signing_key
from pubmesh.net.revocation import LIST_FILE, encode, parse
from pubmesh.net.signing import Signer, Verifier, credential_of
from pubmesh.proto.gossip.plumtree import Gossip
from support.identity import free_port, identity_node, keyless_env
from support.insider import insider_link
from support.netnode import publish_until_delivered

pytestmark = pytest.mark.xdist_group("net_revocation")


def _ca(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", "ca", *args],
        capture_output=True, text=True, timeout=60, env=keyless_env(),
    )  # fmt: skip


def test_a_list_is_taken_only_from_the_authority_and_only_when_newer(tmp_path: Path) -> None:
    init_authority(tmp_path / "ca")
    init_authority(tmp_path / "other")
    member = issue(tmp_path / "ca", "127.0.0.1:7001", tmp_path / "m")
    authority, key = load_authority(tmp_path / "ca")
    _other, other_key = load_authority(tmp_path / "other")
    entries = [("127.0.0.1:7001", member.certificate.serial_number, 1.0)]
    listed = parse(encode(entries, 10.0, key), authority)
    assert listed.revokes(member.certificate) and listed.issued == 10.0
    with pytest.raises(ValueError, match="not signed by this cluster's authority"):
        parse(encode(entries, 10.0, other_key), authority)
    tampered = bytearray(encode(entries, 10.0, key))
    tampered[-3] ^= 1
    with pytest.raises(ValueError, match="not signed"):
        parse(bytes(tampered), authority)
    # the CLI: one line, exit 2, for an address the authority never issued a certificate to
    done = _ca("revoke", str(tmp_path / "ca"), "127.0.0.1:7999")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no unexpired certificate issued for it" in done.stderr
    done = _ca("revoke", str(tmp_path / "ca"), "127.0.0.1:7001")
    assert done.returncode == 0, done.stderr
    assert "1 certificate(s) revoked" in done.stdout
    first = parse((tmp_path / "ca" / LIST_FILE).read_bytes(), authority)
    assert first.revokes(member.certificate)
    # a certificate issued for the address afterwards is not on it
    again = issue(tmp_path / "ca", "127.0.0.1:7001", tmp_path / "m2")
    assert not first.revokes(again.certificate)
    # a torn or planted record is named with its line, and the list is left as it was
    with (tmp_path / "ca" / "issued.jsonl").open("a") as record:
        record.write('{"serial": "12", "address": \n')
    done = _ca("revoke", str(tmp_path / "ca"), "127.0.0.1:7001")
    assert done.returncode == 2 and "issued.jsonl: line 3:" in done.stderr, done.stderr
    assert parse((tmp_path / "ca" / LIST_FILE).read_bytes(), authority) == first


def test_one_node_reads_the_list_and_the_whole_cluster_puts_the_member_out(
    tmp_path: Path,
) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    old = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "old")
    assert _ca("revoke", str(authority), old.address).returncode == 0
    listed = ["--revocations", str(authority / LIST_FILE)]
    first = identity_node(tmp_path, authority, "first", extra=listed)
    second = identity_node(tmp_path, authority, "second", first)
    third = identity_node(tmp_path, authority, "third", first, ["--metrics", "127.0.0.1:0"])
    member = identity_node(tmp_path, authority, "member", first)
    relay = issue(authority, f"127.0.0.1:{free_port()}", tmp_path / "relay")
    honest = [first, second, third]
    try:
        for node in (*honest, member):
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        publish_until_delivered(member, honest, "news", 30)
        address = load_identity(tmp_path / "member").address
        done = _ca("revoke", str(authority), address)
        assert done.returncode == 0, done.stderr

        # the first node reads the changed file within a second or two and sends the list on
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            views = [
                set(n.command({"op": "neighbors"})["neighbors"].get("news", [])) for n in honest
            ]
            if not any(member.node_id in view for view in views):
                break
            time.sleep(0.3)
        assert not any(member.node_id in view for view in views), views
        for node in honest:
            events = node.matching(
                lambda r: r.get("event") == "net" and r["kind"] == "net.revocations"
            )
            stats = node.command({"op": "stats"})["stats"]
            assert node is not first or events, "the first node did not read the list"
            assert node is first or not events, "only the first node reads a file"
            assert stats["transport"]["connections"] >= 1

        # a node that got the list over the cluster shows its size to an operator (two
        # certificates: the old one and the member's)
        # (the list travels link by link: a view without the member does not yet mean that
        # this node has it)
        ready = third.wait_event(lambda r: r.get("event") == "ready", 1, "ready")
        deadline = time.monotonic() + 15
        while True:
            with urllib.request.urlopen(f"http://{ready['metrics']}/metrics", timeout=5) as got:
                scraped = got.read().decode()
            if "pubmesh_revoked_certificates 2.0" in scraped or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "pubmesh_revoked_certificates 2.0" in scraped, scraped[-600:]

        # its publications are refused everywhere, its own and those a member relays
        mark = {id(n): n.mark() for n in honest}
        for _ in range(5):
            member.command({"op": "publish", "topic": "news", "payload": "from the revoked"})
            time.sleep(0.2)
        signer = Signer(
            member.node_id,
            signing_key(load_identity(tmp_path / "member")),
            credential_of(load_identity(tmp_path / "member").certificate, member.node_id),
        )
        message = Gossip(topic="news", pub_id=signer.new_pub_id(), round=0, payload=b"relayed")
        signed = Verifier(signer).signature(message)
        with insider_link(tmp_path / "relay", relay.node, second.address) as send:
            send([(message, signed, True)])
            time.sleep(1.0)
        for node in honest:
            got = [r for r in node.records[mark[id(node)] :] if r.get("event") == "deliver"]
            assert not got, f"{node.address} delivered a revoked member's publication: {got}"
        forged = second.command({"op": "stats"})["stats"]["forged"]
        assert forged.get("revoked") == 1, forged
        # and it cannot come back: its handshakes are refused
        refused: dict[str, Any] = {}
        for node in honest:
            for reason, count in node.command({"op": "stats"})["stats"]["transport"][
                "rejected"
            ].items():
                refused[reason] = refused.get(reason, 0) + count
        assert refused.get("revoked", 0) + refused.get("identity-refused", 0) >= 1, refused
        # the honest members still talk
        publish_until_delivered(second, [first, third], "news", 20)
    finally:
        for node in (member, *honest):
            node.stop()
