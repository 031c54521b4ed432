"""Signed publications (issue 42, item 3): a forged or altered publication is never delivered,
never forwarded, never suppresses the real one, and is counted and traced with the publisher
it claims (:mod:`pubmesh.net.signing`).

The first tests check the verifier's rules on messages of every stack. The live test runs two
real node processes in identity mode (a subscriber and an honest member) and plays the insider
itself: it holds a valid identity of the cluster (its own), connects to the subscriber over
TLS, and sends forged copies of each kind, then the genuine publication whose id the forgeries
took, signed with the key of the publisher it belongs to (the test issued that identity, so
it can sign as that publisher without running it).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from pubmesh.net.identity import init_authority, issue, load_identity, signing_key
from pubmesh.net.signing import (
    DELIVERED_ENTRY_BYTES,
    DELIVERED_KEPT,
    SIGNATURE_WINDOW,
    Credential,
    Signed,
    Signer,
    Verifier,
    bound_pub_id,
    content_digest,
    credential_of,
    nacl_key,
    sign,
)
from pubmesh.net.transport import SIGNATURE, TAG_SIGNED
from pubmesh.proto.brokertree.messages import Pub as BrokerPub
from pubmesh.proto.chord.messages import Publication as ChordPublication
from pubmesh.proto.clique.messages import Pub as CliquePub
from pubmesh.proto.core import MESSAGE_TAGS, Message
from pubmesh.proto.gossip.plumtree import Gossip
from pubmesh.proto.skipring.messages import PublishNew
from support.identity import free_port, identity_node
from support.insider import insider_link

pytestmark = pytest.mark.xdist_group("net_signing")


def _member(tmp_path: Path, authority: Path, name: str) -> tuple[Signer, Credential]:
    address = f"127.0.0.1:{free_port()}"
    identity = issue(authority, address, tmp_path / name)
    credential = credential_of(identity.certificate, identity.node)
    return Signer(identity.node, signing_key(identity), credential), credential


def _copies(pub_id: int, publisher: int, payload: bytes) -> list[Message]:
    """One payload message of each stack, carrying the same publication."""
    return [
        Gossip(topic="news", pub_id=pub_id, round=0, payload=payload),
        PublishNew(topic="news", pub_id=pub_id, publisher=publisher, payload=payload, hops=1),
        ChordPublication(
            topic="news", pub_id=pub_id, payload=payload, attributes={"x": 1}, end=0, hops=0
        ),
        CliquePub(
            topic="news", rid=1, prev=0, sink=0, direct=True, hop=0, pub_id=pub_id,
            payload=payload, seen=frozenset(), hops=0,
        ),
        BrokerPub(
            sid=1, n=0, origin=(publisher, (0.0, 0)), pub_id=pub_id, topic="news",
            attributes={"x": 1}, payload=payload, vect=(), hops=0, tags=(),
        ),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("signing")
    init_authority(tmp / "ca")
    publisher, credential = _member(tmp, tmp / "ca", "publisher")
    insider, insider_credential = _member(tmp, tmp / "ca", "insider")
    return {
        "publisher": publisher,
        "credential": credential,
        "insider": insider,
        "insider_credential": insider_credential,
    }


@pytest.mark.parametrize(
    "index", range(5), ids=["gossip", "skipring", "chord", "clique", "brokertree"]
)
def test_a_signed_copy_passes_and_every_forgery_is_refused_with_its_reason(
    members: dict[str, Any], index: int
) -> None:
    publisher: Signer = members["publisher"]
    insider: Signer = members["insider"]
    pub_id = publisher.new_pub_id()
    genuine = _copies(pub_id, publisher.node, b"genuine")[index]
    signed = Verifier(publisher).signature(genuine)
    assert signed is not None and signed.publisher == publisher.node
    assert bound_pub_id(publisher.node, signed.nonce) == pub_id

    receiver = Verifier(insider, started=0.0)  # a node up before the publication
    # an altered payload under the publisher's signature
    altered = _copies(pub_id, publisher.node, b"altered")[index]
    assert receiver.check(altered, signed) == "bad-signature"
    # no signature at all
    assert receiver.check(genuine, None) == "unsigned"
    # the publisher's certificate missing, or another member's in its place
    t = signed.t_us
    assert receiver.check(genuine, replace(signed, credential=None)) == "unknown-publisher"
    wrong = replace(signed, credential=members["insider_credential"])
    assert receiver.check(genuine, wrong) == "unknown-publisher"
    # the insider signs its own copy, validly, under the publisher's id
    own = Signed(
        insider.node,
        signed.nonce,
        t,
        sign(insider._key, altered, insider.node, t),
        members["insider_credential"],
    )
    assert receiver.check(altered, own) == "id-not-bound"
    # the insider signs as the publisher: not the publisher's key
    posing = replace(signed, value=sign(insider._key, altered, publisher.node, t))
    assert receiver.check(altered, posing) == "bad-signature"
    # the genuine signature with another time: the time is signed too
    assert receiver.check(genuine, replace(signed, t_us=t + 1)) == "bad-signature"
    # none of the forgeries took the id: the genuine copy still passes, and is kept to forward
    assert receiver.check(genuine, signed) is None
    assert receiver.signature(genuine) == signed
    # and its duplicates pass too
    assert receiver.check(_copies(pub_id, publisher.node, b"genuine")[index], signed) is None


@pytest.mark.parametrize(
    "index", range(5), ids=["gossip", "skipring", "chord", "clique", "brokertree"]
)
def test_a_copy_out_of_its_window_or_its_certificate_period_is_refused(
    members: dict[str, Any], index: int
) -> None:
    """Fresh signatures and certificates checked at every use (issue 58, items 3 and 4): the
    signed time must be within the window of the receiver's clock and after its start, and
    the publisher's certificate valid now and when it signed, cached or not."""
    publisher: Signer = members["publisher"]
    pub_id = publisher.new_pub_id()
    copy = _copies(pub_id, publisher.node, b"p")[index]
    signed = Verifier(publisher).signature(copy)
    assert signed is not None
    t = signed.at

    def check(now: float, started: float = 0.0, credential: Credential | None = None) -> Any:
        receiver = Verifier(members["insider"], started=started, clock=lambda: now)
        return receiver.check(copy, replace(signed, credential=credential or signed.credential))

    assert check(t + SIGNATURE_WINDOW - 1) is None
    assert check(t + SIGNATURE_WINDOW + 1) == "stale"
    assert check(t - SIGNATURE_WINDOW - 1) == "future"
    assert check(t + 1, started=t + 0.5) == "stale", "signed before the receiver started"
    credential = members["credential"]
    assert check(credential.not_after + 1) == "expired", "the cached certificate ran out"
    lapsed = replace(credential, not_after=t - 1)  # signed after its certificate ran out
    assert check(t - 2, credential=lapsed) == "expired"
    assert check(credential.not_before - 1) == "expired", "not valid yet"


