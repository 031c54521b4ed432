"""Example tests for the rooted tree (gossip ``tree = "rooted"``), one or more per
rule of :mod:`pubmesh.proto.gossip.rooted`'s essay: each drives ``Plumtree.handle`` from a
state built by hand and checks the outputs and the state afterwards. No simulator."""

from __future__ import annotations

from pubmesh.proto.core import Output, Receive, Send, SetTimer, TimerFired
from pubmesh.proto.gossip.hyparview import NeighborDown, NeighborUp
from pubmesh.proto.gossip.params import GossipParams
from pubmesh.proto.gossip.plumtree import Gossip, Plumtree, Prune
from pubmesh.proto.gossip.rooted import (
    INF,
    NONE,
    Beacon,
    BeaconTick,
    RoundDue,
    RoundRequest,
)

T = "t"
B = 2.0  # beacon_interval
TIMEOUT = 6.0  # root_timeout
TTL = 2.0  # temp_ttl


def rooted(me: int, *peers: int, now: float = 0.0) -> Plumtree:
    """A member ``me`` with ``peers`` in its active view, each having sent no beacon yet."""
    tree = Plumtree(
        me,
        T,
        GossipParams(tree="rooted", beacon_interval=B, root_timeout=TIMEOUT, temp_ttl=TTL),
    )
    for peer in peers:
        tree.handle(NeighborUp(peer), now)
    return tree


def beacon(root: int, seq: int, dist: int, parent: int) -> Beacon:
    return Beacon(topic=T, root=root, seq=seq, dist=dist, parent=parent)


def hear(tree: Plumtree, src: int, b: Beacon, now: float) -> list[Output]:
    return tree.handle(Receive(src, b), now)  # type: ignore[return-value]


def beacons(out: list[Output]) -> dict[int, Beacon]:
    found = {o.dst: o.message for o in out if isinstance(o, Send) and type(o.message) is Beacon}
    return found  # type: ignore[return-value]


def place(tree: Plumtree) -> tuple[int, int, int, int]:
    rt = tree.rt
    assert rt is not None
    return rt.root, rt.seq, rt.dist, rt.parent


def attached(me: int = 50) -> Plumtree:
    """``me`` in root 1's round 5 at dist 2 through parent 10; neighbours 10 (dist 1), 11
    (dist 1), 12 (dist 2), 13 (dist 3, our child)."""
    tree = rooted(me, 10, 11, 12, 13)
    hear(tree, 10, beacon(1, 5, 1, 1), 0.1)
    hear(tree, 11, beacon(1, 5, 1, 1), 0.1)
    hear(tree, 12, beacon(1, 5, 2, 11), 0.1)
    hear(tree, 13, beacon(1, 5, 3, me), 0.1)
    assert place(tree) == (1, 5, 2, 10)
    return tree


def test_a_new_neighbour_gets_our_beacon_and_a_temporary_eager_link() -> None:
    tree = rooted(50)
    out = tree.handle(NeighborUp(7), 0.0)
    assert beacons(out) == {7: beacon(50, 0, 0, NONE)}  # alone: our own root
    assert [o for o in out if isinstance(o, SetTimer) and type(o.timer) is BeaconTick]
    assert tree.eager == [7] and tree.temp == {7: TTL}


def test_a_lower_root_is_adopted_at_once_and_every_neighbour_told() -> None:
    tree = rooted(50, 10, 11, 12)
    out = hear(tree, 11, beacon(3, 9, 4, 20), 1.0)
    assert place(tree) == (3, 9, 5, 11)
    assert beacons(out) == dict.fromkeys((10, 11, 12), beacon(3, 9, 5, 11))
    # a higher root changes nothing and is not passed on
    out = hear(tree, 12, beacon(40, 100, 0, NONE), 1.1)
    assert place(tree) == (3, 9, 5, 11) and beacons(out) == {}


