"""Example tests for the gossip stack's rules, one or more per rule of docs/protocols/gossip.md.

Each test drives a protocol object directly through its handler (``GossipNode.handle(event,
now)``, or ``HyParView.handle`` and ``Plumtree.handle``, the same shape one layer down) from a state
built by hand, and checks the outputs and the state afterwards. No simulator is involved.
"""

from __future__ import annotations

import random

import pytest

from pubmesh.proto.core import (
    Deliver,
    Disconnect,
    Leave,
    Message,
    NodeContext,
    Output,
    PeerDown,
    Publish,
    Receive,
    Send,
    SetTimer,
    Start,
    Subscribe,
    TimerFired,
    Unsubscribe,
)
from pubmesh.proto.gossip import GossipNode, SwarmTimer
from pubmesh.proto.gossip.hyparview import (
    NONE,
    ContactReply,
    ContactRequest,
    DisconnectRequest,
    ForwardJoin,
    ForwardJoinAccept,
    HyParView,
    Join,
    JoinReply,
    JoinTimeout,
    MembershipOutput,
    Neighbor,
    NeighborDown,
    NeighborReply,
    NeighborUp,
    Shuffle,
    ShuffleReply,
    ShuffleTick,
    SwarmDirectory,
    SwarmJoined,
    SwarmSample,
)
from pubmesh.proto.gossip.params import GossipParams
from pubmesh.proto.gossip.plumtree import (
    ID_BYTES,
    Broadcast,
    BroadcastOutput,
    Delivered,
    EvictCache,
    FlushIHave,
    Gossip,
    Graft,
    IHave,
    Plumtree,
    Prune,
    SendGraft,
)

T = "t"
SEEDS = range(20)


def hv(me: int = 1, seed: int = 0, **params: object) -> HyParView:
    return HyParView(me, T, GossipParams(**params), random.Random(seed))  # type: ignore[arg-type]


def pt(
    me: int = 0, *, eager: tuple[int, ...] = (), lazy: tuple[int, ...] = (), **params: object
) -> Plumtree:
    # the paper's rules: tree = "plumtree" unless a test says otherwise (the rooted tree's
    # rules are tested below, under "the rooted tree")
    params.setdefault("tree", "plumtree")
    tree = Plumtree(me, T, GossipParams(**params))  # type: ignore[arg-type]
    for peer in (*eager, *lazy):
        tree.handle(NeighborUp(peer), 0.0)
    for peer in lazy:
        tree.handle(Receive(peer, Prune(topic=T)), 0.0)
    return tree


def node(me: int, seed: int = 0, **params: object) -> GossipNode:
    params.setdefault("tree", "plumtree")
    # type: ignore[arg-type]
    return GossipNode(NodeContext(me, random.Random(seed), "peer", GossipParams(**params)))


def sends(
    out: list[Output] | list[MembershipOutput] | list[BroadcastOutput], kind: type
) -> list[Send]:
    return [o for o in out if isinstance(o, Send) and isinstance(o.message, kind)]


def rule_outputs(out: list[BroadcastOutput]) -> list[BroadcastOutput]:
    """Plumtree's outputs without the cache's eviction timer (tested on its own below)."""
    return [o for o in out if not (isinstance(o, SetTimer) and isinstance(o.timer, EvictCache))]


def check_subset(n: GossipNode) -> None:
    """Plumtree's eager and lazy peers are disjoint and a subset of HyParView's active view."""
    for swarm in n.swarms.values():
        tree, active = swarm.broadcast, set(swarm.membership.active)
        eager, lazy = set(tree.eager), set(tree.lazy)
        assert eager <= active and lazy <= active, (eager, lazy, active)
        assert not eager & lazy


def joined_node(me: int = 5, member: int = 3, *, subscribe: bool = True) -> GossipNode:
    """A node that joined swarm T through ``member`` (contact 0)."""
    n = node(me)
    n.handle(Start((0,)), 0.0)
    if subscribe:
        out = n.handle(Subscribe(T), 0.0)
        assert [s.dst for s in sends(out, ContactRequest)] == [0]
    out = n.handle(Receive(0, ContactReply(topic=T, member=member)), 0.1)
    assert [s.dst for s in sends(out, Join)] == [member]
    n.handle(Receive(member, JoinReply(topic=T)), 0.2)
    assert n.swarms[T].membership.joined
    check_subset(n)
    return n


# ============================================================================ HyParView: Join
@pytest.mark.parametrize("seed", SEEDS)
def test_join_at_contact_with_room_adds_forwards_and_replies(seed: int) -> None:
    h = hv(me=0, seed=seed)
    h.active = [1, 2]
    out = h.handle(Receive(9, Join(topic=T)), 0.0)
    assert h.active == [1, 2, 9]
    fj = sends(out, ForwardJoin)
    assert sorted(s.dst for s in fj) == [1, 2]
    assert all(s.message == ForwardJoin(topic=T, new_node=9, ttl=6) for s in fj)
    assert [s.dst for s in sends(out, JoinReply)] == [9]
    assert not sends(out, DisconnectRequest)
    assert NeighborUp(9) in out


@pytest.mark.parametrize("seed", SEEDS)
def test_join_at_full_contact_evicts_a_random_member_with_disconnect(seed: int) -> None:
    h = hv(me=0, seed=seed, active_view=3)
    h.active = [1, 2, 3]
    out = h.handle(Receive(9, Join(topic=T)), 0.0)
    disc = sends(out, DisconnectRequest)
    assert len(disc) == 1
    victim = disc[0].dst
    assert victim in (1, 2, 3)
    assert victim not in h.active and victim in h.passive
    assert len(h.active) == 3 and 9 in h.active
    assert NeighborDown(victim) in out
    assert sorted(s.dst for s in sends(out, ForwardJoin)) == sorted({1, 2, 3} - {victim})


def test_join_eviction_victim_is_random() -> None:
    victims = set()
    for seed in range(40):
        h = hv(me=0, seed=seed, active_view=3)
        h.active = [1, 2, 3]
        victims.add(sends(h.handle(Receive(9, Join(topic=T)), 0.0), DisconnectRequest)[0].dst)
    assert victims == {1, 2, 3}


# ============================================================================ ForwardJoin
def test_forward_join_ttl_zero_invites_and_adds_only_when_the_node_asks() -> None:
    """The walk's end invites the named node (ForwardJoinAccept); it enters the active view
    when its Neighbor request arrives over a connection it made: an id nobody answers for
    takes no place and evicts nobody (no eclipse by named ids)."""
    h = hv()
    h.active = [2, 3, 4]
    out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=9, ttl=0)), 0.0)
    assert 9 not in h.active and 9 in h.invited
    assert [s.dst for s in sends(out, ForwardJoinAccept)] == [9]
    assert not sends(out, ForwardJoin)
    out = h.handle(Receive(9, Neighbor(topic=T, high_priority=False)), 1.0)
    assert 9 in h.active and [s.message for s in sends(out, NeighborReply)] == [
        NeighborReply(topic=T, accepted=True)
    ]


def test_ids_a_member_names_evict_nobody_and_failed_ones_are_not_tried_again() -> None:
    """The eclipse an insider tried: an active member names silent ids in ttl-0 ForwardJoins. A
    full view invites one per shuffle period from that member (the rest are dropped, not put
    in the passive view) and keeps every honest neighbour; an invited id whose dial failed is
    ignored for failed_memory; a ForwardJoin from a node outside the active view is ignored."""
    h = hv(active_view=3)
    h.active = [2, 3, 4]
    invited = []
    for i, fake in enumerate(range(100, 140)):
        out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=fake, ttl=0)), i * 0.05)
        invited += [s.dst for s in sends(out, ForwardJoinAccept)]
    assert h.active == [2, 3, 4] and invited == [100] and h.passive == []
    h.handle(PeerDown(100), 2.0)  # its dial failed
    out = h.handle(Receive(3, ForwardJoin(topic=T, new_node=100, ttl=0)), 20.0)
    assert not out and 100 not in h.passive, "a failed id is not invited again"
    out = h.handle(Receive(3, ForwardJoin(topic=T, new_node=100, ttl=0)), 63.0)
    assert [s.dst for s in sends(out, ForwardJoinAccept)] == [100], "after failed_memory"
    assert not h.handle(Receive(77, ForwardJoin(topic=T, new_node=101, ttl=0)), 64.0)
    # unsolicited accepts and replies take no place either
    assert not [o for o in h.handle(Receive(66, ForwardJoinAccept(topic=T)), 65.0)]
    out = h.handle(Receive(66, NeighborReply(topic=T, accepted=True)), 65.0)
    assert 66 not in h.active and [s.dst for s in sends(out, DisconnectRequest)] == [66]
    # with room in the view, active_size invitations per shuffle period from one member
    h = hv(active_view=3)
    h.active = [2]
    invited = []
    for i, fake in enumerate(range(100, 180)):  # 20 a second for 4 s
        out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=fake, ttl=0)), i * 0.05)
        invited += [s.dst for s in sends(out, ForwardJoinAccept)]
    assert invited == [100, 167] and h.active == [2], "one per 10/3 s"


def test_forward_join_with_one_active_member_invites() -> None:
    h = hv()
    h.active = [2]
    out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=9, ttl=5)), 0.0)
    assert h.active == [2] and 9 in h.invited
    assert [s.dst for s in sends(out, ForwardJoinAccept)] == [9]


