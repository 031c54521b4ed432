"""The brokertree node's rules, one example each (Kazemzadeh & Jacobsen;
docs/protocols/brokertree.md §4-§9), on small clusters over :class:`PoolCluster`, where the test
decides what the network does.

The tree of most tests is the chain3 layout with 8 brokers and δ = 1 (spec §2):

    3 - 0 - 1 - 2 - 7        (4 hangs off 0; 5 and 6 off 1)
        |   |\\
        4   5 6

with clients 8 … 19 on brokers 2, 6, 6, 4, 5, 6, 4, 6, 4, 4, 3, 6 (the generator's draw).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from pubmesh.harness import PoolCluster
from pubmesh.proto.brokertree.messages import Pub
from pubmesh.proto.brokertree.node import BrokerTreeNode
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.core import (
    Deliver,
    NodeId,
    Output,
    Publish,
    Receive,
    Send,
    Subscribe,
    TraceRecord,
    Unsubscribe,
)
from pubmesh.stacks.base import get_stack

SEEDS = range(1, 6)
CHAIN = BrokerTreeParams(brokers=8, delta=1, layout="chain3", core_fanout=2)
#: clients of the chain tree by broker
ON = {3: [18], 4: [11, 14, 16, 17], 5: [12], 6: [9, 10, 13, 15, 19], 2: [8]}


class Recorder:
    """Every output of every node: deliveries in order, trace records, messages by type."""

    def __init__(self) -> None:
        self.delivered: dict[NodeId, list[int]] = defaultdict(list)
        self.records: list[tuple[NodeId, TraceRecord]] = []
        self.sent: dict[str, int] = defaultdict(int)

    def __call__(self, node: NodeId, out: Output) -> None:
        if isinstance(out, Deliver):
            self.delivered[node].append(out.pub_id)
        elif isinstance(out, TraceRecord):
            self.records.append((node, out))
        elif isinstance(out, Send):
            self.sent[type(out.message).__name__] += 1

    def kinds(self, kind: str) -> list[tuple[NodeId, dict[str, Any]]]:
        return [(node, dict(r.detail)) for node, r in self.records if r.kind == kind]


def _cluster(
    seed: int, params: BrokerTreeParams = CHAIN, n: int = 20, fifo: bool = True
) -> tuple[PoolCluster, Recorder]:
    recorder = Recorder()
    cluster = PoolCluster(
        get_stack("brokertree"), n, seed, params=params, fifo=fifo, on_output=recorder
    )
    cluster.quiesce(3.0)
    return cluster, recorder


def _node(cluster: PoolCluster, node: NodeId) -> BrokerTreeNode:
    obj = cluster.nodes[node]
    assert isinstance(obj, BrokerTreeNode)
    return obj


def _replay(test: str, seed: int) -> str:
    return (
        f"seed {seed}; replay: pytest tests/proto/brokertree/test_brokertree_rules.py"
        f" -k '{test} and {seed}'"
    )


def test_the_chain_tree_is_the_one_drawn_in_the_module_doc() -> None:
    cluster, _ = _cluster(1)
    view = _node(cluster, 0).s.view
    assert view is not None
    assert {b: sorted(view.broker_neighbours(b)) for b in range(8)} == {
        0: [1, 3, 4],
        1: [0, 2, 5, 6],
        2: [1, 7],
        3: [0],
        4: [0],
        5: [1],
        6: [1],
        7: [2],
    }
    assert {c: view.attach(c) for c in range(8, 20)} == {
        c: b for b, clients in ON.items() for c in clients
    }


# ------------------------------------------------------------------------------ fault-free
@pytest.mark.parametrize("ack", ["conf", "dack"])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_matching_subscriber_gets_every_publication_once_in_order(
    seed: int, ack: str
) -> None:
    """Kazemzadeh & Jacobsen §2.2: publications follow the from paths of matching tuples; a
    subscriber gets exactly the matching ones, each once, in its publisher's order, over reordering
    links (the sessions resequence)."""
    params = BrokerTreeParams(brokers=8, delta=2, topology_seed=seed, ack=ack)
    cluster, rec = _cluster(seed, params, n=24, fifo=False)
    why = _replay("every_matching", seed)
    limits = {c: 200.0 + 100 * (c % 5) for c in cluster.peers}
    for c in cluster.peers:
        cluster.command(c, Subscribe("t", {"price": {"lt": limits[c]}}))
    cluster.quiesce(5.0)
    assert len(rec.kinds("brokertree.sub_confirmed")) == len(cluster.peers), why
    for b in range(8):
        assert len(_node(cluster, b).s.table) == len(cluster.peers), (b, why)
    sent: dict[int, list[int]] = defaultdict(list)
    price: dict[int, float] = {}
    for i in range(60):
        publisher = cluster.peers[i % len(cluster.peers)]
        price[i] = (i * 37) % 700
        cluster.command(publisher, Publish("t", i, b"", {"price": price[i]}))
        sent[publisher].append(i)
        while cluster.pool and cluster.steps % 3:
            cluster.deliver(cluster.deliverable()[-1])  # newest first: the worst order
    cluster.quiesce(10.0)
    for c in cluster.peers:
        want = sorted(i for i in range(60) if price[i] < limits[c])
        assert sorted(rec.delivered[c]) == want, (c, why)
        for pubs in sent.values():
            mine = [i for i in rec.delivered[c] if i in pubs]
            assert mine == sorted(mine), (c, mine, why)
    for b in range(8):
        assert len(_node(cluster, b).s.queue) == 0, (b, "queue not empty after quiesce", why)
    assert not rec.kinds("brokertree.stalled") and not rec.kinds("brokertree.late"), why


def test_dack_replaces_the_per_message_confirmations_of_publications() -> None:
    """Kazemzadeh & Jacobsen §8: with dack, publications are never confirmed one by one; depth acks
    purge them instead, with fewer messages than the Confs they replace."""
    counts: dict[str, dict[str, int]] = {}
    for ack in ("conf", "dack"):
        params = BrokerTreeParams(brokers=8, delta=2, topology_seed=3, ack=ack)
        cluster, rec = _cluster(3, params, n=24)
        for c in cluster.peers:
            cluster.command(c, Subscribe("t"))
        cluster.quiesce(5.0)
        rec.sent.clear()
        for i in range(400):
            cluster.command(cluster.peers[i % 7], Publish("t", i, b""))
            if i % 40 == 39:
                cluster.quiesce(0.5)
        cluster.quiesce(5.0)
        assert all(len(rec.delivered[c]) == 400 for c in cluster.peers), ack
        counts[ack] = dict(rec.sent)
    assert counts["dack"].get("Conf", 0) == 0, counts
    assert counts["dack"]["Dack"] > 0, counts
    assert counts["conf"].get("Dack", 0) == 0, counts
    # one Conf per Pub transmission, batched per session and event: never more
    assert counts["conf"]["Conf"] <= counts["conf"]["Pub"], counts
    assert counts["dack"]["Dack"] < counts["conf"]["Conf"], counts


# ------------------------------------------------------------------------------ failures
@pytest.mark.parametrize("seed", SEEDS)
def test_delta_adjacent_crashes_are_bypassed(seed: int) -> None:
    """Kazemzadeh & Jacobsen §3.2-3.3, spec §4: with broker 1 down (δ = 1), its neighbours reach
    each other and its clients directly; every later publication arrives once, in order."""
    cluster, rec = _cluster(seed)
    why = _replay("adjacent_crashes", seed)
    subscribers = [18, 11, 12, 9, 8]
    for c in subscribers:
        cluster.command(c, Subscribe("t"))
    cluster.quiesce(5.0)
    cluster.crash(1)
    cluster.quiesce(5.0)
    publishers = [18, 12, 8, 10]
    for i in range(30):
        cluster.command(publishers[i % 4], Publish("t", i, b""))
    cluster.quiesce(10.0)
    for c in subscribers:
        assert sorted(rec.delivered[c]) == list(range(30)), (c, why)
        for k in range(4):  # publisher k's publications are i ≡ k (mod 4)
            mine = [i for i in rec.delivered[c] if i % 4 == k]
            assert mine == sorted(mine), (c, publishers[k], why)
    assert not rec.kinds("brokertree.stalled"), why
    # broker 0 bypasses 1 with direct sessions to 1's other neighbours 2, 5 and 6
    zero = _node(cluster, 0)
    assert {2, 5, 6} <= set(zero.active_peers()), (zero.active_peers(), why)


@pytest.mark.parametrize("seed", SEEDS)
def test_two_false_suspicions_and_delta_minus_one_crashes_lose_nothing(seed: int) -> None:
    """spec §2 "Mistakes", [D2]: a suspected node is only bypassed and keeps forwarding; with
    δ = 2, two broken sessions between live brokers and one crash lose, duplicate and reorder
    nothing, and nothing stalls."""
    params = BrokerTreeParams(brokers=8, delta=2, layout="chain3", core_fanout=2)
    cluster, rec = _cluster(seed, params)
    why = _replay("false_suspicions", seed)
    subscribers = [18, 11, 12, 9, 8]
    for c in subscribers:
        cluster.command(c, Subscribe("t"))
    cluster.quiesce(5.0)
    publishers = [18, 12, 8, 10]
    for i in range(40):
        cluster.command(publishers[i % 4], Publish("t", i, b""))
        if i == 10:
            cluster.break_link(0, 1)
        if i == 20:
            cluster.break_link(1, 2)
        if i == 25:
            cluster.crash(4)
        for _ in range(i % 7):
            if cluster.pool:
                cluster.deliver(cluster.deliverable()[0])
    cluster.quiesce(15.0)
    for c in subscribers:
        got = rec.delivered[c]
        assert len(set(got)) == len(got), (c, got, why)
        for k in range(4):
            mine = [i for i in got if i % 4 == k]
            assert mine == sorted(mine), (c, publishers[k], why)
        # 11's broker 4 crashed for good: it gets nothing after the crash (Kazemzadeh & Jacobsen
        # §13: a client reconnects only to a failed broker's neighbours within δ + 1 = 2 hops, and
        # 4's only neighbour 0 is one, so 11 does too)
        assert sorted(got) == list(range(40)), (c, got, why)
    assert not rec.kinds("brokertree.stalled") and not rec.kinds("brokertree.late"), why


def test_more_than_delta_failures_stall_rather_than_duplicate() -> None:
    """Kazemzadeh & Jacobsen §3.4, §5.5: with δ = 1, brokers 0 and 1 down make a copy from 2's side
    to 3 skip two nodes of three: it is not sent (head-of-line stall, spec §4) and no subscriber
    ever gets a publication twice or out of order."""
    cluster, rec = _cluster(2)
    for c in (18, 11):
        cluster.command(c, Subscribe("t"))
    cluster.quiesce(5.0)
    cluster.crash(0)
    cluster.crash(1)
    cluster.quiesce(5.0)
    for i in range(10):
        cluster.command(8, Publish("t", i, b""))
    cluster.quiesce(10.0)
    for c in (18, 11):
        assert len(set(rec.delivered[c])) == len(rec.delivered[c])
        assert rec.delivered[c] == sorted(rec.delivered[c])
    assert rec.delivered[18] == [] and rec.delivered[11] == []


# ----------------------------------------------------------------- partial confirmation
def test_a_subscription_past_a_large_fragment_is_confirmed_partially_then_recovered() -> None:
    """Kazemzadeh & Jacobsen §3.5 case 2, §4.2.2, Lemma 3: 18 subscribes while 0 and 1 (δ + 1 = 2
    adjacent) are down. Broker 3 has no active connection towards 1: a large fragment
    ⟨⟨0, 1⟩⟩ with lead 3. The confirmation is partial and carries π = ⟨3, seq, (0, 1)⟩,
    which 3 keeps. Once 0 and 1 are back, 3 reaches the fragment, sends it the tuples, and π
    becomes π̄; a publication from beyond the fragment reaches 18 tagged π̄, which clears
    18's π."""
    cluster, rec = _cluster(4)
    cluster.crash(0)
    cluster.crash(1)
    cluster.quiesce(5.0)
    cluster.command(18, Subscribe("t"))
    cluster.quiesce(5.0)
    confirmed = rec.kinds("brokertree.sub_confirmed")
    assert confirmed == [(18, {"topic": "t", "partial": True})], confirmed
    own = _node(cluster, 18).s.own["t"]
    assert len(own.parinfo) == 1
    (pi,) = own.parinfo
    assert pi[0] == 3 and pi[2] == (0, 1) and pi[3] is False, pi
    assert (3, pi[1]) in _node(cluster, 3).s.pt
    for broker in (0, 1):
        cluster.add_node(broker)  # fresh state
    cluster.quiesce(10.0)
    assert _node(cluster, 3).s.pt[(3, pi[1])][3] is True  # π̄ at the lead
    assert any(t.origin[0] == 18 for t in _node(cluster, 1).s.table)
    cluster.command(12, Publish("t", 1, b""))
    cluster.quiesce(5.0)
    assert rec.delivered[18] == [1]
    assert _node(cluster, 18).s.own["t"].parinfo == frozenset()  # cleared by π̄
    assert not rec.kinds("brokertree.tagged")


