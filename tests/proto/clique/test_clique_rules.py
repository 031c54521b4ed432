"""The clique stack (Scheideler's lecture ch. 9, Build-Clique; docs/protocols/relay.md) and its
relay layer, one rule per test, over :class:`PoolCluster` with non-FIFO delivery where order
matters.

Node 0 is the contact (spec §7); every other node subscribes to one topic and joins through
it. A failure names the seed and the command that replays it.
"""

from __future__ import annotations

from collections import Counter

import pytest

from pubmesh.harness import PoolCluster
from pubmesh.proto.clique.legitimacy import is_legitimate
from pubmesh.proto.clique.messages import Introduce, Pub
from pubmesh.proto.clique.node import CliqueNode
from pubmesh.proto.core import Deliver, NodeId, Output, Publish, Send, Subscribe, Unsubscribe
from pubmesh.proto.relay.layer import IN, MAX_HOPS, OUT, Outcome, RelayLayer
from pubmesh.proto.relay.messages import Adopt, HoldCount, Probe, Ref, RelayGone, Release, SinkFix
from pubmesh.stacks.base import get_stack

SEEDS = range(1, 6)


def _replay(test: str, seed: int) -> str:
    return (
        f"seed {seed}; replay: pytest tests/proto/clique/test_clique_rules.py"
        f" -k '{test} and {seed}'"
    )


class Recorder:
    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()
        self.hops: list[int] = []

    def __call__(self, node: NodeId, out: Output) -> None:
        if isinstance(out, Send):
            self.sent[type(out.message).__name__] += 1
        elif isinstance(out, Deliver):
            self.hops.append(out.hops)


def _clique(n: int, seed: int) -> tuple[PoolCluster, Recorder]:
    recorder = Recorder()
    cluster = PoolCluster(get_stack("clique"), n, seed, fifo=False, on_output=recorder)
    for node in cluster.peers:
        cluster.command(node, Subscribe("t"))
    return cluster, recorder


def _legitimate(cluster: PoolCluster) -> bool:
    return is_legitimate({v: cluster.nodes[v] for v in cluster.live})


def _node(cluster: PoolCluster, v: NodeId) -> CliqueNode:
    node = cluster.nodes[v]
    assert isinstance(node, CliqueNode)
    return node


def _rounds_to_clique(cluster: PoolCluster, limit: int) -> int | None:
    timeout = _node(cluster, 0).params.timeout
    for rounds in range(limit):
        if _legitimate(cluster):
            return rounds
        cluster.quiesce(timeout)
    return None


# ------------------------------------------------------------------------ convergence (C1, C2)
@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("seed", SEEDS)
def test_joiners_become_a_clique_and_it_stays_one(n: int, seed: int) -> None:
    """Theorems 9.3 and 9.4: from the star the joins make (everyone knows the contact), a
    clique of truly direct relays, within the spec's bound 6·n ln n + 50 rounds, then still one
    100 rounds later with D = ∅ everywhere."""
    import math

    cluster, _ = _clique(n, seed)
    why = _replay("become_a_clique", seed)
    bound = int(6 * n * math.log(n) + 50)
    rounds = _rounds_to_clique(cluster, bound)
    assert rounds is not None, f"not a clique after {bound} rounds; {why}"
    timeout = _node(cluster, 0).params.timeout
    for _ in range(100):
        cluster.quiesce(timeout)
        assert _legitimate(cluster), why


def test_a_legitimate_clique_floods_in_one_hop_with_n_minus_one_messages() -> None:
    """spec §7 once legitimate: every member gets each publication once, in one hop, and
    the publication costs n − 1 Pub messages (RMR 0); the contact does not deliver."""
    cluster, recorder = _clique(10, 3)
    assert _rounds_to_clique(cluster, 400) is not None
    recorder.sent.clear()
    recorder.hops.clear()
    for i, publisher in enumerate(cluster.peers):
        cluster.command(publisher, Publish("t", i, b"x"))
        cluster.drain()
    members = len(cluster.live)  # the contact is a member that does not deliver
    assert recorder.sent["Pub"] == len(cluster.peers) * (members - 1)
    for v in cluster.peers:
        assert sorted(cluster.delivered_ids(v)) == list(range(len(cluster.peers))), v
    assert cluster.delivered_ids(0) == set()
    assert set(recorder.hops) == {0, 1}