def test_an_invitation_during_our_join_is_taken_with_a_neighbor_request() -> None:
    h = hv()
    h.contact = 0
    h.handle(Receive(0, ContactReply(topic=T, member=2)), 0.0)  # joins through 2
    out = h.handle(Receive(7, ForwardJoinAccept(topic=T)), 1.0)
    assert [s.dst for s in sends(out, Neighbor)] == [7] and 7 not in h.active
    out = h.handle(Receive(7, NeighborReply(topic=T, accepted=True)), 1.1)
    assert h.active == [2, 7] and NeighborUp(7) in out
    # long after the join, an invitation is nobody's to take
    assert not sends(h.handle(Receive(8, ForwardJoinAccept(topic=T)), 60.0), Neighbor)


@pytest.mark.parametrize("seed", SEEDS)
def test_forward_join_at_prwl_goes_passive_and_walks_on(seed: int) -> None:
    h = hv(seed=seed)  # prwl 3
    h.active = [2, 3, 4]
    out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=9, ttl=3)), 0.0)
    assert 9 in h.passive and 9 not in h.active
    fj = sends(out, ForwardJoin)
    assert len(fj) == 1 and fj[0].dst in (3, 4)
    assert fj[0].message == ForwardJoin(topic=T, new_node=9, ttl=2)
    assert not sends(out, ForwardJoinAccept)


def test_forward_join_walk_picks_a_random_member_other_than_sender() -> None:
    targets = set()
    for seed in range(40):
        h = hv(seed=seed)
        h.active = [2, 3, 4]
        out = h.handle(Receive(2, ForwardJoin(topic=T, new_node=9, ttl=5)), 0.0)
        assert 9 not in h.passive and 9 not in h.active  # ttl 5 ≠ PRWL: no passive insertion
        (fj,) = sends(out, ForwardJoin)
        assert fj.message == ForwardJoin(topic=T, new_node=9, ttl=4)
        targets.add(fj.dst)
    assert targets == {3, 4}


# ============================================================================ Disconnect
def test_disconnect_moves_the_sender_to_the_passive_view() -> None:
    h = hv()
    h.active = [2, 3]
    out = h.handle(Receive(2, DisconnectRequest(topic=T)), 0.0)
    assert h.active == [3] and 2 in h.passive
    assert NeighborDown(2) in out


def test_disconnect_that_empties_the_view_waits_for_the_tick_to_rejoin() -> None:
    """A DISCONNECT from the only active member, with nobody else in the passive view: the
    node echoes it and asks nobody at once (asking the contact, which would name the sender
    again, let two such nodes exchange DISCONNECT, echo and Join forever); its next shuffle
    tick sends a high-priority Neighbor to the sender."""
    h = hv(me=0)
    h.contact = 5
    h.joined = True
    h.active = [3]
    out = h.handle(Receive(3, DisconnectRequest(topic=T)), 0.0)
    assert h.active == [] and h.passive == [3]
    assert [s.dst for s in sends(out, DisconnectRequest)] == [3]
    assert not sends(out, ContactRequest) and not sends(out, Join) and not sends(out, Neighbor)
    out = h.handle(TimerFired(ShuffleTick()), 1.0)
    (request,) = sends(out, Neighbor)
    assert request.dst == 3 and request.message == Neighbor(topic=T, high_priority=True)


def test_disconnect_from_non_member_changes_nothing() -> None:
    h = hv()
    h.active = [2, 3]
    h.passive = [7]
    assert h.handle(Receive(8, DisconnectRequest(topic=T)), 0.0) == []
    assert h.active == [2, 3] and h.passive == [7]


# ============================================================================ failures
@pytest.mark.parametrize("seed", SEEDS)
def test_peer_down_of_active_member_promotes_with_low_priority(seed: int) -> None:
    h = hv(seed=seed)
    h.active = [2, 3]
    h.passive = [5, 6]
    out = h.handle(PeerDown(2), 0.0)
    assert h.active == [3] and 2 not in h.passive
    (nb,) = sends(out, Neighbor)
    assert nb.dst in (5, 6) and nb.message == Neighbor(topic=T, high_priority=False)
    assert h.pending_neighbor == nb.dst
    assert NeighborDown(2) in out


def test_peer_down_of_last_active_member_promotes_with_high_priority() -> None:
    h = hv()
    h.active = [2]
    h.passive = [5]
    out = h.handle(PeerDown(2), 0.0)
    assert h.active == []
    assert [(s.dst, s.message) for s in sends(out, Neighbor)] == [
        (5, Neighbor(topic=T, high_priority=True))
    ]


def test_peer_down_of_passive_member_forgets_it() -> None:
    h = hv()
    h.active = [2]
    h.passive = [5, 6]
    assert sends(h.handle(PeerDown(5), 0.0), Neighbor) == []
    assert h.passive == [6]


def test_peer_down_of_pending_neighbor_tries_another() -> None:
    h = hv()
    h.active = [2]
    h.passive = [5, 6]
    h.pending_neighbor = 5
    out = h.handle(PeerDown(5), 0.0)
    assert [s.dst for s in sends(out, Neighbor)] == [6]


def test_neighbor_low_priority_accepted_with_room() -> None:
    h = hv(active_view=2)
    h.active = [2]
    out = h.handle(Receive(7, Neighbor(topic=T, high_priority=False)), 0.0)
    assert h.active == [2, 7]
    assert [(s.dst, s.message) for s in sends(out, NeighborReply)] == [
        (7, NeighborReply(topic=T, accepted=True))
    ]


def test_neighbor_low_priority_rejected_when_full() -> None:
    h = hv(active_view=2)
    h.active = [2, 3]
    out = h.handle(Receive(7, Neighbor(topic=T, high_priority=False)), 0.0)
    assert h.active == [2, 3]
    assert [(s.dst, s.message) for s in sends(out, NeighborReply)] == [
        (7, NeighborReply(topic=T, accepted=False))
    ]
    assert not sends(out, DisconnectRequest)


@pytest.mark.parametrize("seed", SEEDS)
def test_neighbor_high_priority_always_accepted_evicting_a_member(seed: int) -> None:
    h = hv(seed=seed, active_view=2)
    h.active = [2, 3]
    out = h.handle(Receive(7, Neighbor(topic=T, high_priority=True)), 0.0)
    (disc,) = sends(out, DisconnectRequest)
    assert disc.dst in (2, 3) and disc.dst in h.passive
    assert sorted(h.active) == sorted({2, 3, 7} - {disc.dst})
    assert sends(out, NeighborReply)[0].message.accepted  # type: ignore[attr-defined]


def test_forced_evictions_are_paid_from_a_bucket_whoever_asks() -> None:
    """A coalition's high-priority Neighbors evict at most forced_evictions (3) members in a burst
    and one per shuffle period (10 s) after it: a request beyond is refused and
    nobody is evicted for it. The paper's rule evicted a member for every one of them."""
    h = hv(active_view=2)
    h.active = [2, 3]
    replies = []
    for t, src in ((0.0, 7), (0.1, 8), (0.2, 9), (0.3, 10), (9.0, 11), (10.3, 12), (10.4, 13)):
        out = h.handle(Receive(src, Neighbor(topic=T, high_priority=True)), t)
        replies.append(sends(out, NeighborReply)[0].message.accepted)  # type: ignore[attr-defined]
        assert len(sends(out, DisconnectRequest)) == replies[-1], (src, out)
    assert replies == [True, True, True, False, False, True, False]
    assert 12 in h.active and len(h.active) == 2 and not {10, 11, 13} & set(h.active)
    # low-priority requests with room and invited nodes take no token; the bucket refills
    h.active = [12]
    assert NeighborUp(21) in h.handle(Receive(21, Neighbor(topic=T, high_priority=False)), 11.5)
    h.active = [12, 21]
    out = h.handle(Receive(22, Neighbor(topic=T, high_priority=True)), 50.0)
    assert 22 in h.active and len(sends(out, DisconnectRequest)) == 1


def test_neighbor_reply_accept_adds_the_peer() -> None:
    h = hv()
    h.active = [2]
    h.passive = [5, 6]
    h.pending_neighbor = 5
    out = h.handle(Receive(5, NeighborReply(topic=T, accepted=True)), 0.0)
    assert h.active == [2, 5] and 5 not in h.passive and h.pending_neighbor == NONE
    assert NeighborUp(5) in out


def test_rejection_tries_the_next_passive_node_then_stops() -> None:
    h = hv()
    h.active = [2]
    h.passive = [5, 6]
    h.pending_neighbor = 5
    out = h.handle(Receive(5, NeighborReply(topic=T, accepted=False)), 0.0)
    assert [s.dst for s in sends(out, Neighbor)] == [6]
    assert h.pending_neighbor == 6 and h.active == [2]
    out = h.handle(Receive(6, NeighborReply(topic=T, accepted=False)), 0.0)
    # passive exhausted but the active view is not empty: no new request, no contact
    assert not sends(out, Neighbor) and not sends(out, ContactRequest)


def test_passive_exhausted_and_active_empty_asks_the_contact_again() -> None:
    h = hv(me=1)
    h.contact = 0
    h.joined = True
    h.passive = [5]
    h.pending_neighbor = 5
    out = h.handle(Receive(5, NeighborReply(topic=T, accepted=False)), 0.0)
    assert [(s.dst, s.message) for s in sends(out, ContactRequest)] == [
        (0, ContactRequest(topic=T, dead=NONE))
    ]
    assert not h.joined
    assert [o for o in out if isinstance(o, SetTimer)] == [
        SetTimer(h.p.join_timeout, JoinTimeout(h.join_generation))
    ]


