"""The legitimacy predicate of BuildSR and a builder for legitimate states (Feldmann et al. §2.1,
§3, §5; docs/protocols/skipring.md §2, §9).

A state is *legitimate* when, for every topic:

* the supervisor's database is uncorrupted (none of the four conditions of §3.1) and records
  exactly the live subscribers of the topic, so its labels are l(0), ..., l(n-1);
* every subscriber holds the label the database gives it;
* its ``left``, ``right`` and ``ring`` slots hold exactly its neighbours in SR(n), with their
  true labels;
* its shortcut table holds exactly its shortcut labels in SR(n) (those not also ring edges),
  each pointing at the node with that label;
* a node that has left the topic (permission received, instance not yet released) refers to
  nobody.

This is Theorem "Network Convergence"'s target and what "Closure" preserves. Publications are
not part of it (their convergence is a separate theorem, checked by the tests and the
history_reliability metric).
"""

from __future__ import annotations

from collections.abc import Mapping

from pubmesh.proto.core import NodeId, StackNode
from pubmesh.proto.skipring.labels import SkipRingTopology, label
from pubmesh.proto.skipring.ring import Ref, Status, TopicState
from pubmesh.proto.skipring.subscriber import Subscriber
from pubmesh.proto.skipring.supervisor import Supervisor, TopicDatabase


def split(nodes: Mapping[NodeId, StackNode]) -> tuple[Supervisor | None, dict[NodeId, Subscriber]]:
    supervisor = None
    subscribers: dict[NodeId, Subscriber] = {}
    for node_id in sorted(nodes):
        node = nodes[node_id]
        if isinstance(node, Supervisor):
            supervisor = node
        elif isinstance(node, Subscriber):
            subscribers[node_id] = node
    return supervisor, subscribers


def members(subscribers: Mapping[NodeId, Subscriber], topic: str) -> list[NodeId]:
    """Live subscribers that want ``topic`` (an ACTIVE instance)."""
    return sorted(
        node_id
        for node_id, node in subscribers.items()
        if (state := node.topics.get(topic)) is not None and state.status is Status.ACTIVE
    )


def problems(nodes: Mapping[NodeId, StackNode], limit: int | None = None) -> list[str]:
    """Why the state is not legitimate (empty if it is); at most ``limit`` reasons."""
    found: list[str] = []

    def bad(reason: str) -> bool:
        found.append(reason)
        return limit is not None and len(found) >= limit

    supervisor, subscribers = split(nodes)
    if supervisor is None:
        bad("no live supervisor")
        return found
    topics: set[str] = set(supervisor.databases)
    for node in subscribers.values():
        topics.update(node.topics)
    for topic in sorted(topics):
        db = supervisor.databases.get(topic) or TopicDatabase()
        if db.is_corrupted():
            if bad(f"{topic}: supervisor database corrupted"):
                return found
            continue
        wanted = members(subscribers, topic)
        recorded = db.members()
        if recorded != wanted:
            missing = sorted(set(wanted) - set(recorded))[:5]
            extra = sorted(set(recorded) - set(wanted))[:5]
            if bad(f"{topic}: database records {extra} too many and {missing} missing"):
                return found
            continue
        topology = SkipRingTopology(db.n)
        holder = {name: node for name, node in db.by_label.items() if node is not None}
        for node_id in wanted:
            state = subscribers[node_id].topics[topic]
            mine = db.label_of(node_id)
            assert mine is not None
            if state.label != mine:
                if bad(f"{topic}: node {node_id} has label {state.label!r}, not {mine!r}"):
                    return found
                continue
            slots = tuple(_ref(holder, name) for name in topology.slots(mine))
            if (state.left, state.right, state.ring) != slots:
                have = (state.left, state.right, state.ring)
                if bad(f"{topic}: node {node_id} ({mine}) ring slots {have} != {slots}"):
                    return found
                continue
            expected = {name: holder[name] for name in topology.shortcut_labels(mine)}
            if state.shortcuts != expected and bad(
                f"{topic}: node {node_id} ({mine}) shortcuts differ from SR({db.n})"
            ):
                return found
        for node_id, node in subscribers.items():
            other = node.topics.get(topic)
            if (
                other is not None
                and other.status is not Status.ACTIVE
                and other.neighbours()
                and bad(f"{topic}: node {node_id} left but still refers to others")
            ):
                return found
    return found


def _ref(holder: Mapping[str, NodeId], name: str | None) -> Ref | None:
    return None if name is None else Ref(name, holder[name])


def is_legitimate(nodes: Mapping[NodeId, StackNode]) -> bool:
    """StackSpec.is_legitimate: the supervised skip ring SR(n) is built for every topic."""
    return not problems(nodes, limit=1)


def install(
    supervisor: Supervisor,
    subscribers: Mapping[NodeId, Subscriber],
    topic: str,
    order: list[NodeId],
    *,
    record: bool = True,
) -> None:
    """Put the nodes ``order`` into the legitimate SR(len(order)) state for ``topic``: node
    order[i] gets label l(i), its exact ring slots and shortcuts. With ``record`` the supervisor's
    database for the topic becomes exactly these nodes (round-robin index kept in range).
    Publications already stored stay."""
    n = len(order)
    topology = SkipRingTopology(n)
    by_label = {label(i): node for i, node in enumerate(order)}
    if record:
        db = TopicDatabase()
        db.add_all((label(i), node) for i, node in enumerate(order))
        old = supervisor.databases.get(topic)
        db.next = old.next % n if old is not None and n else 0
        supervisor.databases[topic] = db

    def ref(name: str | None) -> Ref | None:
        return None if name is None else Ref(name, by_label[name])

    for i, node_id in enumerate(order):
        subscriber = subscribers[node_id]
        state = subscriber.topics.get(topic)
        if state is None:
            state = subscriber.topics[topic] = TopicState(topic, node_id, subscriber.supervisor)
        mine = label(i)
        state.status = Status.ACTIVE
        state.label = mine
        left, right, ring = topology.slots(mine)
        state.left, state.right, state.ring = ref(left), ref(right), ref(ring)
        state.shortcuts = {name: by_label[name] for name in sorted(topology.shortcut_labels(mine))}