# ----------------------------------------------------------------------------- Leave (C4)
@pytest.mark.parametrize("seed", SEEDS)
def test_a_leaver_stops_with_nothing_pointing_at_it_and_the_rest_is_a_clique(seed: int) -> None:
    """Scheideler's lecture Leave with the spec's anchor phase: the leaver stops, no relay of the
    others points at it, and the stayers are a clique again."""
    cluster, _ = _clique(10, seed)
    why = _replay("leaver_stops", seed)
    assert _rounds_to_clique(cluster, 400) is not None, why
    leaver = cluster.peers[3]
    cluster.command(leaver, Unsubscribe("t"))
    assert _rounds_to_clique(cluster, 800) is not None, why
    assert "t" not in _node(cluster, leaver).instances, why
    for v in cluster.live:
        if v == leaver:
            continue
        for relay in _node(cluster, v).layer.relays.values():
            assert relay.next is None or relay.next[0] != leaver, (v, relay, why)
    assert not any(
        r.kind == IN and r.key == "t" for r in _node(cluster, leaver).layer.relays.values()
    )


# ----------------------------------------------------------------------- relay layer (C8)
class _Rng:
    def __init__(self) -> None:
        self.k = 0

    def getrandbits(self, bits: int) -> int:
        self.k += 1
        return self.k


def _layer(me: NodeId) -> RelayLayer:
    return RelayLayer(me, _Rng(), probe_after=1.0, grace=0.5)


def _intro(ref: Ref) -> Introduce:
    return Introduce(topic="t", rid=0, prev=0, sink=0, direct=False, hop=0, w=ref, introducer=0)


def test_a_reference_becomes_a_fresh_relay_and_counts_a_holder() -> None:
    """spec §2.1/§2.3: passing a reference counts a holder at its owner; the receiver gets a
    new OUT relay to it (direct iff it is an IN relay); the sender's Release after dropping
    it lowers the count only once the frames sent through it have arrived."""
    a, b = _layer(1), _layer(2)
    a_in = a.new_in("t", 0.0)
    b_in = b.new_in("t", 0.0)
    a_to_b = a.new_out("t", (2, b_in.rid), 2, True, 0.0)
    send = a.send(a_to_b, _intro(a.ref(a_in)), 0.0)
    assert send is not None and send.dst == 2
    assert a_in.holders == {2: 1}
    got = Outcome()
    b.receive(1, send.message, 0.0, got)
    (delivery,) = got.deliveries
    made = delivery.refs["w"]
    assert made.kind == OUT and made.next == (1, a_in.rid) and made.direct and made.sink == 1
    # b sends one frame through its new relay, then drops it: the Release says "after 1"
    frame = b.send(made, _intro(b.ref(b_in)), 0.0)
    assert frame is not None
    dropped = Outcome()
    b.delete(made, dropped)
    (release,) = [s for s in dropped.sends if isinstance(s.message, Release)]
    assert release.message.sent == 1
    early = Outcome()
    a.receive(2, release.message, 0.0, early)  # the Release overtook the frame
    assert a_in.holders == {2: 1}, "a Release must not overtake data"
    late = Outcome()
    a.receive(2, frame.message, 0.0, late)
    assert a_in.holders == {}


def test_a_deleted_relay_that_is_pointed_at_stays_as_a_zombie_then_goes() -> None:
    """spec §2.2: delete keeps a relay something points at, forwarding, until its holders
    reach zero; then it is collected and its own next gets a Release."""
    a = _layer(1)
    relay = a.new_out("t", (3, 99), 3, True, 0.0)
    relay.holders[2] = 1
    out = Outcome()
    a.delete(relay, out)
    assert relay.zombie and a.get(relay.rid) is relay and not out.sends
    a.receive(2, Release(rid=relay.rid, prev=5, sent=0), 0.0, out)
    assert a.get(relay.rid) is None
    assert [s.dst for s in out.sends] == [3]