def test_last_active_member_down_with_empty_passive_asks_contact_naming_it() -> None:
    h = hv(me=1)
    h.contact = 0
    h.joined = True
    h.active = [4]
    out = h.handle(PeerDown(4), 0.0)
    assert [s.message for s in sends(out, ContactRequest)] == [ContactRequest(topic=T, dead=4)]


# ============================================================================ Shuffle
@pytest.mark.parametrize("seed", SEEDS)
def test_shuffle_timer_sends_walk_with_self_ka_active_kp_passive(seed: int) -> None:
    h = hv(me=1, seed=seed)
    h.active = [2, 3, 4, 5]
    h.passive = [10, 11, 12, 13, 14, 15]
    out = h.handle(TimerFired(ShuffleTick()), 0.0)
    (sh,) = sends(out, Shuffle)
    msg = sh.message
    assert isinstance(msg, Shuffle)
    assert sh.dst in h.active and msg.origin == 1 and msg.ttl == 6
    assert msg.nodes[0] == 1 and len(msg.nodes) == 1 + 3 + 4
    assert set(msg.nodes[1:4]) <= set(h.active) and set(msg.nodes[4:]) <= set(h.passive)
    assert len(set(msg.nodes)) == len(msg.nodes)
    assert SetTimer(10.0, ShuffleTick()) in out


def test_timer_of_a_replaced_swarm_instance_is_dropped_by_the_node() -> None:
    """Timers leave the node wrapped with their swarm's epoch; after unsubscribe and
    resubscribe, a timer of the old instance reaches no layer."""
    n = joined_node()
    old = n.swarms[T].epoch
    n.handle(Unsubscribe(T), 1.0)
    n.handle(Subscribe(T), 1.1)
    assert n.swarms[T].epoch == old + 1
    n.swarms[T].membership.active = [2]
    assert n.handle(TimerFired(SwarmTimer(T, old, ShuffleTick())), 2.0) == []
    out = n.handle(TimerFired(SwarmTimer(T, old + 1, ShuffleTick())), 2.0)
    assert [s.dst for s in sends(out, Shuffle)] == [2]


@pytest.mark.parametrize("seed", SEEDS)
def test_shuffle_walk_is_forwarded_with_ttl_minus_one(seed: int) -> None:
    h = hv(me=1, seed=seed)
    h.active = [2, 3, 4]
    out = h.handle(Receive(2, Shuffle(topic=T, origin=7, nodes=(7, 8), ttl=3)), 0.0)
    (sh,) = sends(out, Shuffle)
    assert sh.dst in (3, 4)
    assert sh.message == Shuffle(topic=T, origin=7, nodes=(7, 8), ttl=2)
    assert not sends(out, ShuffleReply)


@pytest.mark.parametrize("seed", SEEDS)
def test_shuffle_end_of_walk_replies_and_merges_evicting_what_it_sent(seed: int) -> None:
    h = hv(me=1, seed=seed, passive_view=3)
    h.active = [2, 3]
    h.passive = [4, 5, 6]
    out = h.handle(Receive(2, Shuffle(topic=T, origin=7, nodes=(7, 8), ttl=1)), 0.0)
    (reply,) = sends(out, ShuffleReply)
    assert reply.dst == 7 and isinstance(reply.message, ShuffleReply)
    sent = set(reply.message.nodes)
    assert len(sent) == 2 and sent <= {4, 5, 6}
    assert set(h.passive) == ({4, 5, 6} - sent) | {7, 8}


def test_shuffle_with_one_active_member_ends_the_walk() -> None:
    h = hv(me=1)
    h.active = [2]
    h.passive = [4]
    out = h.handle(Receive(2, Shuffle(topic=T, origin=7, nodes=(7, 8, 9), ttl=5)), 0.0)
    assert [s.message for s in sends(out, ShuffleReply)] == [ShuffleReply(topic=T, nodes=(4,))]
    assert not sends(out, Shuffle)
    assert sorted(h.passive) == [4, 7, 8, 9]


def test_shuffle_reply_merge_evicts_first_what_was_sent() -> None:
    h = hv(me=1, passive_view=3)
    h.active = [2]
    h.passive = [4, 5, 6]
    h.last_shuffle = (1, 2, 4, 5)
    h.handle(Receive(2, ShuffleReply(topic=T, nodes=(8, 9))), 0.0)
    assert sorted(h.passive) == [6, 8, 9]


def test_shuffle_merge_skips_self_and_active_members() -> None:
    h = hv(me=1, passive_view=5)
    h.active = [2]
    h.passive = [4]
    h.last_shuffle = (1, 2)  # the shuffle it answers
    h.handle(Receive(2, ShuffleReply(topic=T, nodes=(1, 2, 4, 9))), 0.0)
    assert sorted(h.passive) == [4, 9]


def test_what_one_shuffle_brings_into_the_passive_view_is_sampled_and_answered_once() -> None:
    """Against insiders: a Shuffle naming 200 ids brings at most as many as an honest one
    carries (1 + shuffle_ka + shuffle_kp); a ShuffleReply is merged once per shuffle sent."""
    h = hv(me=1, shuffle_ttl=1)
    h.active = [2]
    h.handle(Receive(2, Shuffle(topic=T, origin=2, nodes=tuple(range(100, 300)), ttl=1)), 0.0)
    most = 1 + h.p.shuffle_ka + h.p.shuffle_kp
    assert len(h.passive) == most and set(h.passive) <= set(range(100, 300))
    h = hv(me=1)
    h.active = [2]
    assert h.handle(Receive(2, ShuffleReply(topic=T, nodes=(7, 8))), 0.0) == []
    assert h.passive == [], "a reply to no shuffle of ours"


# ============================================================================ directory
def test_directory_names_only_joined_members_and_the_founder() -> None:
    d = SwarmDirectory(3, random.Random(0))
    assert d.lookup(T, 10, NONE) == NONE  # no member: 10 founds the swarm and is recorded
    assert d.lookup(T, 11, NONE) == 10
    assert d.lookup(T, 12, NONE) == 10  # 11 has not completed its join: never named
    d.record(T, 11)  # 11's SwarmJoined
    assert d.lookup(T, 10, NONE) == 11  # never names the requester itself


def test_the_directory_is_bounded_whatever_members_ask() -> None:
    """Against insiders: a node holds a place in at most per_node topics (its least recent
    place given up), the directory keeps max_topics (least recently touched first out), an
    idle topic expires, and held_bytes follows what is kept."""
    d = SwarmDirectory(2, random.Random(0), max_topics=5, per_node=3, topic_expiry=100.0)
    empty = d.held_bytes()
    for i in range(10):  # one member asks for ten topics: it keeps a place in three
        d.lookup(f"t{i}", 66, NONE, now=float(i))
    assert sorted(d.touched) == ["t7", "t8", "t9"] and list(d.holders[66]) == ["t7", "t8", "t9"]
    assert d.places == 3 and set(d.members) == set(d.asked) == {"t7", "t8", "t9"}
    held = d.held_bytes()
    assert held > empty
    for node in (1, 2, 3):  # honest founders of three more topics: the oldest topic goes
        d.lookup(f"h{node}", node, NONE, now=20.0)
    assert len(d.touched) == 5 and "t7" not in d.touched and "t7" not in d.holders[66]
    assert sum(len(h) for h in d.holders.values()) == d.places == 5
    d.record("h1", 4, now=150.0)  # 100 s after the others were touched: they expire
    assert list(d.touched) == ["h1"] and set(d.holders) == {1, 4} and d.places == 2
    assert d.held_bytes() < held


def test_newcomers_are_named_a_joined_member_not_each_other() -> None:
    """The island the model's liveness check found: newcomers 4 and 5 asking while a joined
    member is alive must be named that member, never each other, even after a dead member
    sent them back to ask again."""
    d = SwarmDirectory(4, random.Random(0))
    assert d.lookup(T, 1, NONE) == NONE  # 1 founds
    d.record(T, 2)  # 2 joined
    for requester in (4, 5):
        assert d.lookup(T, requester, NONE) in (1, 2)
    # 1 is dead: 4 and 5 ask again naming it, and are named 2, the joined member left
    assert d.lookup(T, 4, 1) == 2
    assert d.lookup(T, 5, 1) == 2


def test_with_no_joined_member_left_the_directory_names_one_that_asked() -> None:
    """A directory whose joined members are all reported dead (false suspicions included)
    falls back on nodes that asked, rather than making the requester found a second swarm."""
    d = SwarmDirectory(4, random.Random(0))
    d.lookup(T, 1, NONE)  # 1 founds
    assert d.lookup(T, 2, NONE) == 1
    assert d.lookup(T, 3, 1) == 2  # 1 reported dead: 2 asked, so it is named
    assert d.lookup(T, 2, 3) == NONE  # nobody else: 2 founds, and is recorded as a member
    assert d.members[T] == [2]


