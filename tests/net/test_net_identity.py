"""Identities: ``pubmesh ca init`` / ``ca issue`` and the checks a peer's
certificate must pass: from the cluster's authority, within its validity period, naming the
address the peer claims. Real certificates (``cryptography``), the real CLI in subprocesses."""

from __future__ import annotations

import datetime
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from pubmesh.errors import UserError
from pubmesh.net import security
from pubmesh.net.address import node_id
from pubmesh.net.identity import (
    CA_KEY,
    certificate_address,
    check_certificate,
    init_authority,
    issue,
    load_identity,
)
from support.hostile import read_frame
from support.identity import STACK, api_pair, identity_node, keyless_env
from support.netnode import NodeProcess, node_env


def pubmesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        capture_output=True,
        text=True,
        env=node_env(),
        timeout=60,
    )


def test_the_cli_makes_an_authority_and_an_identity_bound_to_an_address(tmp_path: Path) -> None:
    made = pubmesh("ca", "init", str(tmp_path / "ca"))
    assert made.returncode == 0, made.stderr
    issued = pubmesh("ca", "issue", str(tmp_path / "ca"), "127.0.0.1:7000", str(tmp_path / "n"))
    assert issued.returncode == 0, issued.stderr
    assert "127.0.0.1:7000" in issued.stdout
    for key in (tmp_path / "ca" / "ca.key", tmp_path / "n" / "node.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert not (tmp_path / "n" / "ca.key").exists(), "the authority's key stays in its DIR"
    identity = load_identity(tmp_path / "n")
    assert identity.address == "127.0.0.1:7000"
    assert identity.node == node_id("127.0.0.1", 7000)
    assert certificate_address(identity.certificate) == "127.0.0.1:7000"
    assert check_certificate(identity.certificate, identity.authority, "127.0.0.1:7000") is None


def test_a_certificate_is_refused_for_another_address_another_authority_or_out_of_date(
    tmp_path: Path,
) -> None:
    init_authority(tmp_path / "ca")
    init_authority(tmp_path / "other-ca")
    mine = issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "mine")
    foreign = issue(tmp_path / "other-ca", "127.0.0.1:7000", tmp_path / "foreign")
    authority = mine.authority
    assert check_certificate(mine.certificate, authority, "127.0.0.1:7001") == (
        "names 127.0.0.1:7000, not 127.0.0.1:7001"
    )
    assert check_certificate(foreign.certificate, authority, "127.0.0.1:7000") == (
        "is not from this cluster's authority"
    )
    # a certificate the authority signed, with a validity period in the past
    ca_key = serialization.load_pem_private_key((tmp_path / "ca" / CA_KEY).read_bytes(), None)
    assert isinstance(ca_key, ed25519.Ed25519PrivateKey)
    now = datetime.datetime.now(datetime.UTC)
    expired = (
        x509.CertificateBuilder()
        .subject_name(mine.certificate.subject)
        .issuer_name(authority.subject)
        .public_key(mine.certificate.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=30))
        .not_valid_after(now - datetime.timedelta(days=1))
        .add_extension(
            mine.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value,
            critical=False,
        )
        .sign(ca_key, None)
    )
    problem = check_certificate(expired, authority, "127.0.0.1:7000")
    assert problem is not None and problem.startswith("expired on "), problem
    # and load_identity refuses an identity directory holding it, naming the file
    (tmp_path / "mine" / "node.crt").write_bytes(expired.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(UserError, match=r"node\.crt: expired on "):
        load_identity(tmp_path / "mine")


def test_an_identity_with_the_wrong_key_or_authority_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    init_authority(tmp_path / "ca")
    init_authority(tmp_path / "other-ca")
    issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "a")
    issue(tmp_path / "ca", "127.0.0.1:7001", tmp_path / "b")
    (tmp_path / "a" / "node.key").write_bytes((tmp_path / "b" / "node.key").read_bytes())
    with pytest.raises(UserError, match=r"node\.key: not the key of"):
        load_identity(tmp_path / "a")
    (tmp_path / "b" / "ca.crt").write_bytes((tmp_path / "other-ca" / "ca.crt").read_bytes())
    with pytest.raises(UserError, match="is not from this cluster's authority"):
        load_identity(tmp_path / "b")