def test_a_publication_is_delivered_once_and_the_filter_stays_bounded(
    members: dict[str, Any],
) -> None:
    """Within the window the runtime delivers a publication once (a replay the stack's
    duplicate filter forgot is caught here); past DELIVERED_KEPT ids in one window the oldest
    is forgotten and every copy signed no later than it is refused from then on."""
    publisher: Signer = members["publisher"]
    now = time.time()
    receiver = Verifier(members["insider"], started=0.0, clock=lambda: now)
    pub_id = publisher.new_pub_id()
    copy = _copies(pub_id, publisher.node, b"p")[0]
    signed = Verifier(publisher).signature(copy)
    assert signed is not None and receiver.check(copy, signed) is None
    assert receiver.first_delivery(pub_id) and not receiver.first_delivery(pub_id)
    for other in range(1, DELIVERED_KEPT + 1):
        assert receiver.first_delivery(other)
    assert receiver.held_bytes() == DELIVERED_KEPT * DELIVERED_ENTRY_BYTES
    assert receiver.first_delivery(pub_id), "forgotten: the filter is bounded"
    receiver.kept.clear()  # not a duplicate of a copy it verified: checked in full
    assert receiver.check(copy, signed) == "stale", "but never delivered again: refused"


def test_a_skipring_copy_naming_another_publisher_is_refused(members: dict[str, Any]) -> None:
    publisher: Signer = members["publisher"]
    pub_id = publisher.new_pub_id()
    message = PublishNew(topic="news", pub_id=pub_id, publisher=7, payload=b"x", hops=1)
    signed = Verifier(publisher).signature(message)
    assert Verifier(members["insider"], started=0.0).check(message, signed) == "publisher-mismatch"