@pytest.mark.parametrize("seed", SEEDS)
def test_directory_reservoir_is_bounded_and_holds_joined_members(seed: int) -> None:
    d = SwarmDirectory(4, random.Random(seed))
    for requester in range(100, 300):
        member = d.lookup(T, requester, NONE)
        # only the very first requester finds the directory empty; every later one is named
        # a member that joined before it (the reservoir is never empty again)
        if requester == 100:
            assert member == NONE
        else:
            assert 100 <= member < requester, (requester, member)
            d.record(T, requester)  # its join completes
        assert len(d.members[T]) <= 4
        assert len(set(d.members[T])) == len(d.members[T])
        assert set(d.members[T]) <= set(range(100, requester + 1))
    assert d.seen[T] == 200


def test_directory_reservoir_sample_is_roughly_uniform() -> None:
    """Algorithm R: after n joined members each is kept with probability size/n. Over 2,000
    runs of 40 members and size 4, the first ten and the last ten are kept equally often:
    10 × 4/40 = 1 of them per run, 2,000 in all (sd ≈ 40; 5 sd = 200)."""
    early = late = 0
    for seed in range(2000):
        d = SwarmDirectory(4, random.Random(seed))
        for member in range(40):
            d.record(T, member)
        early += sum(1 for m in d.members[T] if m < 10)
        late += sum(1 for m in d.members[T] if m >= 30)
    assert abs(early - 2000) < 200 and abs(late - 2000) < 200


def test_directory_forgets_a_dead_member() -> None:
    d = SwarmDirectory(4, random.Random(0))
    for member in (10, 11, 12):
        d.record(T, member)
    for _ in range(30):
        assert d.lookup(T, 12, 10) == 11
    assert 10 not in d.members[T]


def test_a_completed_join_is_reported_to_the_contact_which_records_it() -> None:
    n = joined_node(me=5, member=3)
    contact = node(0)
    contact.handle(Start((0,)), 0.0)
    n2 = node(6)
    n2.handle(Start((0,)), 0.0)
    n2.handle(Subscribe(T), 0.0)
    n2.handle(Receive(0, ContactReply(topic=T, member=3)), 0.1)
    out = n2.handle(Receive(3, JoinReply(topic=T)), 0.2)
    assert [(s.dst, s.message) for s in sends(out, SwarmJoined)] == [
        (0, SwarmJoined(topic=T, active=(3,)))
    ]
    contact.handle(Receive(6, SwarmJoined(topic=T, active=(3,))), 0.3)
    assert contact.directory.members[T] == [6]
    assert n.swarms[T].membership.joined  # (the helper's node joined the same way)
    # a node that is not the contact ignores the report
    other = node(7)
    other.handle(Start((0,)), 0.0)
    assert other.handle(Receive(6, SwarmJoined(topic=T)), 0.3) == []
    assert T not in other.directory.members


def test_periodic_announce_asks_for_a_sample_only_with_room_in_the_active_view() -> None:
    """Merge: every ``announce_every``-th shuffle tick a joined member re-announces itself;
    the announce asks for a sample exactly when its active view is not full."""
    h = hv(me=5, announce_every=1)
    h.contact, h.joined = 0, True
    h.active = [2]
    out = h.handle(TimerFired(ShuffleTick()), 0.0)
    assert [(s.dst, s.message) for s in sends(out, SwarmJoined)] == [
        (0, SwarmJoined(topic=T, room=True, periodic=True, active=(2,)))
    ]
    h.active = list(range(10, 10 + h.p.active_size))
    out = h.handle(TimerFired(ShuffleTick()), 10.0)
    assert [s.message for s in sends(out, SwarmJoined)] == [
        SwarmJoined(topic=T, room=False, periodic=True, active=tuple(h.active))
    ]


def test_the_first_announce_every_ticks_announce_then_every_announce_every_th() -> None:
    """A new swarm is still settling: a member announces at each of its first
    ``announce_every`` ticks (the component watch needs fresh views early), then at every
    ``announce_every``-th."""
    h = hv(me=5, announce_every=3)
    h.contact, h.joined = 0, True
    h.active = [2]
    announced = [
        tick
        for tick in range(1, 13)
        if sends(h.handle(TimerFired(ShuffleTick()), 10.0 * tick), SwarmJoined)
    ]
    assert announced == [1, 2, 3, 6, 9, 12]


def two_full_components(contact: GossipNode, now: float = 0.0) -> None:
    """The contact hears the announces of two K4s (active views of 3): {1, 2, 3, 4} and
    {5, 6, 7, 8}, as the swarm figure's split swarms were (announces of completed joins: only a
    periodic one is answered with a bridge)."""
    for group in ((1, 2, 3, 4), (5, 6, 7, 8)):
        for m in group:
            view = tuple(x for x in group if x != m)
            contact.handle(Receive(m, SwarmJoined(topic=T, active=view)), now)


def test_the_contact_answers_a_periodic_announce_of_a_split_swarm_with_a_bridge() -> None:
    """Bridge: the component watch sees two components; a periodic announce from one is
    answered with a member of the other, even with a full active view (no ``room``)."""
    contact = node(0)
    contact.handle(Start((0,)), 0.0)
    two_full_components(contact)
    out = contact.handle(Receive(1, SwarmJoined(topic=T, periodic=True, active=(2, 3, 4))), 1.0)
    (sample,) = [s.message for s in sends(out, SwarmSample)]
    assert sample.bridge and sample.member in (5, 6, 7, 8), sample
    # the link it is about to make counts until its next announce: the rest of its component
    # is not sent across too
    out = contact.handle(Receive(2, SwarmJoined(topic=T, periodic=True, active=(1, 3, 4))), 1.1)
    assert sends(out, SwarmSample) == []
    # a connected swarm gets no bridge: 1's next announce shows the link
    view = (2, 3, sample.member)
    out = contact.handle(Receive(1, SwarmJoined(topic=T, periodic=True, active=view)), 2.0)
    assert sends(out, SwarmSample) == []


def test_the_watch_forgets_old_views_and_stops_past_its_size() -> None:
    """A view older than two announce periods is its member's last (crashed, left); a swarm
    past ``component_watch`` members is not watched (a partial map would show a split)."""
    contact = node(0, component_watch=8)
    contact.handle(Start((0,)), 0.0)
    two_full_components(contact)
    p = contact.params
    late = (2 * p.announce_every + 1) * p.shuffle_interval + 1.0
    # only 1 and 2 announce again: the others' views expire, so no bridge is named
    contact.handle(Receive(2, SwarmJoined(topic=T, periodic=True, active=(1, 3, 4))), late)
    out = contact.handle(Receive(1, SwarmJoined(topic=T, periodic=True, active=(2, 3, 4))), late)
    assert sends(out, SwarmSample) == []
    assert sorted(contact.directory.views[T]) == [1, 2]
    big = node(0, component_watch=7)
    big.handle(Start((0,)), 0.0)
    two_full_components(big)
    assert T in big.directory.unwatched and T not in big.directory.views
    out = big.handle(Receive(1, SwarmJoined(topic=T, periodic=True, active=(2, 3, 4))), 1.0)
    assert sends(out, SwarmSample) == []


def test_an_announced_view_is_kept_to_an_active_view_s_size() -> None:
    """A member cannot grow the contact's watch with a long ``active`` list: the contact keeps
    at most ``active_size`` ids of it."""
    contact = node(0)
    contact.handle(Start((0,)), 0.0)
    long_view = tuple(range(100, 200))
    contact.handle(Receive(7, SwarmJoined(topic=T, active=long_view)), 0.0)
    _at, kept = contact.directory.views[T][7]
    assert kept == long_view[: contact.params.active_size]


def test_a_bridge_is_asked_with_high_priority_even_with_a_full_view_and_a_refill_out() -> None:
    """The member named by a bridge is asked at once, with high priority, whatever the active
    view holds and even while a low-priority refill request is out; its acceptance makes the
    asker drop one random link (the views keep their size)."""
    h = hv(me=5)
    h.joined = True
    h.active = list(range(10, 10 + h.p.active_size))
    h.pending_neighbor = 30
    out = h.handle(Receive(0, SwarmSample(topic=T, member=8, bridge=True)), 0.0)
    assert h.pending_neighbor == 8
    assert [(s.dst, s.message) for s in sends(out, Neighbor)] == [
        (8, Neighbor(topic=T, high_priority=True))
    ]
    out = h.handle(Receive(8, NeighborReply(topic=T, accepted=True)), 0.1)
    assert 8 in h.active and len(h.active) == h.p.active_size
    (dropped,) = [s.dst for s in sends(out, DisconnectRequest)]
    assert dropped in range(10, 10 + h.p.active_size) and dropped in h.passive


def test_contact_answers_an_announce_with_room_by_a_member_other_than_the_announcer() -> None:
    contact = node(0)
    contact.handle(Start((0,)), 0.0)
    for member in (3, 4):
        assert contact.handle(Receive(member, SwarmJoined(topic=T)), 0.0) == []
    for _ in range(20):
        out = contact.handle(Receive(4, SwarmJoined(topic=T, room=True)), 0.0)
        assert [(s.dst, s.message) for s in sends(out, SwarmSample)] == [
            (4, SwarmSample(topic=T, member=3))
        ]
    # alone in the directory: the sample names nobody
    lonely = node(0)
    lonely.handle(Start((0,)), 0.0)
    out = lonely.handle(Receive(4, SwarmJoined(topic=T, room=True)), 0.0)
    assert [s.message for s in sends(out, SwarmSample)] == [SwarmSample(topic=T, member=NONE)]


