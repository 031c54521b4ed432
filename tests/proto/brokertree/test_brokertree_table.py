"""brokertree's subscription table and recipient sets (Kazemzadeh & Jacobsen §2.2, §3.5;
docs/protocols/brokertree.md §5, §6.1), on hand-built maps where the answer can be read off the
drawing.

    δ = 1, the map of broker 0 (radius δ + 1 = 2):

        3 ─ 1 ─ 0 ─ 2 ─ 4(client)        6 is a broker beyond 3, outside the map
        │
        6
"""

from __future__ import annotations

from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.table import SubscriptionTable, SubTuple, frontier
from pubmesh.proto.brokertree.topology import TopologyMap, build_tree
from pubmesh.proto.content.filters import publication_attributes, with_topic

MAP = TopologyMap(
    owner=0,
    radius=2,
    parent={0: None, 1: 0, 2: 0, 3: 1, 4: 2},
    brokers=frozenset({0, 1, 2, 3}),
)


def _tuple(subscriber: int, k: int, frm: int, topic: str = "t", lt: float = 10) -> SubTuple:
    pred = with_topic({"price": {"lt": lt}}, topic)
    return SubTuple((subscriber, (0.0, k)), topic, pred, frm, (), (0.0, k))


def test_the_table_keeps_one_tuple_per_origin_indexed_by_topic() -> None:
    """Spec §5 "Duplicates": a tuple is added once, keyed by its origin (S, sseq)."""
    table = SubscriptionTable()
    assert table.add(_tuple(4, 1, frm=4))
    assert not table.add(_tuple(4, 1, frm=2))  # the same subscription again
    assert table.add(_tuple(4, 2, frm=4, topic="u"))
    assert table.add(_tuple(9, 1, frm=3))
    assert len(table) == 3 and table.get((4, (0.0, 1))).frm == 4  # type: ignore[union-attr]
    cheap = publication_attributes({"price": 5}, "t")
    assert [t.origin for t in table.matching("t", cheap)] == [(4, (0.0, 1)), (9, (0.0, 1))]
    assert table.matching("t", publication_attributes({"price": 50}, "t")) == []
    assert [t.origin for t in table.remove_subscriber(4)] == [(4, (0.0, 1)), (4, (0.0, 2))]
    assert [t.origin for t in table] == [(9, (0.0, 1))]
    assert table.remove((9, (0.0, 1))) is not None and len(table) == 0
    assert table.matching("t", cheap) == []


def test_a_publication_goes_to_the_from_of_matching_tuples_downstream_only() -> None:
    """[P §2.2]: RCPT = {from | the tuple matches p, from downstream of N w.r.t. p}."""
    table = SubscriptionTable()
    table.add(_tuple(4, 1, frm=4))  # the client behind 2
    table.add(_tuple(6, 1, frm=3))  # a subscriber beyond 3: from is δ + 1 = 2 hops back
    table.add(_tuple(4, 2, frm=4, lt=1))  # matches nothing below
    p = publication_attributes({"price": 5}, "t")
    assert table.rcpt("t", p, MAP, upstream=()) == {3, 4}
    assert table.rcpt("t", p, MAP, upstream={1}) == {4}  # p came from 1's branch
    assert table.rcpt("t", p, MAP, upstream={2}) == {3}
    assert table.rcpt("u", p, MAP, upstream=()) == set()


def test_a_subscription_goes_to_the_last_table_holders_of_every_other_branch() -> None:
    """[P §3.5]: RCPT of a subscription = downstream nodes at exactly δ + 1 hops, in every
    outward branch holding a broker; a branch that ends sooner ends at its last broker."""
    assert frontier(MAP, MAP.brokers, upstream=()) == {2, 3}
    assert frontier(MAP, MAP.brokers, upstream={1}) == {2}
    # with publishers' tables (client_tables = "full"), the client 4 is a holder too
    assert frontier(MAP, MAP.brokers | {4}, upstream={1}) == {4}


def test_every_branch_with_a_broker_gets_a_subscription_on_generated_trees() -> None:
    """On generated trees (δ = 2): the frontier covers every broker of the map outside the
    upstream branches, each on the path to one frontier node, and no frontier node is upstream."""
    params = BrokerTreeParams(brokers=40, delta=2, topology_seed=11)
    tree = build_tree(params, 120)
    for owner in range(40):
        m = tree.map_of(owner)
        for upstream in ([], m.neighbours()[:1]):
            front = frontier(m, m.brokers, upstream)
            covered = {x for f in front for x in m.path(f)}
            want = {b for b in m.brokers if b != owner and m.branch(b) not in upstream}
            assert want <= covered, (owner, upstream)
            assert all(m.branch(f) not in upstream for f in front), (owner, upstream)
            assert all(
                m.dist(f) == 3 or not any(x in m.brokers for x in m.parent if m.parent[x] == f)
                for f in front
            ), (owner, upstream)