def test_a_publication_tagged_with_a_partial_subscriptions_pi_is_reported() -> None:
    """spec §6.6, Kazemzadeh & Jacobsen §7: at a subscriber whose subscription is partial with π, a
    publication tagged π is delivered and reported (``brokertree.tagged``: earlier matches
    may be missing); the first tagged π̄ clears π, and later ones are plain deliveries."""
    cluster, rec = _cluster(1)
    cluster.command(18, Subscribe("t"))
    cluster.quiesce(5.0)
    node = _node(cluster, 18)
    pi = (3, (0.0, 7), (0, 1), False)
    node.s.own["t"].parinfo = frozenset({pi})  # as a partial confirmation leaves it
    session = node.s.sessions
    assert session is not None
    sid = session._by_peer[3].sid

    def pub(n: int, pub_id: int, tags: tuple[Any, ...]) -> Pub:
        return Pub(
            sid=sid,
            n=n,
            origin=(12, (0.0, 100 + pub_id)),
            pub_id=pub_id,
            topic="t",
            attributes={},
            payload=b"",
            vect=(
                (3, (0.0, 500 + pub_id)),
                (0, None),
                (1, (0.0, 300 + pub_id)),
                (12, (0.0, 100 + pub_id)),
            ),
            hops=3,
            tags=tags,
        )

    base = session._by_peer[3].in_next
    for k, (pub_id, tags) in enumerate(
        [(1, (pi,)), (2, ((3, (0.0, 7), (0, 1), True),)), (3, (pi,))]
    ):
        outputs = node.handle(Receive(3, pub(base + k, pub_id, tags)), cluster.now)
        for out in outputs:
            rec(18, out)
    assert rec.delivered[18] == [1, 2, 3]
    assert [d["pub_id"] for _, d in rec.kinds("brokertree.tagged")] == [1]
    assert node.s.own["t"].parinfo == frozenset()