def test_a_sample_outside_the_active_view_is_asked_for_a_link() -> None:
    """High priority: a full member accepts (the other component may be all full)."""
    h = hv(me=5)
    h.joined = True
    h.active = [2]
    out = h.handle(Receive(0, SwarmSample(topic=T, member=8)), 0.0)
    assert 8 in h.passive and h.pending_neighbor == 8
    assert [(s.dst, s.message) for s in sends(out, Neighbor)] == [
        (8, Neighbor(topic=T, high_priority=True))
    ]
    # already a neighbour, itself, or nobody: nothing to do
    for member in (2, 5, NONE):
        assert h.handle(Receive(0, SwarmSample(topic=T, member=member)), 0.0) == []
    # a Neighbor request already out: the sample waits in the passive view
    out = h.handle(Receive(0, SwarmSample(topic=T, member=9)), 0.0)
    assert 9 in h.passive and not sends(out, Neighbor)


def test_the_contact_samples_its_own_directory_when_it_announces() -> None:
    """The contact announces to nobody; with room in its view it samples its own directory
    (in the components the model found, the contact was in one of them)."""
    directory = SwarmDirectory(4, random.Random(0))
    directory.record(T, 7)
    h = HyParView(0, T, GossipParams(announce_every=1), random.Random(0), directory)
    h.contact, h.joined = 0, True
    h.active = [2]
    out = h.handle(TimerFired(ShuffleTick()), 0.0)
    assert not sends(out, SwarmJoined)
    assert [(s.dst, s.message) for s in sends(out, Neighbor)] == [
        (7, Neighbor(topic=T, high_priority=True))
    ]


def test_contact_node_answers_contact_requests_from_its_directory() -> None:
    c = node(0)
    c.handle(Start((0,)), 0.0)
    out = c.handle(Receive(4, ContactRequest(topic=T)), 0.0)
    assert [(s.dst, s.message) for s in sends(out, ContactReply)] == [
        (4, ContactReply(topic=T, member=NONE))
    ]
    out = c.handle(Receive(5, ContactRequest(topic=T)), 0.0)
    assert [s.message for s in sends(out, ContactReply)] == [ContactReply(topic=T, member=4)]
    assert T not in c.swarms  # the contact answers look-ups only


def test_contact_that_subscribes_starts_the_swarm_and_is_named() -> None:
    c = node(0)
    c.handle(Start((0,)), 0.0)
    c.handle(Subscribe(T), 0.0)
    assert c.swarms[T].membership.joined
    out = c.handle(Receive(4, ContactRequest(topic=T)), 0.0)
    assert [s.message for s in sends(out, ContactReply)] == [ContactReply(topic=T, member=0)]


def test_join_target_down_asks_contact_again_naming_it() -> None:
    n = node(5)
    n.handle(Start((0,)), 0.0)
    n.handle(Subscribe(T), 0.0)
    n.handle(Receive(0, ContactReply(topic=T, member=3)), 0.1)
    assert 3 in n.monitored_peers()
    out = n.handle(PeerDown(3), 0.2)
    assert [s.message for s in sends(out, ContactRequest)] == [ContactRequest(topic=T, dead=3)]
    assert 3 not in n.swarms[T].membership.active
    check_subset(n)


# ============================================================================ Plumtree
def test_broadcast_delivers_hop_zero_gossips_eager_and_announces_lazy() -> None:
    tree = pt(eager=(1, 2), lazy=(3,))
    out = rule_outputs(tree.handle(Broadcast(42, b"m"), 0.0))
    assert out[0] == Delivered(42, b"m", 0)
    assert [(s.dst, s.message) for s in sends(out, Gossip)] == [
        (1, Gossip(topic=T, pub_id=42, round=0, payload=b"m")),
        (2, Gossip(topic=T, pub_id=42, round=0, payload=b"m")),
    ]
    assert [(s.dst, s.message) for s in sends(out, IHave)] == [
        (3, IHave(topic=T, announcements=((42, 0),)))
    ]
    assert tree.handle(Broadcast(42, b"m"), 0.0) == []  # already received


def test_first_gossip_delivers_at_round_plus_one_and_forwards() -> None:
    tree = pt(eager=(1, 2), lazy=(3, 4))
    out = tree.handle(Receive(4, Gossip(topic=T, pub_id=7, round=2, payload=b"x")), 0.0)
    assert [o for o in out if isinstance(o, Delivered)] == [Delivered(7, b"x", 3)]
    assert [(s.dst, s.message) for s in sends(out, Gossip)] == [
        (1, Gossip(topic=T, pub_id=7, round=3, payload=b"x")),
        (2, Gossip(topic=T, pub_id=7, round=3, payload=b"x")),
    ]
    assert [s.dst for s in sends(out, IHave)] == [3]
    assert sends(out, IHave)[0].message == IHave(topic=T, announcements=((7, 3),))
    assert 4 in tree.eager and 4 not in tree.lazy  # the sender becomes eager


def test_duplicate_gossip_prunes_the_sender() -> None:
    tree = pt(eager=(1, 2))
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    out = tree.handle(Receive(2, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    assert not [o for o in out if isinstance(o, Delivered)]
    assert [(s.dst, s.message) for s in sends(out, Prune)] == [(2, Prune(topic=T))]
    assert tree.lazy == [2] and tree.eager == [1]


def test_prune_guard_spares_a_link_that_recently_carried_a_first_copy() -> None:
    """prune_guard (experimental): 2 brought message 8 first at t = 1.0, so its
    duplicate of 7 at t = 1.5 (inside a 1-s guard) prunes nothing; its duplicate of 9 at
    t = 2.5 (outside) prunes it as Plumtree does. 3 never brought a first copy: pruned."""
    tree = pt(eager=(1, 2, 3), prune_guard=1.0)
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    tree.handle(Receive(2, Gossip(topic=T, pub_id=8, round=0, payload=b"x")), 1.0)
    out = tree.handle(Receive(2, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 1.5)
    assert not sends(out, Prune) and 2 in tree.eager
    out = tree.handle(Receive(3, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 1.5)
    assert [s.dst for s in sends(out, Prune)] == [3] and 3 in tree.lazy
    tree.handle(Receive(1, Gossip(topic=T, pub_id=9, round=0, payload=b"x")), 2.4)
    out = tree.handle(Receive(2, Gossip(topic=T, pub_id=9, round=0, payload=b"x")), 2.5)
    assert [s.dst for s in sends(out, Prune)] == [2] and tree.lazy == [2, 3]


def test_prune_makes_the_sender_lazy() -> None:
    tree = pt(eager=(1, 2))
    assert tree.handle(Receive(2, Prune(topic=T)), 0.0) == []
    assert tree.eager == [1] and tree.lazy == [2]


def test_ihave_starts_timeout1_then_grafts_and_starts_timeout2() -> None:
    tree = pt(eager=(1,), lazy=(3, 4))
    out = rule_outputs(tree.handle(Receive(3, IHave(topic=T, announcements=((7, 4),))), 0.0))
    assert out == [SetTimer(0.5, SendGraft(7, 1))]
    assert (
        tree.handle(Receive(4, IHave(topic=T, announcements=((7, 2),))), 0.0) == []
    )  # a timer runs
    out = tree.handle(TimerFired(SendGraft(7, 1)), 0.0)
    assert SetTimer(0.1, SendGraft(7, 2)) in out
    assert [(s.dst, s.message) for s in sends(out, Graft)] == [
        (3, Graft(topic=T, pub_id=7, round=4, request=True))
    ]
    assert 3 in tree.eager and 3 not in tree.lazy
    out = tree.handle(TimerFired(SendGraft(7, 2)), 0.0)  # timeout2: the next announcer
    assert [(s.dst, s.message) for s in sends(out, Graft)] == [
        (4, Graft(topic=T, pub_id=7, round=2, request=True))
    ]


def test_stale_graft_timer_ignored_after_the_message_arrived() -> None:
    tree = pt(eager=(1,), lazy=(3,))
    tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0)
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    assert tree.handle(TimerFired(SendGraft(7, 1)), 0.0) == []
    assert tree.lazy == [3]


def test_superseded_graft_timer_generation_is_ignored() -> None:
    tree = pt(eager=(1,), lazy=(3, 4))
    tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0)
    tree.handle(Receive(4, IHave(topic=T, announcements=((7, 0),))), 0.0)
    tree.handle(TimerFired(SendGraft(7, 1)), 0.0)
    assert tree.handle(TimerFired(SendGraft(7, 1)), 0.0) == []  # fired twice: the second is stale


def test_ihave_for_received_message_starts_no_timer() -> None:
    tree = pt(eager=(1,), lazy=(3,))
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    assert tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0) == []


def test_graft_with_request_is_answered_with_gossip() -> None:
    tree = pt(eager=(1,), lazy=(3,))
    tree.handle(Broadcast(7, b"x"), 0.0)
    out = tree.handle(Receive(3, Graft(topic=T, pub_id=7, round=4, request=True)), 0.0)
    assert [(s.dst, s.message) for s in sends(out, Gossip)] == [
        (3, Gossip(topic=T, pub_id=7, round=4, payload=b"x"))
    ]
    assert 3 in tree.eager and 3 not in tree.lazy


def test_graft_without_request_or_unknown_id_only_makes_eager() -> None:
    tree = pt(eager=(1,), lazy=(3, 4))
    tree.handle(Broadcast(7, b"x"), 0.0)
    assert tree.handle(Receive(3, Graft(topic=T, pub_id=7, round=0, request=False)), 0.0) == []
    assert tree.handle(Receive(4, Graft(topic=T, pub_id=99, round=0, request=True)), 0.0) == []
    assert tree.eager == [1, 3, 4] and tree.lazy == []


def test_grafts_for_ids_not_held_are_bounded_per_neighbour_and_second() -> None:
    """``max_unknown_grafts`` (not in the paper): past the bound in one second, a
    neighbour's requests for ids not held are ignored, link unchanged; requests for held ids
    are always answered; the next second starts the count over, per neighbour."""
    tree = pt(eager=(1,), lazy=(3, 4), max_unknown_grafts=2)
    tree.handle(Broadcast(7, b"x"), 0.0)

    def ask(peer: int, pub_id: int, now: float) -> list[BroadcastOutput]:
        return tree.handle(Receive(peer, Graft(topic=T, pub_id=pub_id, round=0, request=True)), now)

    assert ask(3, 90, 0.0) == [] and ask(3, 91, 0.1) == []  # within the bound: made eager
    tree.handle(Receive(3, Prune(topic=T)), 0.2)
    assert 3 in tree.lazy
    assert ask(3, 92, 0.3) == [] and 3 in tree.lazy  # the third in this second: ignored
    assert tree.graft_over_limit == 1
    assert sends(ask(3, 7, 0.4), Gossip) and 3 in tree.eager  # held: answered regardless
    assert ask(4, 93, 0.5) == [] and 4 in tree.eager  # another neighbour, its own count
    tree.handle(Receive(3, Prune(topic=T)), 0.6)
    assert ask(3, 94, 1.1) == [] and 3 in tree.eager  # a new second
    assert tree.graft_over_limit == 1


def test_optimization_grafts_announcer_and_prunes_parent_ihave_after() -> None:
    tree = pt(eager=(1,), lazy=(3,), optimization_threshold=3)
    tree.handle(
        Receive(1, Gossip(topic=T, pub_id=7, round=5, payload=b"x")), 0.0
    )  # delivered at hop 6
    out = tree.handle(
        Receive(3, IHave(topic=T, announcements=((7, 1),))), 0.0
    )  # would be hop 2: 4 ≥ 3
    assert [(s.dst, s.message) for s in sends(out, Graft)] == [
        (3, Graft(topic=T, pub_id=7, round=1, request=False))
    ]
    assert [s.dst for s in sends(out, Prune)] == [1]
    assert tree.eager == [3] and tree.lazy == [1]


def test_optimization_with_announcement_before_the_message() -> None:
    tree = pt(eager=(1,), lazy=(3,), optimization_threshold=3)
    tree.handle(Receive(3, IHave(topic=T, announcements=((7, 1),))), 0.0)
    out = tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=5, payload=b"x")), 0.0)
    assert [s.dst for s in sends(out, Graft)] == [3]
    assert [s.dst for s in sends(out, Prune)] == [1]
    assert tree.eager == [3] and tree.lazy == [1]