def test_only_the_publishers_own_publications_are_signed(members: dict[str, Any]) -> None:
    publisher: Signer = members["publisher"]
    verifier = Verifier(publisher)
    # an id this node did not draw (another's publication it never verified): no signature
    assert verifier.signature(Gossip(topic="t", pub_id=12345, round=0, payload=b"")) is None
    mine = publisher.new_pub_id()
    assert verifier.signature(Gossip(topic="t", pub_id=mine, round=0, payload=b"")) is not None


# ------------------------------------------------------------------------------ live insider


def test_an_insider_cannot_forge_alter_or_suppress_a_publication(tmp_path: Path) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    subscriber = identity_node(tmp_path, authority, "subscriber")
    member = identity_node(tmp_path, authority, "member", subscriber)
    publisher, _credential = _member(tmp_path, authority, "publisher")
    insider, insider_credential = _member(tmp_path, authority, "insider")
    try:
        for node in (subscriber, member):
            assert node.command({"op": "subscribe", "topic": "news"})["ok"]
        # honest members' signed publications flow both ways
        sent: set[int] = set()
        deadline = time.monotonic() + 20
        while not (sent & subscriber.deliveries()) and time.monotonic() < deadline:
            sent.add(member.command({"op": "publish", "topic": "news", "payload": "ok"})["pub_id"])
            time.sleep(0.2)
        assert sent & subscriber.deliveries(), "no signed publication delivered"
        refused = subscriber.command(
            {"op": "publish", "topic": "news", "payload": "x", "pub_id": 5}
        )
        assert not refused["ok"] and "signed" in refused["error"], refused

        # the genuine publication the forgeries will try to take, signed by its publisher
        pub_id = publisher.new_pub_id()
        genuine_msg = Gossip(topic="news", pub_id=pub_id, round=0, payload=b"genuine")
        genuine = Verifier(publisher).signature(genuine_msg)
        assert genuine is not None
        forged_msg = Gossip(topic="news", pub_id=pub_id, round=0, payload=b"forged")
        own_id = insider.new_pub_id()
        own_msg = Gossip(topic="news", pub_id=own_id, round=0, payload=b"insider's own")
        own = Verifier(insider).signature(own_msg)
        assert own is not None
        t_us = genuine.t_us
        taken = Signed(
            insider.node, own.nonce, t_us, sign(insider._key, forged_msg, insider.node, t_us), None
        )
        unbound = Gossip(topic="news", pub_id=bound_pub_id(publisher.node, b"\0" * 8) ^ 1,
                         round=0, payload=b"forged")  # fmt: skip
        posing = replace(genuine, value=sign(insider._key, forged_msg, publisher.node, t_us))
        wrong_cert = replace(genuine, credential=insider_credential)
        reused = genuine
        taken = replace(taken, credential=insider_credential)
        before = subscriber.mark()
        with insider_link(tmp_path / "insider", insider.node, subscriber.address) as send:
            send(
                [
                    # 1. no signature: unsigned
                    (forged_msg, None, False),
                    # 2. the insider's certificate offered as the publisher's: unknown-publisher
                    (forged_msg, wrong_cert, True),
                    # 3. as the publisher, with its certificate, signed by the insider
                    (forged_msg, posing, True),
                    # 4. the genuine signature over an altered payload (certificate known now)
                    (forged_msg, reused, False),
                    # 5. the insider's own valid signature under the publisher's id
                    (forged_msg, taken, True),
                    # 6. an id bound to nobody it names
                    (unbound, reused, False),
                    # 7. the insider's own honest publication: delivered
                    (own_msg, own, False),
                    # 8. the genuine publication, after all the forgeries that took its id
                    (genuine_msg, genuine, False),
                ]
            )
            delivered = subscriber.wait_event(
                lambda r: r.get("event") == "deliver" and r["pub_id"] == pub_id,
                15,
                "the genuine publication",
                before,
            )
        assert delivered["payload"] == "genuine", delivered
        deliveries = [r for r in subscriber.records[before:] if r.get("event") == "deliver"]
        assert sorted(r["payload"] for r in deliveries) == ["genuine", "insider's own"], deliveries
        stats = subscriber.command({"op": "stats"})["stats"]
        assert stats["forged"] == {
            "unsigned": 1,
            "unknown-publisher": 1,
            "bad-signature": 2,
            "id-not-bound": 2,
        }, stats["forged"]
        forged = [
            r["detail"]
            for r in subscriber.records[before:]
            if r.get("event") == "net" and r["kind"] == "net.forged"
        ]
        assert {d["reason"] for d in forged} == set(stats["forged"]), forged
        claims = {d["claimed_publisher"] for d in forged if d["reason"] != "unsigned"}
        assert load_identity(tmp_path / "publisher").address in claims, forged
        # never forwarded: the member got the genuine copy and the insider's own from the
        # subscriber, and no forgery (it refused none: none reached it)
        member.wait_event(
            lambda r: r.get("event") == "deliver" and r["pub_id"] == pub_id, 15, "the forward"
        )
        member_payloads = [r["payload"] for r in member.records if r.get("event") == "deliver"]
        assert "forged" not in member_payloads, member_payloads
        assert member.command({"op": "stats"})["stats"]["forged"] == {}
    finally:
        member.stop()
        subscriber.stop()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00" * 4, "truncated-frame"),
        (SIGNATURE.pack(1, b"n" * 8, 0, b"s" * 64, 5000) + b"x" * 5000, "oversized-certificate"),
        (SIGNATURE.pack(1, b"n" * 8, 0, b"s" * 64, 300) + b"x" * 20, "truncated-frame"),
    ],
    ids=["short-block", "huge-certificate", "certificate-cut-short"],
)
def test_a_malformed_signature_block_closes_that_link_only(
    tmp_path: Path, payload: bytes, reason: str
) -> None:
    authority = tmp_path / "ca"
    init_authority(authority)
    node = identity_node(tmp_path, authority, "node")
    insider, _credential = _member(tmp_path, authority, "insider")
    try:
        before = node.mark()
        with insider_link(tmp_path / "insider", insider.node, node.address) as send:
            send([(MESSAGE_TAGS[Gossip] | TAG_SIGNED, payload)])
            rejected = node.wait_event(
                lambda r: r.get("event") == "net" and r["kind"] == "net.rejected",
                10,
                "the refusal",
                before,
            )
        assert rejected["detail"]["reason"] == reason, rejected
        # and it keeps serving
        assert node.command({"op": "subscribe", "topic": "t"})["ok"]
        pub_id = node.command({"op": "publish", "topic": "t", "payload": "x"})["pub_id"]
        node.wait_event(lambda r: r.get("event") == "deliver" and r["pub_id"] == pub_id, 10)
    finally:
        node.stop()