# ---------------------------------------------------------------- recovery and leaving
@pytest.mark.parametrize("seed", SEEDS)
def test_a_restarted_broker_gets_its_table_back(seed: int) -> None:
    """Kazemzadeh & Jacobsen §4.2, spec §7: broker 1 restarts with fresh state; its neighbours knew
    the old incarnation, say so, and send it their whole tables; its table then equals 0's."""
    cluster, rec = _cluster(seed)
    why = _replay("restarted_broker", seed)
    for i, c in enumerate(cluster.peers):
        cluster.command(c, Subscribe(f"t{i % 3}", {"price": {"gt": 10 * i}}))
    cluster.quiesce(5.0)
    table = {(t.origin[0], t.topic, t.pred.text) for t in _node(cluster, 0).s.table}
    assert len(table) == len(cluster.peers), why
    cluster.crash(1)
    cluster.quiesce(5.0)
    cluster.add_node(1)
    cluster.quiesce(10.0)
    restarted = _node(cluster, 1)
    assert {(t.origin[0], t.topic, t.pred.text) for t in restarted.s.table} == table, why
    assert restarted.s.recovering is False
    done = [d for node, d in rec.kinds("brokertree.recovered") if node == 1 and d["restart"]]
    assert len(done) == 1 and done[0]["tuples"] == len(table), (done, why)