def test_optimization_below_threshold_does_nothing() -> None:
    tree = pt(eager=(1,), lazy=(3,), optimization_threshold=3)
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=5, payload=b"x")), 0.0)  # hop 6
    assert (
        tree.handle(Receive(3, IHave(topic=T, announcements=((7, 3),))), 0.0) == []
    )  # hop 4: gain 2 < 3
    assert tree.eager == [1] and tree.lazy == [3]


def test_optimization_off_does_nothing() -> None:
    tree = pt(eager=(1,), lazy=(3,), optimization=False, optimization_threshold=1)
    tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=9, payload=b"x")), 0.0)
    assert tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0) == []


def test_flood_mode_never_prunes_nor_announces() -> None:
    tree = pt(eager=(1, 2, 3), flood=True)
    out = tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    assert sorted(s.dst for s in sends(out, Gossip)) == [2, 3]
    out = tree.handle(Receive(2, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 0.0)
    assert out == []
    assert tree.eager == [1, 2, 3] and tree.lazy == []
    out = tree.handle(Broadcast(8, b"y"), 0.0)
    assert sorted(s.dst for s in sends(out, Gossip)) == [1, 2, 3] and not sends(out, IHave)


def test_ihave_batching_waits_for_the_interval_and_sends_one_batch() -> None:
    """One flush timer per node serves every lazy peer (a node process wakes once per
    interval, not once per lazy peer); each peer gets its announcements in one IHAVE, the
    announcements of the messages pushed while it was lazy (Algorithm 1's lazyQueue): a peer
    that turned eager in the meantime still hears of the messages it was not pushed, and of
    none pushed to it since."""
    tree = pt(eager=(1,), lazy=(3, 4, 5), ihave_batch_interval=0.25)
    out1 = tree.handle(Broadcast(7, b"x"), 0.0)
    out2 = tree.handle(Receive(1, Gossip(topic=T, pub_id=8, round=2, payload=b"y")), 0.1)
    # 5 brings a first copy: it turns eager and is not announced to
    out3 = tree.handle(Receive(5, Gossip(topic=T, pub_id=9, round=4, payload=b"z")), 0.2)
    assert not any(sends(o, IHave) for o in (out1, out2, out3))
    timers = [o for o in rule_outputs(out1 + out2 + out3) if isinstance(o, SetTimer)]
    assert timers == [SetTimer(0.25, FlushIHave())]
    out = tree.handle(TimerFired(timers[0].timer), 0.25)
    assert [(s.dst, s.message) for s in out if isinstance(s, Send)] == [
        (3, IHave(topic=T, announcements=((7, 0), (8, 3), (9, 5)))),
        (4, IHave(topic=T, announcements=((7, 0), (8, 3), (9, 5)))),
        # 5 was lazy when 7 and 8 went out, and its copy of 9 says nothing of them
        (5, IHave(topic=T, announcements=((7, 0), (8, 3)))),
    ]
    assert tree.handle(TimerFired(timers[0].timer), 0.3) == []  # queues drained
    out4 = tree.handle(Broadcast(10, b"w"), 0.4)  # a new batch, a new timer
    assert [o for o in rule_outputs(out4) if isinstance(o, SetTimer)] == [
        SetTimer(0.25, FlushIHave())
    ]


def test_neighbor_down_drops_peer_and_its_announcements() -> None:
    tree = pt(eager=(1,), lazy=(3,))
    tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0)
    tree.handle(NeighborDown(3), 0.0)
    assert tree.lazy == []
    assert tree.handle(TimerFired(SendGraft(7, 1)), 0.0) == []  # nobody left to graft


# ============================================================================ GossipNode
def test_relay_publish_buffers_until_join_reply_then_broadcasts_without_delivering() -> None:
    n = node(5)
    n.handle(Start((0,)), 0.0)
    out = n.handle(Publish(T, 11, b"p"), 0.0)
    assert [s.dst for s in sends(out, ContactRequest)] == [0]
    assert not sends(out, Gossip) and not [o for o in out if isinstance(o, Deliver)]
    out = n.handle(Receive(0, ContactReply(topic=T, member=3)), 0.1)
    assert [s.dst for s in sends(out, Join)] == [3] and not sends(out, Gossip)
    out = n.handle(Publish(T, 12, b"q"), 0.15)
    assert out == []  # still buffered
    out = n.handle(Receive(3, JoinReply(topic=T)), 0.2)
    assert [(s.dst, s.message) for s in sends(out, Gossip)] == [
        (3, Gossip(topic=T, pub_id=11, round=0, payload=b"p")),
        (3, Gossip(topic=T, pub_id=12, round=0, payload=b"q")),
    ]
    assert not [o for o in out if isinstance(o, Deliver)]
    out = n.handle(Receive(3, Gossip(topic=T, pub_id=13, round=0, payload=b"r")), 0.3)
    assert not [o for o in out if isinstance(o, Deliver)]  # a relay never delivers
    assert list(n.subscriptions()) == []
    check_subset(n)


def test_subscriber_publish_delivers_locally_at_hop_zero() -> None:
    n = joined_node()
    out = n.handle(Publish(T, 11, b"p"), 1.0)
    assert [o for o in out if isinstance(o, Deliver)] == [Deliver(T, 11, b"p", 0)]
    assert [s.dst for s in sends(out, Gossip)] == [3]


def test_first_member_publishes_at_once() -> None:
    n = node(5)
    n.handle(Start((0,)), 0.0)
    n.handle(Subscribe(T), 0.0)
    n.handle(Receive(0, ContactReply(topic=T, member=NONE)), 0.1)
    out = n.handle(Publish(T, 1, b"p"), 0.2)
    assert [o for o in out if isinstance(o, Deliver)] == [Deliver(T, 1, b"p", 0)]


def test_unsubscribe_disconnects_the_active_view() -> None:
    n = joined_node()
    n.handle(Receive(4, Neighbor(topic=T, high_priority=False)), 0.5)
    out = n.handle(Unsubscribe(T), 1.0)
    assert sorted(s.dst for s in sends(out, DisconnectRequest)) == [3, 4]
    assert sorted(o.peer for o in out if isinstance(o, Disconnect)) == [3, 4]
    assert T not in n.swarms
    out = n.handle(Receive(3, Gossip(topic=T, pub_id=1, round=0, payload=b"")), 1.1)
    assert [s.dst for s in sends(out, DisconnectRequest)] == [3]
    assert not [o for o in out if isinstance(o, Deliver)]