def test_relay_gone_and_peer_down_kill_relays_and_sinkfix_corrects_them() -> None:
    """spec §2.3: a frame for an unknown relay is answered RelayGone, which kills the
    sender's relay; PeerDown kills relays whose next was there and forgets it as holder
    once grace has passed;
    SinkFix corrects a relay's cached sink and direct claim."""
    a, b = _layer(1), _layer(2)
    stale = a.new_out("t", (2, 12345), 2, True, 0.0)
    send = a.send(stale, _intro(a.ref(a.new_in("t", 0.0))), 0.0)
    assert send is not None
    answer = Outcome()
    b.receive(1, send.message, 0.0, answer)
    gone = [s for s in answer.sends if isinstance(s.message, RelayGone)]
    assert gone and gone[0].dst == 1
    killed = Outcome()
    a.receive(2, gone[0].message, 0.0, killed)
    assert killed.killed == [stale] and a.get(stale.rid) is None
    other = a.new_out("t", (4, 7), 9, True, 0.0)
    a.receive(4, SinkFix(rid=other.rid, sink=5, direct=False), 0.0, Outcome())
    assert other.sink == 5 and not other.direct
    held = a.new_in("t", 0.0)
    held.holders[4] = 2
    down = Outcome()
    a.peer_down(4, 1.0, down)
    assert other in down.killed and held.holders == {4: 2}, "kept for grace"
    a.probe([held], 1.2, Outcome(), at_once=True)
    assert held.holders == {4: 2}, "a reference counted towards 4 may still be adopted"
    asked = Outcome()
    a.probe([held], 1.0 + a.grace, asked, at_once=True)
    assert held.holders == {} and not asked.sends, "gone after grace, and never probed"


def test_a_forwarded_chain_does_not_unmark_a_direct_relay() -> None:
    """Found in the first runs: the IN relay at the end of a chain must not tell the last
    relay it is indirect because the chain had more than one hop (the spec's §2.3 test
    "direct ≠ (hop = 1)"); a direct relay stays direct."""
    a, b, c = _layer(1), _layer(2), _layer(3)
    c_in = c.new_in("t", 0.0)
    b_to_c = b.new_out("t", (3, c_in.rid), 3, True, 0.0)  # direct
    a_to_b = a.new_out("t", (2, b_to_c.rid), 3, False, 0.0)  # a chain through b
    first = a.send(a_to_b, _intro(a.ref(a.new_in("t", 0.0))), 0.0)
    assert first is not None
    hop = Outcome()
    b.receive(1, first.message, 0.0, hop)
    (forward,) = [s for s in hop.sends if s.dst == 3]
    assert forward.message.hop == 2 and forward.message.direct
    end = Outcome()
    c.receive(2, forward.message, 0.0, end)
    assert not [s for s in end.sends if isinstance(s.message, SinkFix)]
    assert end.deliveries and b_to_c.direct


def test_a_reference_counted_towards_the_wrong_process_is_adopted() -> None:
    """A relay with a wrong cached sink (a corrupted state's) carries a reference that its
    owner counts towards that sink; the process it really reaches takes the count over
    (Adopt), and its later Release waits for the Adopt, so the count at the owner is never
    below the truth whatever the order (found by the C1 oracle)."""
    a, c = _layer(1), _layer(3)
    a_in = a.new_in("t", 0.0)
    c_in = c.new_in("t", 0.0)
    wrong = a.new_out("t", (3, c_in.rid), 2, True, 0.0)  # claims sink 2, ends at 3
    send = a.send(wrong, _intro(a.ref(a_in)), 0.0)
    assert send is not None and a_in.holders == {2: 1}
    assert send.message.w.holder == 2
    got = Outcome()
    c.receive(1, send.message, 0.0, got)
    made = got.deliveries[0].refs["w"]
    (adopt,) = [s for s in got.sends if isinstance(s.message, Adopt)]
    assert adopt.dst == 1 and adopt.message == Adopt(rid=a_in.rid, prev=made.rid, was=2)
    # c drops its relay at once; its Release overtakes the Adopt
    dropped = Outcome()
    c.delete(made, dropped)
    (release,) = [s for s in dropped.sends if isinstance(s.message, Release)]
    assert release.message.adopted
    a.receive(3, release.message, 0.0, Outcome())
    assert a_in.holders == {2: 1}, "a Release must wait for its Adopt"
    a.receive(3, adopt.message, 0.0, Outcome())
    assert a_in.holders == {}