def test_unsubscribing_removes_the_tuple_everywhere_and_stops_deliveries() -> None:
    """spec §9: an Unsub travels like a Sub; where it is confirmed the tuple goes (with a
    tombstone, so a late summary cannot bring it back)."""
    cluster, rec = _cluster(1)
    cluster.command(18, Subscribe("t"))
    cluster.command(9, Subscribe("t"))
    cluster.quiesce(5.0)
    cluster.command(12, Publish("t", 1, b""))
    cluster.quiesce(3.0)
    cluster.command(18, Unsubscribe("t"))
    cluster.quiesce(5.0)
    for b in range(8):
        assert [t.origin[0] for t in _node(cluster, b).s.table] == [9], b
        assert any(target[0] == 18 for target in _node(cluster, b).s.tombstones), b
    cluster.command(12, Publish("t", 2, b""))
    cluster.quiesce(3.0)
    assert rec.delivered[18] == [1] and rec.delivered[9] == [1, 2]


def test_a_leaving_client_unsubscribes_then_closes_its_sessions() -> None:
    """spec §9 Leave: the client unsubscribes everything, awaits the Confs, then closes."""
    from pubmesh.proto.core import Leave

    cluster, _ = _cluster(1)
    cluster.command(18, Subscribe("t"))
    cluster.command(18, Subscribe("u"))
    cluster.quiesce(5.0)
    cluster.command(18, Leave())
    cluster.quiesce(5.0)
    leaver = _node(cluster, 18)
    assert leaver.s.phase == "left" and leaver.s.sessions is not None
    assert leaver.s.sessions.peers() == []
    for b in range(8):
        assert len(_node(cluster, b).s.table) == 0, b


