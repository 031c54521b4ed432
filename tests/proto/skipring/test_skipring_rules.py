"""Examples of every rule of the skipring stack (Feldmann et al.; docs/protocols/skipring.md), one
at a time.

Labels and SR(n) (§2.1), the local shortcut computation (§3.2.2), the Patricia trie and
CheckTrie's three cases (§4.2), the supervisor's subscribe, unsubscribe, configuration request,
failure detector and four database repairs (§3.1, §4.1), and the subscriber's label check and
action (iii) (§2.2, §3.2.1). Replay any of them with
``.venv/bin/pytest tests/proto/skipring/test_skipring_rules.py -k NAME``.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from pubmesh.proto.core import NodeContext, PeerDown, Receive, Send, TraceRecord, Unsubscribe
from pubmesh.proto.skipring import publications
from pubmesh.proto.skipring.labels import (
    SkipRingTopology,
    index,
    is_label,
    label,
    r_value,
    ring_length,
    side_shortcuts,
)
from pubmesh.proto.skipring.legitimacy import install
from pubmesh.proto.skipring.messages import (
    Check,
    CheckAndPublish,
    CheckTrie,
    Configuration,
    ConfigurationRequest,
    Linearize,
    PublicationTransfer,
    SubscribeRequest,
    UnsubscribeRequest,
)
from pubmesh.proto.skipring.params import SkipRingParams
from pubmesh.proto.skipring.patricia import (
    KEY_BITS,
    PatriciaTrie,
    Publication,
    inner_hash,
    key_of,
    leaf_hash,
    leaf_of,
)
from pubmesh.proto.skipring.ring import Ref, TopicState
from pubmesh.proto.skipring.subscriber import Subscriber
from pubmesh.proto.skipring.supervisor import Supervisor, TopicDatabase

T = "t"
PARAMS = SkipRingParams()


def supervisor() -> Supervisor:
    return Supervisor(NodeContext(0, random.Random(0), "supervisor", PARAMS))


def subscriber(node: int) -> Subscriber:
    return Subscriber(NodeContext(node, random.Random(node), "peer", PARAMS))


def legitimate_supervisor(n: int) -> Supervisor:
    """A supervisor whose database for T holds l(i) -> node i + 1 for i < n."""
    sup = supervisor()
    db = sup.database(T)
    for i in range(n):
        db.add(label(i), i + 1)
    return sup


def sends(outputs: list) -> list[Send]:
    return [o for o in outputs if isinstance(o, Send)]


def records(outputs: list) -> list[TraceRecord]:
    return [o for o in outputs if isinstance(o, TraceRecord)]


# ------------------------------------------------------------------------------ labels (§2.1)
def test_labels_are_the_leading_bit_moved_to_the_end() -> None:
    expected = ["0", "1", "01", "11", "001", "011", "101", "111", "0001", "0011", "0101"]
    assert [label(i) for i in range(11)] == expected
    assert label(37) == "001011"  # 37 = 100101b
    for i in range(5000):
        assert index(label(i)) == i, f"l^-1(l({i}))"
        assert is_label(label(i))
    assert not is_label("10") and not is_label("") and not is_label("0110")


def test_fig1_real_values_for_n16() -> None:
    values = [r_value(label(i)) for i in range(16)]
    assert values[:8] == [Fraction(x, 8) for x in (0, 4, 2, 6, 1, 3, 5, 7)]
    assert values[8:] == [Fraction(2 * k + 1, 16) for k in range(8)]
    # labels as strings sort exactly as their real values (the order the protocol uses)
    names = [label(i) for i in range(3000)]
    assert sorted(names) == sorted(names, key=r_value)


def test_ring_length_is_ceil_log2() -> None:
    assert [ring_length(n) for n in (2, 3, 4, 5, 8, 9, 1000, 1024, 1025)] == [
        1, 2, 2, 3, 3, 4, 10, 10, 11,
    ]  # fmt: skip


def test_shortcut_labels_worked_example() -> None:
    """Spec §6: v = "01" with ring neighbours 0011 and 0101."""
    assert side_shortcuts("01", "0011", right=False, wrapped=False) == ["001", "0"]
    assert side_shortcuts("01", "0101", right=True, wrapped=False) == ["011", "1"]
    assert side_shortcuts("11", "1011", right=False, wrapped=False) == ["101", "1"]
    assert side_shortcuts("11", "1101", right=True, wrapped=False) == ["111", "0"]


@pytest.mark.parametrize("n", [*range(2, 70), 100, 255, 256, 257, 600])
def test_local_shortcut_computation_matches_sr_n(n: int) -> None:
    """Every node of SR(n) computes exactly its SR(n) shortcut labels from its ring neighbours
    (§3.2.2), and SR(n) meets the degree bounds of §2.2."""
    top = SkipRingTopology(n)
    degrees = []
    for name in top.labels:
        state = TopicState(T, 1, 0)
        state.label = name
        left, right, ring = top.slots(name)
        state.left = None if left is None else Ref(left, 2)
        state.right = None if right is None else Ref(right, 3)
        state.ring = None if ring is None else Ref(ring, 4)
        state.shortcut_timeout([])
        want = top.shortcut_labels(name)
        assert set(state.shortcuts) == want, f"n={n} label {name}: {state.shortcuts} != {want}"
        degrees.append(len(top.ring_neighbours(name) | want))
    bound = 2 * ring_length(n)
    assert max(degrees) <= bound, f"n={n}: max degree {max(degrees)} > {bound}"
    assert sum(degrees) / n < 4, f"n={n}: mean degree {sum(degrees) / n}"


# ------------------------------------------------------------------------------ trie (§4.2)
def pub(i: int, publisher: int = 7) -> Publication:
    return Publication(i, publisher, b"p%d" % i)


def test_leaf_of_is_the_key_and_leaf_hash_for_every_publication() -> None:
    # the memo answers a publication equal to one it holds; True == 1 and hashes alike, but
    # str(True) makes another key, so a publication with a bool field must not get 1's
    first = [Publication(1, 1, b"x"), Publication(2**62, -3, b""), Publication(1, 1, b"x")]
    odd = [Publication(True, 1, b"x"), Publication(1, True, b"x")]  # type: ignore[arg-type]
    for p in first + odd + first:
        key = key_of(p)
        assert leaf_of(p) == (key, leaf_hash(key, p))
    assert len({leaf_of(p)[0] for p in first[:1] + odd}) == 2  # only the publisher is in str
    assert leaf_of(odd[1])[0] != leaf_of(first[0])[0]


def test_patricia_labels_and_hashes() -> None:
    trie = PatriciaTrie()
    pubs = [pub(i) for i in range(20)]
    for p in pubs:
        assert trie.insert(p)
    assert not trie.insert(pubs[0]), "a publication is inserted once"
    assert len(trie) == 20
    keys = sorted(key_of(p) for p in pubs)
    assert all(len(k) == KEY_BITS for k in keys)

    def check(node) -> None:  # type: ignore[no-untyped-def]
        if node.children is None:
            assert node.hash == leaf_hash(node.label, node.publication)
            return
        zero, one = node.children
        assert zero.label[len(node.label)] == "0" and one.label[len(node.label)] == "1"
        assert zero.label.startswith(node.label) and one.label.startswith(node.label)
        common = 0
        while zero.label[common] == one.label[common]:
            common += 1
        assert node.label == zero.label[:common], "inner label = longest common prefix"
        assert node.hash == inner_hash(zero.hash, one.hash)
        check(zero)
        check(one)

    assert trie.root is not None
    check(trie.root)
    assert [leaf.label for leaf in trie.leaves()] == keys
    # the same publications in another order give the same root
    other = PatriciaTrie()
    for p in reversed(pubs):
        other.insert(p)
    assert other.root_pair() == trie.root_pair()


def trie_state(node: int, items: list[Publication]) -> TopicState:
    state = TopicState(T, node, 0)
    state.label = "1"
    for p in items:
        state.trie.insert(p)
    return state


def test_check_trie_case1_equal_subtries_send_nothing() -> None:
    v, w = trie_state(1, [pub(i) for i in range(8)]), trie_state(2, [pub(i) for i in range(8)])
    out: list = []
    root = v.trie.root_pair()
    assert root is not None
    publications.check_trie(w, 1, (root,), out)
    assert out == []


def test_check_trie_case2_descends_into_children() -> None:
    v = trie_state(1, [pub(i) for i in range(8)])
    w = trie_state(2, [pub(i) for i in range(9)])
    out: list = []
    # find a label both hold with different hashes: the root if the labels agree
    assert v.trie.root is not None and w.trie.root is not None
    x = w.trie.find(v.trie.root.label)
    assert x is not None and x.children is not None and x.hash != v.trie.root.hash
    publications.check_trie(w, 1, (v.trie.root.pair(),), out)
    assert out == [
        Send(1, CheckTrie(topic=T, node=2, pairs=tuple(child.pair() for child in x.children)))
    ]


def test_check_trie_case3_missing_label_asks_for_the_other_branch() -> None:
    w = trie_state(2, [pub(i) for i in range(6)])
    assert w.trie.root is not None
    y = w.trie.root  # shortest label that extends the empty word... unless the root is ""
    probe = y.label[:0] if y.label else None
    if probe is None:  # root label is "": probe a one-bit label w lacks
        child = y.children[0] if y.children else y
        probe = child.label[:1] if len(child.label) > 1 else None
    assert probe is not None and w.trie.find(probe) is None
    ext = w.trie.minimal_extension(probe)
    assert ext is not None
    bit = ext.label[len(probe)]
    out: list = []
    publications.check_trie(w, 1, ((probe, b"\x00" * 32),), out)
    flipped = "1" if bit == "0" else "0"
    assert out == [
        Send(1, CheckAndPublish(topic=T, node=2, pairs=(ext.pair(),), prefix=probe + flipped))
    ]
    # no extension at all: ask for everything under the label
    out = []
    far = "1" * 40 if not any(k.startswith("1" * 40) for k in w.trie.by_label) else "0" * 40
    publications.check_trie(w, 1, ((far, b"\x00" * 32),), out)
    assert out == [Send(1, CheckAndPublish(topic=T, node=2, pairs=(), prefix=far))]


def test_check_and_publish_sends_every_publication_under_the_prefix() -> None:
    items = [pub(i) for i in range(30)]
    v = trie_state(1, items)
    out: list = []
    publications.check_and_publish(v, 2, (), "1", out)
    sent = sorted(s.message.pub_id for s in sends(out))
    assert sent == sorted(p.pub_id for p in items if key_of(p).startswith("1"))
    assert all(isinstance(s.message, PublicationTransfer) and s.dst == 2 for s in sends(out))


def test_check_trie_exchange_makes_two_tries_equal() -> None:
    """Repeated CheckTrie in both directions (as Timeout does) ends with equal tries."""
    rng = random.Random(5)
    for trial in range(20):
        a_items = [pub(i) for i in rng.sample(range(200), rng.randrange(0, 40))]
        b_items = [pub(i) for i in rng.sample(range(200), rng.randrange(1, 40))]
        nodes = {1: trie_state(1, a_items), 2: trie_state(2, b_items)}
        for _round in range(40):  # one Timeout of each node per round
            pool: list[Send] = []
            for src in (1, 2):
                root = nodes[src].trie.root_pair()
                if root is not None:
                    pool.append(Send(3 - src, CheckTrie(topic=T, node=src, pairs=(root,))))
            steps = 0
            while pool:
                steps += 1
                assert steps < 10_000, f"trial {trial}: exchange does not terminate"
                send = pool.pop(rng.randrange(len(pool)))
                at, m, out = send.dst, send.message, []
                if isinstance(m, CheckTrie):
                    publications.check_trie(nodes[at], m.node, m.pairs, out)
                elif isinstance(m, CheckAndPublish):
                    publications.check_and_publish(nodes[at], m.node, m.pairs, m.prefix, out)
                elif isinstance(m, PublicationTransfer):
                    item = Publication(m.pub_id, m.publisher, m.payload)
                    publications.accept(nodes[at], item, 0, out)
                pool.extend(sends(out))
            if nodes[1].trie.root_pair() == nodes[2].trie.root_pair():
                break
        assert nodes[1].trie.root_pair() == nodes[2].trie.root_pair(), f"trial {trial}"
        assert len(nodes[1].trie) == len({p.pub_id for p in a_items + b_items}), f"trial {trial}"


# ------------------------------------------------------------------------------ supervisor
def test_subscribe_inserts_l_n_with_one_message() -> None:
    sup = legitimate_supervisor(5)
    out = sup.handle(Receive(99, SubscribeRequest(topic=T)), 0.0)
    (send,) = sends(out)
    # l(5) = "011" (r = 3/8) sits between "01" (node 3) and "1" (node 2)
    assert send == Send(
        99, Configuration(topic=T, label="011", pred_label="01", pred=3, succ_label="1", succ=2)
    )
    assert sup.database(T).by_label["011"] == 99
    assert [(r.kind, dict(r.detail)) for r in records(out)] == [
        ("supervisor.subscribe", {"topic": T, "node": 99, "messages": 1})
    ]


def test_unsubscribe_moves_the_last_label_into_the_gap_with_two_messages() -> None:
    sup = legitimate_supervisor(8)  # l(7) = "111" is held by node 8
    out = sup.handle(Receive(3, UnsubscribeRequest(topic=T)), 0.0)  # node 3 holds l(2) = "01"
    db = sup.database(T)
    assert db.by_label["01"] == 8 and 3 not in db and db.n == 7
    assert sends(out) == [
        Send(8, db.configuration(T, "01")),
        Send(3, Configuration(topic=T, label=None)),
    ]
    assert sends(out)[0].message.label == "01"
    assert [(r.kind, dict(r.detail)) for r in records(out)] == [
        ("supervisor.unsubscribe", {"topic": T, "node": 3, "messages": 2})
    ]
    # the holder of l(n-1) itself leaves: only the permission is sent
    out = sup.handle(Receive(7, UnsubscribeRequest(topic=T)), 0.0)  # node 7 holds l(6)
    assert sends(out) == [Send(7, Configuration(topic=T, label=None))]
    assert records(out)[0].detail["messages"] == 1


def test_crashed_subscriber_is_removed_like_an_unsubscribe() -> None:
    sup = legitimate_supervisor(8)
    out = sup.handle(PeerDown(2), 0.0)  # node 2 holds l(1) = "1"
    db = sup.database(T)
    assert db.by_label["1"] == 8 and 2 not in db
    assert sends(out) == [Send(8, db.configuration(T, "1"))]
    assert [(r.kind, dict(r.detail)) for r in records(out)] == [
        ("supervisor.remove_crashed", {"topic": T, "node": 2, "messages": 1})
    ]
    # it is not recorded again on somebody's action (iii) report
    assert sends(sup.handle(Receive(5, ConfigurationRequest(topic=T, node=2, action=3)), 0.0)) == []


@pytest.mark.parametrize("n", [64, 256, 1024, 4096])
def test_supervisor_messages_are_flat_in_n(n: int) -> None:
    """Paper §4.1: 1 message per subscribe, 2 per unsubscribe, whatever n."""
    sup = legitimate_supervisor(n)
    rng = random.Random(n)
    for step in range(50):
        out = sup.handle(Receive(10_000 + step, SubscribeRequest(topic=T)), 0.0)
        assert records(out)[0].detail["messages"] == 1, f"n={n} subscribe {step}"
        members = sup.database(T).members()
        last = sup.database(T).by_label[label(sup.database(T).n - 1)]
        leaver = rng.choice([m for m in members if m != last])
        out = sup.handle(Receive(leaver, UnsubscribeRequest(topic=T)), 0.0)
        assert records(out)[0].detail["messages"] == 2, f"n={n} unsubscribe {step}"
        assert not sup.database(T).is_corrupted()


def _database_state(db: TopicDatabase) -> tuple[object, ...]:
    return (
        list(db.by_label.items()),
        list(db.labels_of.items()),
        db.order,
        db.indices,
        sorted(db.orphans),
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_add_all_leaves_the_database_add_leaves(seed: int) -> None:
    """The bulk add of a warm start: the same maps in the same order, the same sorted lists,
    on top of entries already there, with orphans, nodes holding several labels, labels of
    indices past n and strings that are not labels; a repeated label raises as add does,
    after the entries before it."""
    rng = random.Random(seed)
    names = [label(i) for i in range(300)] + [label(1000), label(4097), "x", "yz"]
    rng.shuffle(names)
    nodes: list[int | None] = [rng.choice([None, *range(40)]) for _ in names]
    entries = list(zip(names, nodes, strict=True))
    one, many = TopicDatabase(), TopicDatabase()
    for name, node in entries[:20]:
        one.add(name, node)
        many.add(name, node)
    for name, node in entries[20:]:
        one.add(name, node)
    many.add_all(entries[20:])
    assert _database_state(many) == _database_state(one), f"seed {seed}"
    again = TopicDatabase()
    with pytest.raises(KeyError, match="already in the database"):
        again.add_all([*entries[:5], entries[2]])
    first = TopicDatabase()
    for name, node in entries[:5]:
        first.add(name, node)
    assert _database_state(again) == _database_state(first), f"seed {seed}"


def test_repair_i_tuples_without_subscriber_are_deleted() -> None:
    db = TopicDatabase()
    for i in range(4):
        db.add(label(i), i + 1)
    db.add(label(4), None)
    assert db.is_corrupted()
    assert db.repair() == (1, 0)
    assert not db.is_corrupted() and db.n == 4


def test_repair_ii_duplicates_keep_the_lowest_label() -> None:
    sup = legitimate_supervisor(6)
    db = sup.database(T)
    db.add(label(9), 2)  # node 2 (label "1") also holds l(9)
    db.add(label(6), 3)  # and node 3 (label "01") l(6)
    assert db.is_corrupted()
    out = sup.handle(Receive(2, ConfigurationRequest(topic=T, node=2, action=2)), 0.0)
    assert sends(out)[0].message.label == "1"
    assert db.labels_of[2] == ["1"]
    sup.handle(Receive(3, UnsubscribeRequest(topic=T)), 0.0)
    assert 3 not in db and not db.is_corrupted(), db.by_label


def test_repair_iii_and_iv_fill_missing_labels_from_the_largest() -> None:
    db = TopicDatabase()
    for i in (0, 1, 3, 4):
        db.add(label(i), i + 1)  # l(2) is missing (iii)
    db.add("0110011", 9)  # not l(i) for any i < n (iv)
    assert db.is_corrupted()
    assert db.repair() == (0, 1)
    assert sorted(db.by_label, key=index) == [label(i) for i in range(5)]
    assert db.by_label[label(2)] == 9


def test_timeout_configures_round_robin_after_repairs() -> None:
    sup = legitimate_supervisor(4)
    db = sup.database(T)
    db.add(label(7), None)
    got = []
    for _ in range(8):
        sup._timeout(out := [])
        got.extend((s.dst, s.message) for s in sends(out))
        assert not db.is_corrupted()  # the orphan l(7) is deleted before the first pick
    # Timeout (spec §4, Feldmann et al. Algorithm 3): next := (next + 1) mod n, then configure
    # DB[l(next)]. next starts at 0, so the first pick is l(1) (node 2) and the walk goes up
    # the label indices, wrapping to l(0) (node 1): one subscriber per Timeout, each once a
    # round, the same order in the second round as in the first.
    order = [1, 2, 3, 0] * 2
    assert [dst for dst, _m in got] == [i + 1 for i in order]
    # each gets its configuration: its label and its cyclic r-order neighbours in DB
    by_label = {label(i): i + 1 for i in range(4)}
    ring = sorted(by_label)  # r-order: "0" < "01" < "1" < "11"
    expected = []
    for i in order:
        pos = ring.index(label(i))
        pred, succ = ring[pos - 1], ring[(pos + 1) % 4]
        expected.append(
            Configuration(
                topic=T,
                label=label(i),
                pred_label=pred,
                pred=by_label[pred],
                succ_label=succ,
                succ=by_label[succ],
            )
        )
    assert [m for _dst, m in got] == expected
    assert sup.counters["round_robin_configurations"] == 8
    assert sup.counters["repair_orphans_deleted"] == 1


def test_configuration_request_records_a_missing_node() -> None:
    sup = legitimate_supervisor(3)
    out = sup.handle(Receive(50, ConfigurationRequest(topic=T, node=50, action=1)), 0.0)
    assert sup.database(T).by_label["11"] == 50
    assert sends(out)[0].dst == 50 and sends(out)[0].message.label == "11"


# ------------------------------------------------------------------------------ subscriber
def test_label_check_answers_a_wrong_belief_with_the_real_label() -> None:
    state = TopicState(T, 5, 0)
    state.label = "01"
    out: list = []
    state.check(Ref("1", 6), "11", False, out)
    assert out == [Send(6, Linearize(topic=T, node=5, label="01"))]
    out = []
    state.check(Ref("0", 6), "01", False, out)  # right belief: processed as an introduction
    assert out == [] and state.left == Ref("0", 6)


def test_action_iii_reports_a_closer_unrecorded_neighbour() -> None:
    state = TopicState(T, 5, 0)
    state.label = "1"
    state.left = Ref("011", 9)  # closer than the proposed predecessor "01"
    out: list = []
    state.receive_configuration("1", Ref("01", 3), Ref("11", 4), out)
    assert Send(0, ConfigurationRequest(topic=T, node=9, action=3)) in out
    # the replaced neighbour is linearized, not dropped: it lies between the proposed
    # predecessor and v, so v keeps it and hands the proposed predecessor to it
    assert state.left == Ref("011", 9) and state.right == Ref("11", 4)
    assert Send(9, Linearize(topic=T, node=3, label="01", claimed="011")) in out


def test_subscriber_leaves_after_permission_and_answers_with_remove_connection() -> None:
    sup = supervisor()
    subs = {i: subscriber(i) for i in range(1, 6)}
    install(sup, subs, T, list(subs))
    node = subs[3]
    out = node.handle(Unsubscribe(T), 0.0)
    assert sends(out) == [Send(0, UnsubscribeRequest(topic=T))]
    node.handle(Receive(0, Configuration(topic=T, label=None)), 0.0)
    out = node.handle(Receive(2, Check(topic=T, node=2, label="1", claimed="01")), 0.0)
    assert [type(s.message).__name__ for s in sends(out)] == ["RemoveConnection"]
    assert "t" not in node.subscriptions()