def test_eager_links_are_the_tree_links_once_the_temporary_ones_expire() -> None:
    tree = attached()
    assert tree.eager == [10, 11, 12, 13]  # NeighborUp made them temporary at t=0
    hear(tree, 12, beacon(1, 5, 2, 11), TTL + 0.1)  # any event after the ttl
    assert tree.eager == [10, 13] and tree.lazy == [11, 12]  # parent and child


def test_a_new_round_waits_for_the_parent() -> None:
    tree = attached()
    out = hear(tree, 11, beacon(1, 6, 1, 1), 2.0)
    assert place(tree) == (1, 5, 2, 10) and beacons(out) == {}  # not from 11 first
    out = hear(tree, 10, beacon(1, 6, 1, 1), 2.02)
    assert place(tree) == (1, 6, 2, 10)
    assert set(beacons(out)) == {10, 11, 12, 13}


def test_a_new_round_the_parent_never_brings_is_taken_from_the_best_at_the_next_tick() -> None:
    tree = attached()
    hear(tree, 12, beacon(1, 6, 2, 11), 2.0)
    hear(tree, 11, beacon(1, 6, 1, 1), 2.01)
    out = tree.handle(TimerFired(BeaconTick()), 2.5)
    assert place(tree) == (1, 6, 2, 11)  # dist 1 beats 12's dist 2
    assert beacons(out)[10] == beacon(1, 6, 2, 11)  # the old parent learns it lost a child


def test_a_shorter_path_in_the_same_round_moves_us_an_equal_one_does_not() -> None:
    tree = rooted(50, 10, 11, 12)
    hear(tree, 12, beacon(1, 5, 3, 30), 0.1)
    assert place(tree) == (1, 5, 4, 12)
    hear(tree, 10, beacon(1, 5, 3, 31), 0.2)
    assert place(tree) == (1, 5, 4, 12)  # equal: stay
    hear(tree, 11, beacon(1, 5, 1, 1), 0.3)
    assert place(tree) == (1, 5, 2, 11)  # shorter: move


def test_a_lost_parent_is_replaced_by_a_neighbour_nearer_the_root() -> None:
    tree = attached()
    tree.handle(NeighborDown(10), 1.0)
    assert place(tree) == (1, 5, 2, 11)  # 11 is at dist 1 ≤ ours − 1


def test_without_a_nearer_neighbour_a_lost_parent_detaches_us_until_the_next_round() -> None:
    tree = rooted(50, 10, 12, 13)
    hear(tree, 10, beacon(1, 5, 1, 1), 0.1)
    hear(tree, 12, beacon(1, 5, 2, 11), 0.1)  # as deep as us: maybe not, but not nearer
    hear(tree, 13, beacon(1, 5, 3, 50), 0.1)
    out = tree.handle(NeighborDown(10), 1.0)
    assert place(tree) == (1, 5, INF, NONE)
    assert beacons(out) == dict.fromkeys((12, 13), beacon(1, 5, INF, NONE))
    assert 13 in tree.eager  # the subtree stays ours
    # a same-round offer could come from our own subtree: refused
    hear(tree, 12, beacon(1, 5, 2, 11), 1.1)
    assert place(tree) == (1, 5, INF, NONE)
    # the next round attaches us from whoever brings it
    hear(tree, 12, beacon(1, 6, 2, 11), 2.0)
    assert place(tree) == (1, 6, 3, 12)


def request(root: int, seq: int) -> RoundRequest:
    return RoundRequest(topic=T, root=root, seq=seq)


def requests(out: list[Output]) -> dict[int, RoundRequest]:
    found = {
        o.dst: o.message for o in out if isinstance(o, Send) and type(o.message) is RoundRequest
    }
    return found  # type: ignore[return-value]