def test_a_frame_for_a_missing_relay_or_a_zombie_in_gives_its_counts_back() -> None:
    """The references a frame carries make no relay where its relay is gone or is a zombie
    IN relay: their owners' counts go (Adopt with prev = 0), and the sender's relay is killed
    (RelayGone): nothing is behind it."""
    a, b = _layer(1), _layer(2)
    a_in = a.new_in("t", 0.0)
    b_in = b.new_in("t", 0.0)
    b_in.holders[1] = 1
    to_b = a.new_out("t", (2, b_in.rid), 2, True, 0.0)
    b.delete(b_in, Outcome())
    assert b_in.zombie
    send = a.send(to_b, _intro(a.ref(a_in)), 0.0)
    assert send is not None and a_in.holders == {2: 1}
    answer = Outcome()
    b.receive(1, send.message, 0.0, answer)
    assert not answer.deliveries
    kinds = sorted(type(s.message).__name__ for s in answer.sends)
    assert kinds == ["Adopt", "RelayGone"]
    for item in answer.sends:
        a.receive(2, item.message, 0.0, Outcome())
    assert a_in.holders == {} and a.get(to_b.rid) is None


def test_a_probe_corrects_an_overcount_and_a_count_towards_ourselves() -> None:
    """spec §2.3 Probe / HoldCount: a holder answers how many relays it has pointing at the
    probed relay, which replaces the owner's count (a corrupted state's over-count goes);
    a count towards the owner itself is answered from its own table."""
    a, b = _layer(1), _layer(2)
    mine = a.new_out("t", (3, 5), 3, True, 0.0)
    mine.holders = {2: 3, 1: 1}
    out = Outcome()
    a.probe([mine], 0.0, out)  # due from now on
    a.probe([mine], 10.0, out)
    (probe,) = [s for s in out.sends if isinstance(s.message, Probe)]
    assert probe.dst == 2 and mine.holders == {2: 3}
    answer = Outcome()
    b.receive(1, probe.message, 0.0, answer)
    (count,) = answer.sends
    assert count.message == HoldCount(pairs=((mine.rid, 0),), epochs=(1,))
    a.receive(2, count.message, 0.0, Outcome())
    assert mine.holders == {}


def test_a_probe_answer_keeps_what_crossed_it() -> None:
    """A Probe starts a new epoch of the owner's count for that holder: a reference counted
    after the Probe went is added to the answer (it may be in flight when the holder counts),
    and a Release sent under the older epoch that arrives after the answer is ignored (the
    answer has it already); found by the d2g oracle, where ``in`` is probed while in use."""
    a, b = _layer(1), _layer(2)
    a_in = a.new_in("t", 0.0)
    b_in = b.new_in("t", 0.0)
    to_b = a.new_out("t", (2, b_in.rid), 2, True, 0.0)
    first = a.send(to_b, _intro(a.ref(a_in)), 0.0)
    assert first is not None
    got = Outcome()
    b.receive(1, first.message, 0.0, got)
    held = got.deliveries[0].refs["w"]
    dropped = Outcome()
    b.delete(held, dropped)  # b drops it: its Release (epoch 0) is on its way
    (release,) = [s for s in dropped.sends if isinstance(s.message, Release)]
    probe_out = Outcome()
    a.probe([a_in], 10.0, probe_out, at_once=True)
    (probe,) = [s for s in probe_out.sends if isinstance(s.message, Probe)]
    second = a.send(to_b, _intro(a.ref(a_in)), 10.0)  # counted after the Probe went
    assert second is not None and a_in.holders == {2: 2}
    answer = Outcome()
    b.receive(1, probe.message, 10.0, answer)  # b holds nothing yet: answers 0
    a.receive(2, answer.sends[0].message, 10.0, Outcome())
    assert a_in.holders == {2: 1}, "the reference in flight stays counted"
    a.receive(2, release.message, 10.0, Outcome())  # the old epoch's Release, late
    assert a_in.holders == {2: 1}, "a Release the answer already reflects is ignored"
    later = Outcome()
    b.receive(1, second.message, 10.0, later)
    assert later.deliveries and a_in.holders == {2: 1}