def test_leave_disconnects_every_swarm_and_ignores_later_commands() -> None:
    n = joined_node()
    n.handle(Receive(0, ContactReply(topic="u", member=NONE)), 0.3)  # no swarm u: ignored
    n.handle(Subscribe("u"), 0.3)
    n.handle(Receive(0, ContactReply(topic="u", member=8)), 0.4)
    out = n.handle(Leave(), 1.0)
    # type: ignore[attr-defined]
    assert sorted((s.dst, s.message.topic) for s in sends(out, DisconnectRequest)) == [
        (3, T),
        (8, "u"),
    ]
    assert n.swarms == {}
    assert n.handle(Subscribe(T), 1.1) == [] and n.handle(Publish(T, 1, b""), 1.2) == []


def test_traffic_from_non_active_peer_is_delivered_but_answered_with_disconnect() -> None:
    n = joined_node()
    out = n.handle(Receive(7, Gossip(topic=T, pub_id=9, round=1, payload=b"z")), 1.0)
    assert [o for o in out if isinstance(o, Deliver)] == [Deliver(T, 9, b"z", 2)]
    assert [s.dst for s in sends(out, DisconnectRequest)] == [7]
    assert [s.dst for s in sends(out, Gossip)] == [3]  # forwarded to the real neighbour
    assert not sends(out, Prune)
    check_subset(n)
    out = n.handle(Receive(7, Gossip(topic=T, pub_id=9, round=1, payload=b"z")), 1.1)
    assert [s.dst for s in sends(out, DisconnectRequest)] == [7]
    assert not [o for o in out if isinstance(o, Deliver)] and not sends(out, Prune)
    out = n.handle(Receive(7, IHave(topic=T, announcements=((10, 0),))), 1.2)
    assert [s.dst for s in sends(out, DisconnectRequest)] == [7] and len(out) == 1
    out = n.handle(Receive(7, Graft(topic=T, pub_id=9, round=0, request=True)), 1.3)
    assert [s.dst for s in sends(out, DisconnectRequest)] == [7] and len(out) == 1
    check_subset(n)


def test_membership_offer_to_a_non_member_is_refused() -> None:
    n = node(5)
    n.handle(Start((0,)), 0.0)
    for msg in (Join(topic=T), ForwardJoinAccept(topic=T), Neighbor(topic=T, high_priority=True)):
        out = n.handle(Receive(7, msg), 0.0)
        assert [(s.dst, s.message) for s in sends(out, DisconnectRequest)] == [
            (7, DisconnectRequest(topic=T))
        ]
    assert T not in n.swarms


def test_plumtree_peers_follow_the_active_view() -> None:
    """eager ∪ lazy ⊆ active through joins, prunes, disconnects, failures and grafts."""
    n = joined_node()
    check_subset(n)
    steps: list[object] = [
        Receive(4, Neighbor(topic=T, high_priority=False)),
        Receive(6, ForwardJoinAccept(topic=T)),
        Receive(4, Prune(topic=T)),
        Receive(6, IHave(topic=T, announcements=((1, 0),))),
        Receive(4, IHave(topic=T, announcements=((1, 0),))),
        Receive(6, DisconnectRequest(topic=T)),
        TimerFired(SendGraft(1, 1)),
        PeerDown(4),
        Receive(9, Join(topic=T)),
        Receive(9, Gossip(topic=T, pub_id=1, round=0, payload=b"")),
        Receive(3, Gossip(topic=T, pub_id=1, round=0, payload=b"")),
        Receive(3, Prune(topic=T)),
        Receive(9, Graft(topic=T, pub_id=1, round=0, request=True)),
    ]
    for step in steps:
        n.handle(step, 1.0)  # type: ignore[arg-type]
        check_subset(n)
    tree = n.swarms[T].broadcast
    assert set(tree.eager) | set(tree.lazy) == set(n.swarms[T].membership.active) == {3, 9}


def test_peer_down_reaches_every_swarm() -> None:
    n = joined_node()
    n.handle(Subscribe("u"), 0.3)
    n.handle(Receive(0, ContactReply(topic="u", member=3)), 0.4)
    n.handle(Receive(3, JoinReply(topic="u")), 0.5)
    n.handle(PeerDown(3), 1.0)
    assert all(3 not in s.membership.active for s in n.swarms.values())
    check_subset(n)


def test_join_timeout_tells_the_abandoned_member_to_disconnect() -> None:
    n = node(5)
    n.handle(Start((0,)), 0.0)
    n.handle(Subscribe(T), 0.0)
    out = n.handle(Receive(0, ContactReply(topic=T, member=3)), 0.1)
    (timer,) = [
        o.timer
        for o in out
        if isinstance(o, SetTimer)
        and isinstance(o.timer, SwarmTimer)
        and isinstance(o.timer.timer, JoinTimeout)
    ]
    # member 3 got the Join and added 5 to its active view; its JoinReply is slow
    out = n.handle(TimerFired(timer), 5.1)
    # HyParView._join_timeout is the specified behaviour: with no JoinReply in join_timeout
    # the node abandons the join. The member may already hold it in its active view, so the
    # node DISCONNECTs it at once (before asking the contact again) and keeps it only as a
    # passive node. The JoinReply that arrives later no longer matches pending_join and is
    # ignored: the node does not re-link, so the DISCONNECT it sent stays true.
    assert [(s.dst, s.message) for s in sends(out, DisconnectRequest)] == [
        (3, DisconnectRequest(topic=T))
    ], "5 dropped 3 silently: 3 keeps a one-sided link to 5"
    assert [(s.dst, s.message) for s in sends(out, ContactRequest)] == [
        (0, ContactRequest(topic=T, dead=NONE))
    ]
    late = n.handle(Receive(3, JoinReply(topic=T)), 5.2)
    assert late == []
    hv_ = n.swarms[T].membership
    assert hv_.active == [] and hv_.passive == [3]
    assert hv_.pending_join == NONE and not hv_.joined
    tree = n.swarms[T].broadcast
    assert tree.eager == [] and tree.lazy == []


def test_accepted_neighbor_reply_after_unsubscribe_is_refused() -> None:
    """A node that unsubscribed while its Neighbor request was pending must refuse the late
    acceptance, or the accepter keeps a one-sided active link to a non-member."""
    n = joined_node()
    hv_ = n.swarms[T].membership
    hv_.passive = [6]
    out = n.handle(PeerDown(3), 1.0)
    assert [s.dst for s in sends(out, Neighbor)] == [6]
    n.handle(Unsubscribe(T), 1.1)  # the request to 6 is in flight; 6 is not in the view
    out = n.handle(Receive(6, NeighborReply(topic=T, accepted=True)), 1.2)
    assert [(s.dst, s.message) for s in sends(out, DisconnectRequest)] == [
        (6, DisconnectRequest(topic=T))
    ]


def test_forward_join_invitations_crossing_a_disconnect_keep_links_symmetric() -> None:
    """Two random walks end at each other's node: at b (7) for new node 2 and at a (2) for
    new node 7; each invites the other, and each takes the other's invitation with a Neighbor
    request. b then evicts a (DISCONNECT, for a high-priority request of 9) while messages are
    still in flight; links are FIFO per direction, but the two directions cross."""
    a = hv(me=2, active_view=2)
    b = hv(me=7, active_view=1)
    a.active, b.active = [4], [6]
    for node in (a, b):  # both still take invitations (their own joins are recent)
        node.invited_until, node.invites_left = 100.0, 2

    def to(out: list[MembershipOutput], dst: int) -> list[Message]:
        return [o.message for o in out if isinstance(o, Send) and o.dst == dst]

    b_to_a = to(b.handle(Receive(6, ForwardJoin(topic=T, new_node=2, ttl=0)), 0.0), 2)
    a_to_b = to(a.handle(Receive(4, ForwardJoin(topic=T, new_node=7, ttl=0)), 0.0), 7)
    assert b.active == [6] and a.active == [4], "an invited node is not in the view yet"
    a_to_b += to(a.handle(Receive(7, b_to_a.pop(0)), 0.0), 7)  # b's invitation: a asks b
    b_to_a += to(b.handle(Receive(2, a_to_b.pop(0)), 0.0), 2)  # a's invitation: b asks a
    b_to_a += to(b.handle(Receive(2, a_to_b.pop(0)), 0.0), 2)  # a's request: b invited a
    assert b.active == [2]
    b_to_a += to(b.handle(Receive(9, Neighbor(topic=T, high_priority=True)), 0.0), 2)
    assert b.active == [9]  # full: a evicted, its DISCONNECT in flight behind the reply
    for _ in range(20):  # quiesce: deliver what is still in flight, FIFO per direction
        if not a_to_b and not b_to_a:
            break
        if b_to_a:
            a_to_b += to(a.handle(Receive(7, b_to_a.pop(0)), 0.0), 7)
        if a_to_b:
            b_to_a += to(b.handle(Receive(2, a_to_b.pop(0)), 0.0), 2)
    assert not b_to_a and not a_to_b
    assert (2 in b.active) == (7 in a.active), f"b {b.active} a {a.active}"


def test_shuffle_over_a_one_sided_link_is_answered_with_disconnect() -> None:
    """Every shuffle hop uses an active link, so a Shuffle from a node outside the active view
    means that node holds a link we do not: we tell it to drop it (and still serve the walk)."""
    a = hv(me=2, shuffle_ttl=1)
    a.active = [4]
    a.passive = [5, 6]
    out = a.handle(Receive(7, Shuffle(topic=T, origin=7, nodes=(7, 8), ttl=1)), 0.0)
    assert [s.dst for s in sends(out, DisconnectRequest)] == [7]
    assert [s.dst for s in sends(out, ShuffleReply)] == [7]
    out = a.handle(Receive(4, Shuffle(topic=T, origin=4, nodes=(4,), ttl=1)), 0.0)
    assert not sends(out, DisconnectRequest)