def test_a_restarted_client_starts_over() -> None:
    """spec §7.5: a broker that sees a client come back as a new incarnation drops the old
    one's tuples everywhere (an Unsub from the broker) and queues nothing for it; the new
    incarnation's own subscriptions then take their place."""
    cluster, rec = _cluster(1)
    cluster.command(18, Subscribe("t"))
    cluster.command(9, Subscribe("t"))
    cluster.quiesce(5.0)
    cluster.command(12, Publish("t", 1, b""))
    cluster.quiesce(3.0)
    old = {t.origin for t in _node(cluster, 0).s.table if t.origin[0] == 18}
    assert len(old) == 1 and rec.delivered[18] == [1]
    cluster.crash(18)
    cluster.quiesce(5.0)
    cluster.add_node(18)  # fresh state, a later epoch
    cluster.quiesce(5.0)
    for b in range(8):
        assert not any(t.origin[0] == 18 for t in _node(cluster, b).s.table), b
        assert old <= set(_node(cluster, b).s.tombstones), b
    cluster.command(18, Subscribe("t"))
    cluster.quiesce(5.0)
    for b in range(8):
        mine = [t.origin for t in _node(cluster, b).s.table if t.origin[0] == 18]
        assert len(mine) == 1 and mine[0] not in old, (b, mine)
    cluster.command(12, Publish("t", 2, b""))
    cluster.quiesce(3.0)
    assert rec.delivered[18] == [1, 2] and rec.delivered[9] == [1, 2]