def test_a_detached_node_asks_every_neighbour_for_a_new_round_once() -> None:
    tree = rooted(50, 10, 12, 13)
    hear(tree, 10, beacon(1, 5, 1, 1), 0.1)
    hear(tree, 12, beacon(1, 5, 2, 11), 0.1)
    hear(tree, 13, beacon(1, 5, 3, 50), 0.1)
    out = tree.handle(NeighborDown(10), 1.0)
    assert place(tree) == (1, 5, INF, NONE)
    assert requests(out) == dict.fromkeys((12, 13), request(1, 5))
    assert requests(hear(tree, 12, beacon(1, 5, 2, 11), 1.1)) == {}  # asked once
    # a request reaching a detached node goes no further: its own is out
    assert tree.handle(Receive(12, request(1, 5)), 1.2) == []
    # a node that keeps a parent nearer the root asks nobody
    tree = attached()
    assert requests(tree.handle(NeighborDown(10), 1.0)) == {}


def test_a_request_travels_up_the_tree_once_per_round_and_newer_rounds_answer_it() -> None:
    tree = attached()  # root 1, round 5, parent 10
    out = tree.handle(Receive(12, request(1, 5)), 1.0)
    assert [(o.dst, o.message) for o in out if isinstance(o, Send)] == [(10, request(1, 5))]
    assert tree.handle(Receive(11, request(1, 5)), 1.1) == []  # this round's: forwarded once
    assert tree.handle(Receive(12, request(7, 5)), 1.2) == []  # another root's
    hear(tree, 10, beacon(1, 6, 1, 1), 1.5)  # round 6 comes
    out = tree.handle(Receive(12, request(1, 5)), 1.6)
    assert beacons(out) == {12: beacon(1, 6, 2, 10)}  # what the requester missed


def test_the_root_starts_a_requested_round_at_once_then_not_before_a_quarter_interval() -> None:
    tree = rooted(1, 10, 11)
    out = tree.handle(Receive(10, request(1, 0)), 0.5)
    assert place(tree) == (1, 1, 0, NONE)
    assert beacons(out) == dict.fromkeys((10, 11), beacon(1, 1, 0, NONE))
    # a second request soon after: the round waits for the gap, one timer for any number
    out = tree.handle(Receive(11, request(1, 1)), 0.6)
    assert place(tree) == (1, 1, 0, NONE)
    assert [o for o in out if isinstance(o, SetTimer)] == [SetTimer(0.5 + B / 4 - 0.6, RoundDue())]
    assert tree.handle(Receive(10, request(1, 1)), 0.7) == []
    out = tree.handle(TimerFired(RoundDue()), 1.0)
    assert place(tree) == (1, 2, 0, NONE)
    assert beacons(out) == dict.fromkeys((10, 11), beacon(1, 2, 0, NONE))
    # a stale request is answered with the current round
    assert beacons(tree.handle(Receive(10, request(1, 1)), 1.1)) == {10: beacon(1, 2, 0, NONE)}


def test_a_detached_fragment_is_attached_again_well_before_the_next_tick() -> None:
    """Root 1 - 10 - 50 - 13 and 1 - 11 - 12 - 50: 50 loses its parent 10, its only nearer
    neighbour; its request reaches the root through 12 and 11, and the new round brings 50
    and its child 13 back in a few hops, not at the root's next tick (B later)."""
    r, a, b, c, x, child = 1, 10, 11, 12, 50, 13
    links = {r: (a, b), a: (r, x), b: (r, c), c: (b, x), x: (a, c, child), child: (x,)}
    nodes = {me: rooted(me, *peers) for me, peers in links.items()}
    now = 0.0
    queue: list[tuple[int, int, object]] = []

    def run(outs: dict[int, list[Output]]) -> None:
        for src, out in outs.items():
            queue.extend((src, o.dst, o.message) for o in out if isinstance(o, Send))
        while queue:
            src, dst, message = queue.pop(0)
            if dst not in nodes or src not in links[dst]:
                continue
            out = nodes[dst].handle(Receive(src, message), now)  # type: ignore[arg-type]
            queue.extend((dst, o.dst, o.message) for o in out if isinstance(o, Send))

    run({me: nodes[me].handle(NeighborUp(p), now) for me in links for p in links[me]})
    run({r: nodes[r].handle(TimerFired(BeaconTick()), now)})
    assert place(nodes[x]) == (r, 1, 2, a) and place(nodes[child]) == (r, 1, 3, x)
    now = 0.6  # a quarter interval after round 1: the requested round starts at once
    links[x] = (c, child)
    links[a] = (r,)
    run({x: nodes[x].handle(NeighborDown(a), now), a: nodes[a].handle(NeighborDown(x), now)})
    assert place(nodes[r])[1] == 2  # the root started round 2 at once
    assert place(nodes[x]) == (r, 2, 3, c)
    assert place(nodes[child]) == (r, 2, 4, x)
    assert x in nodes[c].rt.children  # type: ignore[union-attr]


