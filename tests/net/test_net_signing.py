"""Signed publications: a forged or altered publication is never delivered,
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

import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from pubmesh.net.framing import SIGNATURE, TAG_SIGNED
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
    leaf_hash,
    merkle_tree,
    nacl_key,
    sign,
    signed_bytes,
)
from pubmesh.proto.brokertree.messages import Pub as BrokerPub
from pubmesh.proto.chord.messages import Publication as ChordPublication
from pubmesh.proto.clique.messages import Pub as CliquePub
from pubmesh.proto.core import MESSAGE_TAGS, Message
from pubmesh.proto.gossip.plumtree import Gossip
from pubmesh.proto.skipring.messages import PublishNew
from support.identity import api_pair, free_port, identity_node
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
    """Fresh signatures and certificates checked at every use (no replay, no expired signer): the
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


def _block(size: int, index: int, hashes: int, cert_size: int) -> bytes:
    """A signature block as a frame carries it (framing docstring), with junk values."""
    return SIGNATURE.pack(1, b"n" * 8, 0, b"s" * 64, size, index, hashes, cert_size)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\x00" * 4, "truncated-frame"),
        (_block(1, 0, 0, 5000) + b"x" * 5000, "oversized-certificate"),
        (_block(1, 0, 0, 300) + b"x" * 20, "truncated-frame"),
        (_block(1, 0, 9, 0) + b"h" * 9 * 32, "oversized-batch"),
        (_block(257, 0, 1, 0) + b"h" * 32, "oversized-batch"),
        (_block(4, 1, 2, 0) + b"h" * 40, "truncated-frame"),
    ],
    ids=[
        "short-block",
        "huge-certificate",
        "certificate-cut-short",
        "path-too-long",
        "batch-too-large",
        "path-cut-short",
    ],
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
    # a batch of one: its root is the leaf, SHA-256 over 0x00 and the content digest
    root = hashlib.sha256(b"\0" + content_digest(message, identity.node)).digest()
    signed_bytes = b"pubmesh publication batch\0" + t_us.to_bytes(8, "big") + b"\0\1" + root
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


# ------------------------------------------------------------ batches (amortized signatures)


def _batch(signer: Signer, payloads: list[bytes]) -> list[tuple[Gossip, Signed]]:
    """``signer``'s publications of ``payloads`` signed as one batch (one Merkle root)."""
    messages = [
        Gossip(topic="news", pub_id=signer.new_pub_id(), round=0, payload=p) for p in payloads
    ]
    signed = signer.sign_batch(list(messages))
    assert [s.index for s, _ in signed] == list(range(len(payloads)))
    return [(m, s) for m, (s, _digest) in zip(messages, signed, strict=True)]


def test_a_batch_is_one_signature_and_each_copy_is_held_to_its_own_leaf(
    members: dict[str, Any],
) -> None:
    """Merkle batches: the publisher signs five publications with one signature; a node
    checks that signature once for the five, yet every copy is held to its own leaf, its own
    place and its own path: a forged path, an altered payload or a misplaced leaf is refused
    even once the batch's root is known to be good."""
    publisher: Signer = members["publisher"]
    before = publisher.signatures
    batch = _batch(publisher, [b"a", b"b", b"c", b"d", b"e"])
    assert publisher.signatures == before + 1
    assert len({s.value for _, s in batch}) == 1 and {s.size for _, s in batch} == {5}
    receiver = Verifier(members["insider"], started=0.0)
    for message, signed in batch:
        assert receiver.check(message, signed) is None
    assert receiver.checks == 1, "one Ed25519 check for the batch"

    fresh = Verifier(members["insider"], started=0.0)  # nothing known yet, then the root
    (m0, s0), (m1, s1), (m2, s2), (m3, s3), (m4, s4) = batch
    assert fresh.check(m0, s0) is None and fresh.checks == 1
    # another leaf's path under this copy: another root, whose signature does not verify
    assert fresh.check(m1, replace(s1, path=s2.path, index=s2.index)) == "bad-signature"
    # the right path, the wrong place
    assert fresh.check(m1, replace(s1, index=2)) == "bad-signature"
    # a path of the wrong length for its place, or a place outside the batch: no check spent
    checks = fresh.checks
    assert fresh.check(m1, replace(s1, path=s1.path + s1.path[:32])) == "bad-path"
    assert fresh.check(m1, replace(s1, index=5)) == "bad-path"
    assert fresh.check(m4, replace(s4, size=4)) == "bad-path"
    assert fresh.check(m1, replace(s1, path=s1.path[:-32])) == "bad-path"
    assert fresh.checks == checks
    # an altered payload under a genuine path, the root already verified: another leaf
    altered = Gossip(topic="news", pub_id=m2.pub_id, round=0, payload=b"altered")
    assert fresh.check(altered, s2) == "bad-signature"
    # none of it took an id: the genuine copies pass, with no further check
    checks = fresh.checks
    for message, signed in ((m1, s1), (m2, s2), (m3, s3), (m4, s4)):
        assert fresh.check(message, signed) is None
    assert fresh.checks == checks