@pytest.mark.parametrize(
    ("timeout", "past"), [(0.0, "skip"), (2.0, "skip"), (None, "skip"), (2.0, "forward")]
)
def test_a_stalled_session_waits_or_gives_up_after_stall_timeout(
    timeout: float | None, past: str
) -> None:
    """spec §4: a session stalls at a copy that would break legitimacy and passes nothing until it
    is re-activated; with stall_timeout (ours; None: the default, 5 s) the nodes it bypasses are
    presumed gone after that long, and it gives such copies up (Kazemzadeh & Jacobsen §5.5 never
    propagates one) or, with past_stall = "forward" (ours, beyond the paper), sends them all the
    same. Here δ = 1, and brokers 1 and 3 are gone for good: 12's publications reach 0 past 1 (one
    ⊥), and 0's copy to 18 past 3 would carry two ⊥ in three entries. Without a timeout 0's session
    with 18 never moves again; with one, it skips them all, or forwards them and 18 gets each once,
    in order. Nobody gets a duplicate or a reordering."""
    fields = dict(CHAIN.__dict__, past_stall=past)
    if timeout is not None:
        fields["stall_timeout"] = timeout
    params = BrokerTreeParams(**fields)
    assert params.stall_timeout > 0 or timeout == 0.0
    cluster, rec = _cluster(2, params)
    cluster.command(18, Subscribe("t"))
    cluster.quiesce(5.0)
    cluster.crash(1)
    cluster.crash(3)
    cluster.quiesce(5.0)
    for i in range(5):
        cluster.command(12, Publish("t", i, b""))
    cluster.quiesce(10.0)
    zero = _node(cluster, 0)
    link = zero.s.links[18]
    assert link.state == "active"
    skipped = rec.kinds("brokertree.stall_skipped")
    forwarded = rec.kinds("brokertree.stall_forwarded")
    stalled = rec.kinds("brokertree.stalled")
    assert stalled and all(node == 0 for node, _ in stalled), stalled
    if not timeout and timeout is not None:
        assert link.pointer < zero.s.queue.end and not skipped and not forwarded, link
        assert rec.delivered[18] == []
    elif past == "skip":
        assert link.pointer == zero.s.queue.end and len(skipped) == 5, (link, skipped)
        assert not forwarded and rec.delivered[18] == []
    else:
        assert link.pointer == zero.s.queue.end and len(forwarded) == 5, (link, forwarded)
        assert not skipped and rec.delivered[18] == [0, 1, 2, 3, 4]
    assert not rec.kinds("brokertree.late")


def test_a_peer_suspected_on_silence_is_probed_again_at_once() -> None:
    """Kazemzadeh & Jacobsen fn. 2: the detector may err; §4.1: the lead probes a failed node every
    probe_period. A peer suspected on silence (or a late frame, or a reset) is dialed again
    at once (ours): a live one answers within a round trip and is active again before its
    bypass could add up with others to more than δ ⊥ in a window (spec §11 (a): no stall
    under false suspicions)."""
    cluster, rec = _cluster(1)
    one = _node(cluster, 1)
    start = cluster.now
    while not any(n == 1 and d["peer"] == 0 for n, d in rec.kinds("brokertree.suspect")):
        # every frame from 0 to 1 is lost; everything else flows
        cluster.pool = [m for m in cluster.pool if (m.src, m.dst) != (0, 1)]
        while cluster.pool and len(rec.kinds("brokertree.suspect")) == 0:
            cluster.deliver(cluster.deliverable()[0])
            cluster.pool = [m for m in cluster.pool if (m.src, m.dst) != (0, 1)]
        if not rec.kinds("brokertree.suspect"):
            assert cluster.fire_next_timer() and cluster.now - start < 5.0
    [(_, detail)] = rec.kinds("brokertree.suspect")
    assert detail["reason"] == "silent" and 0 in one.s.down
    assert cluster.now - start < CHAIN.probe_period
    redial = [
        m for m in cluster.pool if (m.src, m.dst) == (1, 0) and type(m.message).__name__ == "Hello"
    ]
    assert redial, "no Hello to the suspected peer"
    cluster.drain()  # no timer fires: the probe period has not come
    assert 0 not in one.s.down and one.s.links[0].state == "active"
    assert not rec.kinds("brokertree.stalled")