def test_a_release_made_after_the_probe_answer_waits_for_it() -> None:
    """The holder answers a Probe (its relay counted), then drops the relay: that Release
    carries the Probe's epoch and, arriving before the answer, waits for it; applied first
    it would be undone by the answer and leave a count nothing backs (found by C6: a d2g
    member kept a phantom in-link and the in-link repair never ran)."""
    a, b = _layer(1), _layer(2)
    a_in = a.new_in("t", 0.0)
    b_in = b.new_in("t", 0.0)
    to_b = a.new_out("t", (2, b_in.rid), 2, True, 0.0)
    send = a.send(to_b, _intro(a.ref(a_in)), 0.0)
    assert send is not None
    got = Outcome()
    b.receive(1, send.message, 0.0, got)
    held = got.deliveries[0].refs["w"]
    probe_out = Outcome()
    a.probe([a_in], 10.0, probe_out, at_once=True)
    (probe,) = [s for s in probe_out.sends if isinstance(s.message, Probe)]
    answer = Outcome()
    b.receive(1, probe.message, 10.0, answer)
    assert answer.sends[0].message.pairs == ((a_in.rid, 1),)
    dropped = Outcome()
    b.delete(held, dropped)
    (release,) = [s for s in dropped.sends if isinstance(s.message, Release)]
    assert release.message.epoch == probe.message.epochs[0]
    a.receive(2, release.message, 10.0, Outcome())
    assert a_in.holders == {2: 1}, "the Release must wait for the answer"
    a.receive(2, answer.sends[0].message, 10.0, Outcome())
    assert a_in.holders == {}


def test_a_reference_that_reaches_the_holder_after_its_probe_answer_is_reported() -> None:
    """A reference counted before a Probe can reach the holder after it answered (latency
    beyond the probe window): the holder reports it with an Adopt to itself, so the count
    comes back up at once."""
    a, b = _layer(1), _layer(2)
    a_in = a.new_in("t", 0.0)
    b_in = b.new_in("t", 0.0)
    to_b = a.new_out("t", (2, b_in.rid), 2, True, 0.0)
    late = a.send(to_b, _intro(a.ref(a_in)), 0.0)
    assert late is not None and a_in.holders == {2: 1}
    probe_out = Outcome()
    a.probe([a_in], 10.0, probe_out, at_once=True)
    (probe,) = [s for s in probe_out.sends if isinstance(s.message, Probe)]
    answer = Outcome()
    b.receive(1, probe.message, 10.0, answer)
    a.receive(2, answer.sends[0].message, 10.0, Outcome())
    assert a_in.holders == {}, "the answer could not know of the reference in flight"
    arrived = Outcome()
    b.receive(1, late.message, 10.0, arrived)
    (adopt,) = [s for s in arrived.sends if isinstance(s.message, Adopt)]
    assert adopt.message.was == 2 and adopt.message.epoch == 0
    a.receive(2, adopt.message, 10.0, Outcome())
    assert a_in.holders == {2: 1}


def test_a_cycle_of_relays_is_cut_at_the_hop_limit() -> None:
    """A corrupted state may hold relays that point at each other in a cycle: a frame on it
    is dropped once it has crossed MAX_HOPS relays, and the relay that sent it is killed."""
    a, b = _layer(1), _layer(2)
    ra = a.new_out("t", (2, 0), 9, False, 0.0)
    rb = b.new_out("t", (1, ra.rid), 9, False, 0.0)
    ra.next = (2, rb.rid)
    send = a.send(ra, _intro(a.ref(a.new_in("t", 0.0))), 0.0)
    assert send is not None
    layers, message, src, hops = {1: a, 2: b}, send.message, 1, 0
    while True:
        dst = 2 if src == 1 else 1
        out = Outcome()
        layers[dst].receive(src, message, 0.0, out)
        frames = [s for s in out.sends if type(s.message) is Introduce]
        if not frames:
            break
        message, src, hops = frames[0].message, dst, hops + 1
    assert hops == MAX_HOPS  # forwarded with hop = 2 … MAX_HOPS + 1, which is dropped
    assert any(isinstance(s.message, RelayGone) for s in out.sends)


def test_pub_is_routed_and_payload() -> None:
    from pubmesh.proto.core import MESSAGE_INFO

    assert MESSAGE_INFO[Pub].payload and MESSAGE_INFO[Pub].layer == "pubsub"