# ============================================================ Plumtree: timers and the cache
def graft_timers(out: list[Output]) -> list[SwarmTimer]:
    return [
        o.timer
        for o in out
        if isinstance(o, SetTimer)
        and isinstance(o.timer, SwarmTimer)
        and isinstance(o.timer.timer, SendGraft)
    ]


def test_graft_timer_of_an_earlier_instance_cannot_fire_in_the_new_one() -> None:
    """The GRAFT epoch hole: IHAVE(7) starts a graft timer; the node unsubscribes and
    subscribes again, and the new instance hears IHAVE(7) too. The old instance's timer
    (same pub_id, same generation) must not make the new one graft early."""
    n = joined_node()
    n.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 1.0)
    # the announcement came over an active link (3 is the member we joined through)
    (old,) = graft_timers(n.handle(Receive(3, IHave(topic=T, announcements=((8, 0),))), 1.0))
    n.handle(Unsubscribe(T), 1.1)
    n.handle(Subscribe(T), 1.2)
    n.handle(Receive(0, ContactReply(topic=T, member=4)), 1.3)
    n.handle(Receive(4, JoinReply(topic=T)), 1.4)
    (new,) = graft_timers(n.handle(Receive(4, IHave(topic=T, announcements=((8, 0),))), 1.45))
    assert new.timer == old.timer and new.epoch == old.epoch + 1
    assert n.handle(TimerFired(old), 1.5) == []  # the old instance's timer: dropped
    out = n.handle(TimerFired(new), 1.95)
    assert [(s.dst, s.message) for s in sends(out, Graft)] == [
        (4, Graft(topic=T, pub_id=8, round=0, request=True))
    ]


def test_cache_keeps_payloads_for_payload_retention_then_stops_answering_grafts() -> None:
    tree = pt(eager=(1,), lazy=(3,), payload_retention=30.0, id_retention=90.0, evict_slack=1.0)
    out = tree.handle(Receive(1, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 10.0)
    (evict,) = [o for o in out if isinstance(o, SetTimer) and isinstance(o.timer, EvictCache)]
    assert evict.after == 30.0
    graft = Graft(topic=T, pub_id=7, round=1, request=True)
    assert sends(tree.handle(Receive(3, graft), 20.0), Gossip)  # within retention: answered
    out = tree.handle(TimerFired(EvictCache()), 40.0)
    assert 7 not in tree.payloads and 7 in tree.received  # payload gone, id kept
    assert [o.after for o in out if isinstance(o, SetTimer)] == [60.0]  # the id's expiry
    assert not sends(tree.handle(Receive(3, graft), 41.0), Gossip)
    # a duplicate is still recognised: pruned, not delivered
    out = tree.handle(Receive(3, Gossip(topic=T, pub_id=7, round=0, payload=b"x")), 50.0)
    assert not [o for o in out if isinstance(o, Delivered)] and sends(out, Prune)
    out = tree.handle(TimerFired(EvictCache()), 100.0)
    assert tree.received == {} and out == []  # empty cache: no timer left running


def test_cache_evicts_announcements_of_messages_that_never_came() -> None:
    tree = pt(eager=(1,), lazy=(3,), payload_retention=5.0, id_retention=10.0, evict_slack=1.0)
    out = tree.handle(Receive(3, IHave(topic=T, announcements=((7, 0),))), 0.0)
    assert [o.after for o in out if isinstance(o, SetTimer) and isinstance(o.timer, EvictCache)]
    tree.handle(TimerFired(SendGraft(7, 1)), 0.5)
    tree.handle(TimerFired(EvictCache()), 5.0)
    # not evicted yet (id_retention is 10 s): the graft timer took the one announcement, so
    # the id is still missing with none left, and the second graft timer is the one pending
    assert tree.missing == {7: []} and tree.graft_generation == {7: 2}
    tree.handle(TimerFired(EvictCache()), 10.0)
    assert 7 not in tree.missing and 7 not in tree.graft_generation


@pytest.mark.parametrize("seed", range(5))
def test_cache_stays_bounded_under_a_long_stream_with_one_eviction_timer(seed: int) -> None:
    """A node that receives 10 publications a second for an hour holds only the last
    id_retention seconds of ids and payload_retention seconds of payloads, with never more
    than one eviction timer pending."""
    rng = random.Random(seed)
    tree = pt(eager=(1,), lazy=(3,))
    p = tree.p
    timers: list[tuple[float, EvictCache]] = []
    peak = 0
    for i in range(36_000):
        now = i / 10.0
        while timers and timers[0][0] <= now:
            when, timer = timers.pop(0)
            out = tree.handle(TimerFired(timer), when)
            timers += [(when + o.after, o.timer) for o in out if isinstance(o, SetTimer)]  # type: ignore[misc]
        out = tree.handle(
            Receive(1, Gossip(topic=T, pub_id=i, round=rng.randrange(5), payload=b"p")), now
        )
        timers += [
            (now + o.after, o.timer)  # type: ignore[misc]
            for o in out
            if isinstance(o, SetTimer) and isinstance(o.timer, EvictCache)
        ]
        timers.sort(key=lambda x: x[0])
        assert len(timers) <= 1
        peak = max(peak, len(tree.received))
    assert peak <= (p.id_retention + p.evict_slack) * 10 + 1
    assert len(tree.payloads) <= (p.payload_retention + p.evict_slack) * 10 + 1


def test_cache_is_bounded_in_bytes_oldest_first_and_the_bytes_are_counted() -> None:
    """``cache_bytes`` (not in the paper): an insider publishing fast cannot grow a
    swarm's cache past it. The oldest payloads go first, before their retention, and stop
    answering GRAFTs; their ids stay (duplicates are still recognised); held_bytes says what
    is left, payloads and ids."""
    tree = pt(eager=(1,), lazy=(3,), cache_bytes=1000, payload_retention=30.0)
    for i in range(25):
        tree.handle(Receive(1, Gossip(topic=T, pub_id=i, round=0, payload=b"p" * 100)), i / 10)
        assert tree.payload_bytes == sum(map(len, tree.payloads.values())) <= 1000
    assert sorted(tree.payloads) == list(range(15, 25)) and tree.cache_evicted_early == 15
    assert len(tree.received) == 25
    assert tree.held_bytes() == 1000 + ID_BYTES * 25
    old, kept = (Graft(topic=T, pub_id=n, round=1, request=True) for n in (3, 24))
    assert not sends(tree.handle(Receive(3, old), 3.0), Gossip)
    assert sends(tree.handle(Receive(3, kept), 3.0), Gossip)
    # one payload over the bound on its own is kept until its retention (it must be relayed)
    tree.handle(Receive(1, Gossip(topic=T, pub_id=99, round=0, payload=b"q" * 5000)), 3.0)
    assert list(tree.payloads) == [99] and tree.payload_bytes == 5000
    # retention's eviction counts the bytes out too
    tree.handle(TimerFired(EvictCache()), 40.0)
    assert tree.payloads == {} and tree.payload_bytes == 0


def test_the_caches_of_all_a_nodes_swarms_share_one_bound() -> None:
    """``cache_bytes`` is per node: the adding swarm drops its own oldest first, then the
    other swarms' oldest; the node's caches never hold more than the bound or the one payload
    just added; a swarm left takes its bytes with it."""
    n = node(5, cache_bytes=1000)
    n.handle(Start((0,)), 0.0)
    for topic in (T, "u"):
        n.handle(Subscribe(topic), 0.0)
        n.handle(Receive(0, ContactReply(topic=topic, member=NONE)), 0.1)
    t, u = n.swarms[T].broadcast, n.swarms["u"].broadcast
    for i in range(8):
        n.handle(Publish(T, i, b"t" * 100), 0.2)
    for i in range(5):
        n.handle(Publish("u", 100 + i, b"u" * 100), 0.3)
    # u made room from its own, down to 7/8 of the bound (875): its newest stays
    assert (t.payload_bytes, u.payload_bytes) == (800, 100)
    assert sorted(u.payloads) == [104] and u.cache_evicted_early == 4
    n.handle(Publish("u", 200, b"U" * 1500), 0.4)  # over the bound on its own
    assert list(u.payloads) == [200] and t.payloads == {}  # t's oldest went too
    assert t.payload_bytes + u.payload_bytes == 1500
    assert n.held_bytes() == 1500 + ID_BYTES * (len(t.received) + len(u.received))
    n.handle(Publish(T, 9, b"t" * 100), 0.5)  # t adds: u's payload goes, the bound holds
    assert (t.payload_bytes, u.payload_bytes) == (100, 0)
    n.handle(Unsubscribe(T), 0.6)
    assert u.budget is not None and u.budget.used == 0 and t.budget is None


@pytest.mark.parametrize(
    "bad", [{"prune_guard": -0.5}, {"fanout": 0}, {"announce_every": -1}, {"prwl": 9}]
)
def test_bad_parameters_are_refused_by_name(bad: dict[str, object]) -> None:
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        GossipParams(**bad)  # type: ignore[arg-type]