def test_a_root_signed_by_one_member_never_vouches_for_anothers_publication(
    members: dict[str, Any],
) -> None:
    """An insider signs a batch of its own that covers a publication under the publisher's
    id: it cannot bind that id to itself, and naming the publisher instead puts the root under
    the publisher's key, which did not sign it, whether or not this node knows the insider's
    root already."""
    publisher: Signer = members["publisher"]
    insider: Signer = members["insider"]
    genuine = _batch(publisher, [b"genuine"])[0]
    receiver = Verifier(Signer(0, _fresh_key(), members["credential"]), started=0.0)
    # the insider's batch: one honest publication of its own, and the publisher's id
    own = Gossip(topic="news", pub_id=insider.new_pub_id(), round=0, payload=b"own")
    taken = Gossip(topic="news", pub_id=genuine[0].pub_id, round=0, payload=b"taken")
    digests = [content_digest(own, insider.node), content_digest(taken, insider.node)]
    root, paths = merkle_tree([leaf_hash(d) for d in digests])
    signed_own = insider.sign_batch([own])[0][0]  # draws nothing new: the id is the insider's
    t_us = signed_own.t_us
    value = bytes(insider._key.sign(signed_bytes(root, 2, t_us)).signature)
    credential = members["insider_credential"]
    as_itself = Signed(insider.node, signed_own.nonce, t_us, value, credential, 2, 1, paths[1])
    assert receiver.check(taken, as_itself) == "id-not-bound"
    as_publisher = Signed(
        publisher.node, genuine[1].nonce, t_us, value, members["credential"], 2, 1, paths[1]
    )
    # the insider's own copy of that batch passes (it is the insider's), so its root is known
    own_copy = Signed(insider.node, signed_own.nonce, t_us, value, credential, 2, 0, paths[0])
    assert receiver.check(own, own_copy) is None
    assert receiver.check(taken, as_publisher) == "bad-signature"
    # and the publisher's own copy still passes
    assert receiver.check(*genuine) is None


def _fresh_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519.Ed25519PrivateKey.generate()