def test_a_detached_parent_keeps_its_subtree_unless_a_nearer_neighbour_exists() -> None:
    tree = rooted(50, 10, 12)
    hear(tree, 10, beacon(1, 5, 1, 1), 0.1)
    hear(tree, 12, beacon(1, 5, 2, 11), 0.1)
    hear(tree, 10, beacon(1, 5, INF, NONE), 0.5)  # our parent detached
    assert place(tree) == (1, 5, INF, 10)  # still its child: the fragment stays a tree
    assert 10 in tree.eager

    tree = attached()
    hear(tree, 10, beacon(1, 5, INF, NONE), 0.5)
    assert place(tree) == (1, 5, 2, 11)


def test_children_are_the_neighbours_whose_beacon_names_us() -> None:
    tree = attached()
    assert tree.rt is not None and tree.rt.children == {13}
    hear(tree, 13, beacon(1, 5, 2, 11), TTL + 1)  # 13 moved under 11
    assert tree.rt.children == set() and 13 in tree.lazy


def test_a_duplicate_over_a_tree_link_prunes_nothing_over_a_temporary_link_it_does() -> None:
    tree = attached()
    hear(tree, 12, beacon(1, 5, 2, 11), TTL + 0.1)  # temporary links expired
    m = Gossip(topic=T, pub_id=1, round=0, payload=b"x")
    tree.handle(Receive(10, m), 3.0)
    out = tree.handle(Receive(13, m), 3.0)  # the child: a tree link
    assert not [o for o in out if isinstance(o, Send) and type(o.message) is Prune]
    assert 13 in tree.eager
    tree.handle(NeighborDown(12), 3.1)
    tree.handle(NeighborUp(12), 3.1)  # temporary again
    out = tree.handle(Receive(12, m), 3.2)
    assert [o.dst for o in out if isinstance(o, Send) and type(o.message) is Prune] == [12]
    assert 12 in tree.lazy and 12 not in tree.temp


def test_a_prune_from_a_tree_neighbour_is_ignored() -> None:
    tree = attached()
    hear(tree, 12, beacon(1, 5, 2, 11), TTL + 0.1)
    tree.handle(Receive(10, Prune(topic=T)), 3.0)
    assert 10 in tree.eager


def test_the_root_starts_a_round_every_tick() -> None:
    tree = rooted(1, 10, 11)
    out = tree.handle(TimerFired(BeaconTick()), 2.0)
    assert place(tree) == (1, 1, 0, NONE)
    assert beacons(out) == dict.fromkeys((10, 11), beacon(1, 1, 0, NONE))
    assert [o.after for o in out if isinstance(o, SetTimer)] == [B]


def test_a_silent_root_is_held_dead_and_replaced() -> None:
    tree = attached()
    out = tree.handle(TimerFired(BeaconTick()), 0.1 + TIMEOUT + B + 0.01)
    assert place(tree) == (50, 1, 0, NONE)  # we claim it
    assert set(beacons(out)) == {10, 11, 12, 13}
    # the dead root's old rounds are not taken back; a lower claimant's are
    hear(tree, 10, beacon(1, 5, 1, 1), 9.0)
    assert place(tree) == (50, 1, 0, NONE)
    hear(tree, 11, beacon(20, 1, 0, NONE), 9.1)
    assert place(tree) == (20, 1, 1, 11)
    # a newer round of the old root (it came back) is its again
    hear(tree, 10, beacon(1, 6, 1, 1), 9.2)
    assert place(tree) == (1, 6, 2, 10)