def test_ca_bad_input_gets_one_line_and_exit_status_2(tmp_path: Path) -> None:
    init_authority(tmp_path / "ca")
    issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "n")
    ca = str(tmp_path / "ca")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could swap the certificate or plant a key there
    cases = [
        (["ca", "init", str(shared)], "writable by others (mode 0777)"),
        (["ca", "issue", ca, "127.0.0.1:7001", str(shared)], "writable by others (mode 0777)"),
        (["ca", "init", ca], "exists; pass --force"),
        (["ca", "issue", ca, "127.0.0.1:7000", str(tmp_path / "n")], "exists; pass --force"),
        (["ca", "issue", ca, "0.0.0.0:7000", str(tmp_path / "m")], "0.0.0.0"),
        (["ca", "issue", ca, "127.0.0.1", str(tmp_path / "m")], "HOST:PORT"),
        (["ca", "issue", str(tmp_path / "none"), "127.0.0.1:1", str(tmp_path / "m")], "ca.crt"),
        (["ca", "issue", ca, "127.0.0.1:1", str(tmp_path / "m"), "--days", "0"], "--days"),
    ]
    for args, needle in cases:
        done = pubmesh(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.returncode, done.stderr)
        assert len(lines) == 1 and needle in lines[0], (args, done.stderr)
    # a refused issue wrote nothing
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())
    assert not any(shared.iterdir()), "nothing was written into the open directory"


def test_keys_are_never_written_through_a_link(tmp_path: Path) -> None:
    """``--force`` replaces a key file by a new one renamed over its name: a symbolic or hard
    link planted there is replaced and its target left as it was."""
    init_authority(tmp_path / "ca")
    issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "n")
    victim = tmp_path / "victim"
    victim.write_text("the other file's contents\n")
    for plant in (Path.symlink_to, Path.hardlink_to):
        key = tmp_path / "n" / "node.key"
        key.unlink()
        plant(key, victim)
        issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "n", force=True)
        assert victim.read_text() == "the other file's contents\n", plant.__name__
        assert not key.is_symlink() and key.stat().st_nlink == 1, plant.__name__
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert load_identity(tmp_path / "n").address == "127.0.0.1:7000"
    # the cluster key the same way (pubmesh key new --force)
    out = tmp_path / "cluster.key"
    out.symlink_to(victim)
    done = pubmesh("key", "new", "--out", str(out), "--force")
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "the other file's contents\n"
    assert not out.is_symlink() and stat.S_IMODE(out.stat().st_mode) == 0o600


# ------------------------------------------------------------------------------------------
# Identity mode on live node processes: TLS 1.3 both ways, addresses bound to certificates
# ------------------------------------------------------------------------------------------