def test_a_batch_split_across_links_is_checked_once_and_forgeries_among_it_refused(
    tmp_path: Path,
) -> None:
    """A publisher's batch of four reaches a node over two members' links, two copies each,
    after forgeries of its copies on the first link (another copy's path, an altered payload
    under a genuine path, a place outside the batch): the four genuine copies are delivered
    for one Ed25519 check, the forgeries refused, counted and never delivered."""
    authority = tmp_path / "ca"
    init_authority(authority)
    subscriber = identity_node(tmp_path, authority, "subscriber")
    publisher, _credential = _member(tmp_path, authority, "publisher")
    insider, _ = _member(tmp_path, authority, "insider")
    relay, _ = _member(tmp_path, authority, "relay")
    try:
        assert subscriber.command({"op": "subscribe", "topic": "news"})["ok"]
        batch = _batch(publisher, [b"p0", b"p1", b"p2", b"p3"])
        (m0, s0), (m1, s1), (m2, s2), (m3, s3) = batch
        altered = Gossip(topic="news", pub_id=m2.pub_id, round=0, payload=b"forged")
        before = subscriber.mark()
        checks_before = subscriber.command({"op": "stats"})["stats"]["signature_checks"]
        with (
            insider_link(tmp_path / "insider", insider.node, subscriber.address) as first,
            insider_link(tmp_path / "relay", relay.node, subscriber.address) as second,
        ):
            first(
                [
                    (m3, replace(s3, path=s0.path, index=0), True),  # another copy's path
                    (altered, s2, False),  # an altered payload under its genuine path
                    (m1, replace(s1, index=4), False),  # outside the batch
                    (m0, s0, False),
                    (m1, s1, False),
                ]
            )
            # the forgeries are judged before any genuine copy of theirs arrives on the other
            # link (a copy identical in content to a verified one is a duplicate, not a forgery)
            for message, _signed in batch[:2]:
                subscriber.wait_event(
                    lambda r, i=message.pub_id: r.get("event") == "deliver" and r["pub_id"] == i,
                    15,
                    f"publication {message.pub_id}",
                    before,
                )
            second([(m2, s2, True), (m3, s3, False)])
            for message, _signed in batch[2:]:
                subscriber.wait_event(
                    lambda r, i=message.pub_id: r.get("event") == "deliver" and r["pub_id"] == i,
                    15,
                    f"publication {message.pub_id}",
                    before,
                )
        deliveries = [r for r in subscriber.records[before:] if r.get("event") == "deliver"]
        assert sorted(r["payload"] for r in deliveries) == ["p0", "p1", "p2", "p3"], deliveries
        stats = subscriber.command({"op": "stats"})["stats"]
        forged = [r for r in subscriber.records[before:] if r.get("kind") == "net.forged"]
        assert stats["forged"] == {"bad-signature": 2, "bad-path": 1}, (stats["forged"], forged)
        # the batch's root once, and each forgery whose path led to another root once
        assert stats["signature_checks"] - checks_before == 3, stats["signature_checks"]
    finally:
        subscriber.stop()


def test_a_burst_of_own_publications_goes_out_as_one_batch(tmp_path: Path) -> None:
    """The publishing side: the publications a node makes in one loop turn are signed
    together (one signature for the burst), a lone one alone, and every copy arrives and
    verifies, for one check of each signature at the receiver. Two nodes of the Python API,
    over real TLS links."""
    import asyncio

    async def main() -> None:
        async with api_pair(tmp_path) as (contact, member):
            news = await contact.subscribe("news")
            await member.subscribe("news")
            got: set[int] = set()
            for _ in range(50):  # until the two are linked and the subscription is known
                await member.publish("news", b"probe")
                try:
                    got.add((await news.get(timeout=0.2)).pub_id)
                except TimeoutError:
                    continue
                break
            assert got, "no signed publication delivered"
            await asyncio.sleep(0.5)  # the probes' stragglers are checked before the count
            signer, verifier = member.runtime.verifier, contact.runtime.verifier
            assert signer is not None and verifier is not None
            made, checks = signer.signer.signatures, verifier.checks
            # ten publications in one loop turn, then a lone one
            receipts = await asyncio.gather(
                *(member.publish("news", f"b{i}".encode()) for i in range(10))
            )
            assert signer.signer.signatures == made + 1, "one signature for the burst"
            lone = await member.publish("news", b"lone")
            assert signer.signer.signatures == made + 2
            ids = {r.pub_id for r in receipts} | {lone.pub_id}
            while ids - got:
                got.add((await news.get(timeout=10)).pub_id)
            assert verifier.checks == checks + 2, "one check a batch at the receiver"
            assert not contact.runtime.admission.forged

    asyncio.run(asyncio.wait_for(main(), 60))
