"""Corrupted initial states for BuildSR (Feldmann et al. §1.1, §3.1; docs/design.md "Invariants").

Self-stabilization promises convergence "starting from an arbitrary system state". The kinds
below are the families of arbitrary states the issue asks for; a scenario picks one with
``[init] corruption = "<kind>"`` and can add ``junk_messages = k`` to any of them. Nodes never
hold references to nodes that do not exist (the paper's assumption, §1.1); everything else may
be wrong.

================  ==============================================================================
kind              state
================  ==============================================================================
random_graph      (a) every subscriber's label, ring slots and shortcut table are random (labels
                  valid, invalid or ⊥, believed labels of neighbours random), the references form
                  a random weakly connected graph per topic, and the supervisor records a random
                  subset of subscribers under random labels
db_orphans        (b-i) legitimate SR(n), then tuples (label, ⊥) in the database: some new
                  labels, some existing subscribers' tuples emptied
db_duplicates     (b-ii) legitimate SR(n), then some subscribers recorded under a second label
db_missing        (b-iii) legitimate SR(n), then some tuples deleted (labels l(i), i < n, missing)
db_wrong_labels   (b-iv) legitimate SR(n), then some tuples relabelled to labels l(x), x >= n
db_all            all four database corruptions at once
junk              (c) legitimate SR(n) and junk messages in flight (``junk_messages``, or one per
                  subscription if that is 0)
components        (d) each topic's subscribers split into 2-5 groups, each a legitimate skip ring
                  of its own (all with labels from l(0)), the supervisor recording one group only:
                  the groups are linked only through the supervisor
================  ==============================================================================

The junk messages (any kind, ``junk_messages`` of them) are random ring, shortcut, supervisor
and trie messages with random labels and hashes between random nodes, some for topics nobody
runs. No junk message carries a publication: a publication cannot be told apart from a real
one, so "junk" publications would be real publications (Feldmann et al. §4.2 counts every
publication in the system).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from pubmesh.proto.core import Message, NodeId, StackNode
from pubmesh.proto.skipring.labels import Label, label, ring_length
from pubmesh.proto.skipring.legitimacy import install, members, split
from pubmesh.proto.skipring.messages import (
    Check,
    CheckAndPublish,
    CheckTrie,
    Configuration,
    ConfigurationRequest,
    IntroduceRing,
    IntroduceShortcut,
    Linearize,
    RemoveConnection,
    SubscribeRequest,
    UnsubscribeRequest,
)
from pubmesh.proto.skipring.patricia import KEY_BITS
from pubmesh.proto.skipring.ring import Ref, Status, TopicState
from pubmesh.proto.skipring.subscriber import Subscriber
from pubmesh.proto.skipring.supervisor import Supervisor, TopicDatabase

KINDS = (
    "random_graph",
    "db_orphans",
    "db_duplicates",
    "db_missing",
    "db_wrong_labels",
    "db_all",
    "junk",
    "components",
)

Junk = tuple[NodeId, NodeId, Message]


def corrupt(
    kind: str,
    nodes: Mapping[NodeId, StackNode],
    rng: random.Random,
    params: Any = None,
    junk_messages: int = 0,
) -> list[Junk]:
    """StackSpec.corrupt: rewrite the state of ``nodes`` in place into a corrupted state of
    ``kind`` and return ``junk_messages`` junk messages to put in flight."""
    if kind not in KINDS:
        raise ValueError(f"unknown skipring corruption {kind!r} (kinds: {', '.join(KINDS)})")
    supervisor, subscribers = split(nodes)
    if supervisor is None:
        raise ValueError("skipring corruption needs the supervisor among the nodes")
    topics = sorted({t for s in subscribers.values() for t in s.topics} | set(supervisor.databases))
    total_members = 0
    for topic in topics:
        group = members(subscribers, topic)
        total_members += len(group)
        if kind == "random_graph":
            random_graph(supervisor, subscribers, topic, group, rng)
        elif kind == "components":
            components(supervisor, subscribers, topic, group, rng)
        else:
            order = list(group)
            rng.shuffle(order)
            install(supervisor, subscribers, topic, order)
            if kind.startswith("db_"):
                corrupt_database(supervisor.databases[topic], kind, rng)
    count = junk_messages
    if kind == "junk" and count == 0:
        count = total_members
    return junk(nodes, topics, count, rng)


# ------------------------------------------------------------------------------ (a)
def random_label(rng: random.Random, n: int) -> Label:
    """A random label of the kind a corrupted state holds: usually l(x) for some x < 2n,
    sometimes a longer random one."""
    if rng.random() < 0.8:
        return label(rng.randrange(max(2, 2 * n)))
    bits = rng.randint(1, ring_length(max(2, n)) + 4)
    return format(rng.getrandbits(bits) | 1, "b").zfill(bits) if bits > 1 else "1"


def random_graph(
    supervisor: Supervisor,
    subscribers: Mapping[NodeId, Subscriber],
    topic: str,
    group: list[NodeId],
    rng: random.Random,
) -> None:
    """Kind (a): random labels and neighbour entries over a random weakly connected graph."""
    n = len(group)
    order = list(group)
    rng.shuffle(order)
    # a random spanning tree (each node refers to an earlier one) plus n/2 random edges
    held: dict[NodeId, list[NodeId]] = {node: [] for node in order}
    for i in range(1, n):
        child, parent = order[i], order[rng.randrange(i)]
        if rng.random() < 0.5:
            child, parent = parent, child
        held[child].append(parent)
    for _ in range(n // 2):
        a, b = rng.sample(order, 2) if n >= 2 else (order[0], order[0])
        if a != b:
            held[a].append(b)
    for node in order:
        state = TopicState(topic, node, subscribers[node].supervisor)
        old = subscribers[node].topics[topic]
        state.trie = old.trie
        state.status = Status.ACTIVE
        roll = rng.random()
        if roll < 0.1:
            state.label = None
        elif roll < 0.15:
            state.label = rng.choice(["10", "00", "0110", ""])  # outside the image of l
        else:
            state.label = random_label(rng, n)
        targets = held[node]
        rng.shuffle(targets)
        slots: list[Ref | None] = [None, None, None]
        for i, target in enumerate(targets):
            entry = Ref(random_label(rng, n), target)
            if i < 3:
                slots[i] = entry
            else:
                state.shortcuts[entry.label] = target
        # some extra shortcut entries: random labels, some without a reference
        for _ in range(rng.randrange(3)):
            state.shortcuts[random_label(rng, n)] = rng.choice([None, *order])
        state.shortcuts.pop(state.label or "", None)
        state.left, state.right, state.ring = slots
        state.quiet = rng.randrange(3)
        subscribers[node].topics[topic] = state
    # the supervisor records a random half under random (distinct) labels
    db = TopicDatabase()
    for node in order:
        if rng.random() < 0.5:
            name = random_label(rng, n)
            if name not in db.by_label:
                db.add(name, node)
    db.next = rng.randrange(max(1, n))
    supervisor.databases[topic] = db


# ------------------------------------------------------------------------------ (b)
def corrupt_database(db: TopicDatabase, kind: str, rng: random.Random) -> None:
    """Kinds (b): one (or all) of the four corruptions of §3.1 in a legitimate database."""
    n = db.n
    if n == 0:
        return
    count = max(1, n // 10)
    spare = iter(range(n, 10 * n + 10))  # labels l(x), x >= n, not in the database

    def unused() -> Label:
        while True:
            name = label(next(spare))
            if name not in db.by_label:
                return name

    kinds = ["db_orphans", "db_duplicates", "db_missing", "db_wrong_labels"]
    chosen = kinds if kind == "db_all" else [kind]
    for which in chosen:
        recorded = sorted(db.by_label)
        picks = rng.sample(recorded, min(count, len(recorded)))
        if which == "db_orphans":
            for _ in picks[: (len(picks) + 1) // 2]:
                db.add(unused(), None)  # new labels without a subscriber
            for name in picks[(len(picks) + 1) // 2 :]:
                db.remove(name)
                db.add(name, None)  # an existing tuple loses its subscriber
        elif which == "db_duplicates":
            for name in picks:
                node = db.by_label[name]
                db.add(unused(), node)
        elif which == "db_missing":
            for name in picks:
                if db.n > 1:
                    db.remove(name)
        elif which == "db_wrong_labels":
            for name in picks:
                db.relabel(name, unused())
    db.next = rng.randrange(max(1, db.n))


# ------------------------------------------------------------------------------ (d)
def components(
    supervisor: Supervisor,
    subscribers: Mapping[NodeId, Subscriber],
    topic: str,
    group: list[NodeId],
    rng: random.Random,
) -> None:
    """Kind (d): several skip rings linked only through the supervisor."""
    order = list(group)
    rng.shuffle(order)
    parts = min(len(order), rng.randint(2, 5))
    if parts < 2:
        install(supervisor, subscribers, topic, order)
        return
    cuts = sorted(rng.sample(range(1, len(order)), parts - 1))
    pieces = [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]
    for i, piece in enumerate(pieces):
        install(supervisor, subscribers, topic, piece, record=(i == 0))


# ------------------------------------------------------------------------------ (c)
def junk(
    nodes: Mapping[NodeId, StackNode], topics: list[str], count: int, rng: random.Random
) -> list[Junk]:
    """``count`` random junk messages between existing nodes (kind (c))."""
    if count <= 0:
        return []
    supervisor, subscribers = split(nodes)
    assert supervisor is not None
    sup = supervisor.node_id
    ids = sorted(subscribers)
    if not ids:
        return []
    names = [*topics, "junk-topic"] if topics else ["junk-topic"]
    n = len(ids)
    out: list[Junk] = []

    def lab() -> Label:
        return random_label(rng, n)

    def bits() -> str:
        size = rng.randrange(KEY_BITS + 1)
        return format(rng.getrandbits(size), "b").zfill(size) if size else ""

    for _ in range(count):
        topic = rng.choice(names)
        src, dst, other = rng.choice(ids), rng.choice(ids), rng.choice(ids)
        kind = rng.randrange(11)
        message: Message
        if kind == 0:
            message = Check(
                topic=topic, node=src, label=lab(), claimed=lab(), closing=rng.random() < 0.3
            )
        elif kind == 1:
            message = Linearize(topic=topic, node=other, label=lab())
        elif kind == 2:
            message = IntroduceRing(topic=topic, node=other, label=lab())
        elif kind == 3:
            message = RemoveConnection(topic=topic, node=other)
        elif kind == 4:
            message = IntroduceShortcut(topic=topic, node=other, label=lab())
        elif kind == 5:
            # a stale or false configuration, as if from the supervisor
            src = sup
            message = Configuration(
                topic=topic,
                label=lab() if rng.random() < 0.9 else None,
                pred_label=lab(),
                pred=rng.choice(ids),
                succ_label=lab(),
                succ=rng.choice(ids),
            )
        elif kind == 6:
            dst = sup
            message = ConfigurationRequest(topic=topic, node=other, action=rng.randint(1, 4))
        elif kind == 7:
            dst = sup
            message = SubscribeRequest(topic=topic)
        elif kind == 8:
            dst = sup
            message = UnsubscribeRequest(topic=topic)
        elif kind == 9:
            pairs = tuple((bits(), rng.randbytes(32)) for _ in range(rng.randint(1, 2)))
            message = CheckTrie(topic=topic, node=src, pairs=pairs)
        else:
            pairs = tuple((bits(), rng.randbytes(32)) for _ in range(rng.randint(0, 1)))
            message = CheckAndPublish(topic=topic, node=src, pairs=pairs, prefix=bits()[:8])
        out.append((src, dst, message))
    return out
