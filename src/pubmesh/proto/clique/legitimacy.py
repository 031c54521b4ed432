"""The legitimate states of the clique stack (docs/protocols/relay.md §5), as ``is_legitimate``.

Per topic T, M_T is the set of live nodes with a running, non-leaving instance of T (the
contact included) and n = |M_T|. The state is legitimate iff, for every T:

1. every member has D = ∅, is not leaving, and has no anchor relays (a_out = a_in = ⊥);
2. its N holds n − 1 relays, one per other member;
3. each of them is *truly* direct: its next is the live ``in`` of that member's instance
   (checked against that node, not against the relay's cached sink or direct flag);
4. no leaving or stopped instance of T still holds relays;
5. every node that subscribes to T has an instance in M_T.

Scheideler's lecture Theorem 9.4 (closure): once legitimate it stays so, redundant introductions
being deleted at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from pubmesh.proto.clique.node import CliqueNode
from pubmesh.proto.core import NodeId, StackNode


def is_legitimate(nodes: Mapping[NodeId, StackNode]) -> bool:
    clique = {v: node for v, node in nodes.items() if isinstance(node, CliqueNode)}
    topics = {t for node in clique.values() for t in node.instances}
    for topic in sorted(topics):
        members = {}
        for v, node in clique.items():
            instance = node.instances.get(topic)
            if instance is None:
                continue
            if instance.leaving or instance.stopped:
                return False  # item 4 (a leaving instance holds at least its in)
            members[v] = instance
        for v, node in clique.items():
            if topic in node.subscriptions() and v not in members:
                return False  # item 5
        for v, instance in members.items():
            if instance.d or instance.a_out is not None or instance.a_in is not None:
                return False  # item 1
            if len(instance.n) != len(members) - 1:
                return False  # item 2
            sinks = set()
            for relay in instance.n.values():
                target = members.get(relay.sink)
                if target is None or relay.next != (relay.sink, target.in_.rid):
                    return False  # item 3
                sinks.add(relay.sink)
            if sinks != set(members) - {v}:
                return False  # item 2
    return True