def _tls_client(identity_dir: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_cert_chain(identity_dir / "node.crt", identity_dir / "node.key")
    context.load_verify_locations(identity_dir / "ca.crt")
    return context


def _rejection(node: NodeProcess, remote: str, after: int) -> dict[str, Any]:
    record: dict[str, Any] = node.wait_event(
        lambda r: r.get("kind") == "net.rejected" and r["detail"].get("remote") == remote,
        10,
        f"a rejection of {remote}",
        after,
    )
    return record["detail"]


def test_nodes_with_identities_deliver_over_tls_and_refuse_outsiders_and_impostors(
    tmp_path: Path,
) -> None:
    init_authority(tmp_path / "ca")
    init_authority(tmp_path / "other-ca")
    contact = identity_node(tmp_path, tmp_path / "ca", "contact")
    member = identity_node(tmp_path, tmp_path / "ca", "member", contact)
    outsider = identity_node(tmp_path, tmp_path / "other-ca", "outsider", contact)
    try:
        assert outsider.command({"op": "subscribe", "topic": "t"})["ok"]  # it dials the contact
        # members: TLS links, deliveries both ways
        for node in (contact, member):
            assert node.command({"op": "subscribe", "topic": "t"})["ok"]
        sent: set[int] = set()
        deadline = time.monotonic() + 20
        while not (sent & contact.deliveries()) and time.monotonic() < deadline:
            sent.add(member.command({"op": "publish", "topic": "t", "payload": "x"})["pub_id"])
            time.sleep(0.2)
        assert sent & contact.deliveries(), "no delivery between two members"
        # the outsider (another authority) and the contact refuse each other, each saying why
        seen = outsider.wait_event(
            lambda r: r.get("kind") == "net.rejected", 15, "the outsider's refusal"
        )
        assert seen["detail"]["reason"] == "identity-refused", seen
        assert "is not from this cluster's authority" in seen["detail"]["detail"], seen
        refused = contact.wait_event(
            lambda r: r.get("kind") == "net.rejected" and r["detail"]["reason"] == "tls-failed",
            15,
            "the contact's refusal of the outsider",
        )
        assert "is not from this cluster's authority" in refused["detail"]["detail"], refused
        assert outsider.count(lambda r: r.get("event") == "deliver") == 0

        # an insider (the member's valid identity) claiming the contact's id in its HELLO
        host, port = contact.address.rsplit(":", 1)
        before = contact.mark()
        with (
            socket.create_connection((host, int(port)), timeout=5) as raw,
            _tls_client(tmp_path / "member").wrap_socket(raw) as tls,
        ):
            remote = f"127.0.0.1:{tls.getsockname()[1]}"
            tls.sendall(security.hello(contact.node_id, security.new_nonce()))
            answer = read_frame(tls)
        with pytest.raises(security.AuthError) as caught:
            security.check_refusal(answer)
        assert caught.value.reason == "identity-refused"
        assert f"names {member.address}, not {contact.address}" in caught.value.detail
        detail = _rejection(contact, remote, before)
        assert detail["reason"] == "identity-refused" and detail["peer"] is None, detail
        assert f"claimed to be {contact.address}, unproven" in detail["detail"], detail
    finally:
        for node in (outsider, member, contact):
            node.stop()


def test_identity_mode_bad_input_gets_one_line_and_exit_status_2(tmp_path: Path) -> None:
    init_authority(tmp_path / "ca")
    issue(tmp_path / "ca", "127.0.0.1:7000", tmp_path / "n")
    node = ["node", "--stack", STACK]
    mine = [*node, "--listen", "127.0.0.1:7000", "--identity", str(tmp_path / "n")]
    planted = tmp_path / "planted.list"  # a revocation list nobody's authority signed
    planted.write_bytes(b"\0" * 64 + b'{"v": 1, "issued": 1, "revoked": []}')
    cases = [
        ([*node, "--listen", "127.0.0.1:7001", "--identity", str(tmp_path / "n")], "names"),
        ([*node, "--listen", "127.0.0.1:0", "--identity", str(tmp_path / "none")], "none"),
        ([*mine, "--revocations", str(planted)], "not signed by this cluster's authority"),
        ([*mine, "--revocations", str(tmp_path / "absent.list")], "cannot read the revocation"),
        ([*node, "--listen", "127.0.0.1:0", "--revocations", str(planted)], "identity mode"),
    ]
    for args, needle in cases:
        done = subprocess.run(
            [sys.executable, "-m", "pubmesh", *args],
            capture_output=True,
            text=True,
            env=keyless_env(),
            timeout=60,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 1 and needle in lines[0], (args, done.stderr)


def test_the_python_api_runs_in_identity_mode(tmp_path: Path) -> None:
    import asyncio

    async def main() -> None:
        async with api_pair(tmp_path) as (contact, member):
            news = await contact.subscribe("news")
            await member.subscribe("news")
            sent: set[int] = set()
            got: set[int] = set()
            for _ in range(50):
                sent.add((await member.publish("news", b"over tls")).pub_id)
                try:
                    got.add((await news.get(timeout=0.2)).pub_id)
                except TimeoutError:
                    continue
                break
            assert got and got <= sent, (got, sent)

    asyncio.run(asyncio.wait_for(main(), 60))