def test_a_private_key_reads_back_as_the_one_that_signs(tmp_path: Path) -> None:
    """The identity's key file is the signing key (the certificate's public key)."""
    init_authority(tmp_path / "ca")
    identity = issue(tmp_path / "ca", "127.0.0.1:7001", tmp_path / "n")
    key = signing_key(identity)
    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    assert key.public_key().public_bytes(*raw) == identity.certificate.public_key().public_bytes(
        *raw
    )
    # libsodium signs with it what OpenSSL (the certificate's key) verifies, and back
    message = Gossip(topic="t", pub_id=1, round=0, payload=b"p")
    t_us = int(time.time() * 1e6)
    signed_bytes = (
        b"pubmesh publication\0" + t_us.to_bytes(8, "big") + content_digest(message, identity.node)
    )
    value = sign(nacl_key(key), message, identity.node, t_us)
    identity.certificate.public_key().verify(value, signed_bytes)
    other = key.sign(signed_bytes)
    credential = credential_of(identity.certificate, identity.node)
    assert (
        Verifier(Signer(identity.node, key, credential)).check(
            message, Signed(identity.node, b"", t_us, other, credential)
        )
        == "id-not-bound"
    )  # the signature passes; the id 1 is bound to nobody
    credential.key.verify(signed_bytes, other)
