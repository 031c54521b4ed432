"""Corrupted initial states of the clique stack (docs/protocols/relay.md §6), for ``[init]
corruption``.

A self-stabilizing protocol must converge from any state its types allow (docs/design.md). The
hook rewrites the nodes' state, per topic, into one of the spec's kinds, after every node has
started and subscribed:

* ``random_graph``: a random tree with random directions plus n/2 random edges; each edge
  a → b is a relay at a, direct or (half of them) chained through a third member, in N (70%)
  or D, and 10% of them with a wrong cached sink or direct claim;
* ``line``: a directed path (the slowest case);
* ``cliques``: 2–5 sub-cliques joined by single relays;
* ``indirect``: the clique with every relay one hop too long;
* ``sets``: a legitimate clique, then per member 1–3 relays moved from N to D, redundant twins,
  junk D relays, 5% of the members leaving with an anchor (they leave, stop and rejoin) and 5%
  with garbage anchors;
* ``junk``: a legitimate clique and junk messages in flight (one per member, or
  ``junk_messages``).

What the hook may not do (spec §6): reference a node that does not exist, or leave a holder
count below the truth. Counts are recomputed from the installed relays and never lowered
(references already in flight, E_M, keep theirs); the installed relay graph is weakly
connected. Junk never carries a Release, RelayGone, SinkFix or HoldCount for an existing relay
(which could lower a count below the truth), and a junk reference to an existing relay counts
a holder.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pubmesh.proto.clique.messages import AskForIntro, AskToReverse, Introduce, Reverse, Search
from pubmesh.proto.clique.node import CliqueNode, Instance
from pubmesh.proto.core import Message, NodeId, StackNode
from pubmesh.proto.relay.layer import OUT, Relay
from pubmesh.proto.relay.messages import HoldCount, Ref, RelayGone, SinkFix

KINDS = ("random_graph", "line", "cliques", "indirect", "sets", "junk")
Junk = tuple[NodeId, NodeId, Message]


def corrupt(
    kind: str,
    nodes: Mapping[NodeId, StackNode],
    rng: random.Random,
    params: Any = None,
    junk_messages: int = 0,
) -> list[Junk]:
    """StackSpec.corrupt: rewrite ``nodes`` in place into a corrupted state of ``kind`` and
    return the junk messages to put in flight."""
    return install_state("clique", INSTALL, kind, nodes, rng, junk_messages)


#: a junk group message from its header, a junk Ref and the node ids (d2g adds its own)
JunkMaker = Callable[[dict[str, Any], Ref, list[NodeId], NodeId, random.Random], Message]


def install_state(
    stack: str,
    table: Mapping[str, Callable[[Installer], None]],
    kind: str,
    nodes: Mapping[NodeId, StackNode],
    rng: random.Random,
    junk_messages: int,
    extra_junk: Sequence[JunkMaker] = (),
) -> list[Junk]:
    """Rewrite every topic group of ``nodes`` with ``table[kind]`` (module doc), recount the
    holders and make the junk: the clique's and d2g's corruption hooks."""
    if kind not in table:
        raise ValueError(f"unknown {stack} corruption {kind!r} (kinds: {', '.join(table)})")
    clique = {v: n for v, n in sorted(nodes.items()) if isinstance(n, CliqueNode) and n.started}
    topics = sorted({t for n in clique.values() for t in n.wanted})
    total = 0
    for topic in topics:
        members = _members(clique, topic)
        if len(members) < 2:
            continue
        total += len(members)
        for v in members:
            _reset(clique[v], topic)
        table[kind](Installer(clique, topic, members, rng))
    _recount(clique)
    count = junk_messages if junk_messages or kind != "junk" else total
    return [_junk(clique, topics, rng, extra_junk) for _ in range(count)] if topics else []


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: Any = None) -> None:
    """StackSpec.warm_start (``[init] overlay = "warm"``): every topic group a legitimate
    clique (spec §5), each member holding one direct relay to every other member's ``in``,
    with the holder counts those relays make; spec §9 C2 and C3 start here."""
    install_state("clique", {"warm": Installer.legitimate_clique}, "warm", nodes, rng, 0)


def _members(clique: Mapping[NodeId, CliqueNode], topic: str) -> list[NodeId]:
    """M_T: the contact and every node that wants the topic, each with an instance."""
    out = []
    for v, node in clique.items():
        if topic not in node.wanted and not node.is_contact:
            continue
        if topic not in node.instances:
            instance = Instance(topic, node.layer.new_in(topic, 0.0))
            instance.delivering = not node.is_contact
            node.instances[topic] = instance
            node.unarmed.add(topic)
        out.append(v)
    return out


def _reset(node: CliqueNode, topic: str) -> None:
    """Forget the instance's OUT relays (without Releases: counts stay high, which is
    allowed) and anchors; keep its ``in``."""
    instance = node.instances[topic]
    for relay in [*instance.n.values(), *instance.d.values()]:
        node.layer.relays.pop(relay.rid, None)
    for anchor in (instance.a_out, instance.a_in):
        if anchor is not None:
            node.layer.relays.pop(anchor.rid, None)
    instance.n.clear()
    instance.d.clear()
    instance.a_out = instance.a_in = None
    instance.leaving = False
    instance.stopped = False
    instance.delivering = not node.is_contact


class Installer:
    def __init__(
        self,
        clique: Mapping[NodeId, CliqueNode],
        topic: str,
        members: list[NodeId],
        rng: random.Random,
    ) -> None:
        self.clique = clique
        self.topic = topic
        self.members = members
        self.rng = rng

    def _instance(self, v: NodeId) -> Instance:
        return self.clique[v].instances[self.topic]

    def edge(
        self,
        a: NodeId,
        b: NodeId,
        *,
        chained: bool = False,
        into_n: bool = True,
        wrong: bool = False,
    ) -> Relay:
        """A relay at a ending at b: straight to b's ``in``, or through a third member."""
        target = self._instance(b).in_
        layer = self.clique[a].layer
        others = [c for c in self.members if c not in (a, b)]
        if chained and others:
            c = others[self.rng.randrange(len(others))]
            hop = self.clique[c].layer.new_out(self.topic, (b, target.rid), b, True, 0.0)
            self._instance(c).d[hop.rid] = hop  # held by c, which will delegate it
            relay = layer.new_out(self.topic, (c, hop.rid), b, False, 0.0)
        else:
            relay = layer.new_out(self.topic, (b, target.rid), b, True, 0.0)
        if wrong:
            if self.rng.random() < 0.5 and others:
                relay.sink = others[self.rng.randrange(len(others))]
            else:
                relay.direct = not relay.direct
        group = self._instance(a).n if into_n else self._instance(a).d
        group[relay.rid] = relay
        return relay

    def random_graph(self) -> None:
        order = list(self.members)
        self.rng.shuffle(order)
        edges = []
        for i in range(1, len(order)):
            j = order[self.rng.randrange(i)]
            edges.append((order[i], j) if self.rng.random() < 0.5 else (j, order[i]))
        for _ in range(len(order) // 2):
            a, b = self.rng.sample(order, 2)
            edges.append((a, b))
        for a, b in edges:
            self.edge(
                a,
                b,
                chained=self.rng.random() < 0.5,
                into_n=self.rng.random() < 0.7,
                wrong=self.rng.random() < 0.1,
            )

    def line(self) -> None:
        order = list(self.members)
        self.rng.shuffle(order)
        for a, b in itertools.pairwise(order):
            self.edge(a, b)

    def cliques(self) -> None:
        order = list(self.members)
        self.rng.shuffle(order)
        k = min(len(order), self.rng.randint(2, 5))
        groups = [order[i::k] for i in range(k)]
        for group in groups:
            for a in group:
                for b in group:
                    if a != b:
                        self.edge(a, b)
        for left, right in itertools.pairwise(groups):
            self.edge(left[0], right[0])

    def legitimate_clique(self) -> None:
        self.full_clique(indirect=False)

    def random_digraph(self, m: int) -> None:
        """Every member a direct relay to ``m`` distinct others, each chosen at random."""
        for a in self.members:
            others = [b for b in self.members if b != a]
            for b in self.rng.sample(others, min(m, len(others))):
                self.edge(a, b)

    def star(self) -> None:
        """d2g's ``star`` (spec §6): every member points at one centre, which points at one
        of them (in-degree n − 1 at the centre, 1 or 0 elsewhere)."""
        centre = self.members[self.rng.randrange(len(self.members))]
        others = [v for v in self.members if v != centre]
        for v in others:
            self.edge(v, centre)
        self.edge(centre, others[self.rng.randrange(len(others))])

    def full_clique(self, *, indirect: bool) -> None:
        for a in self.members:
            for b in self.members:
                if a != b:
                    self.edge(a, b, chained=indirect and len(self.members) > 2)

    def sets(self) -> None:
        """spec §6 ``sets``: N→D moves, redundant twins, junk D relays, leaving members with
        an anchor, garbage anchors."""
        for v in self.members:
            instance = self._instance(v)
            layer = self.clique[v].layer
            for _ in range(self.rng.randint(1, 3)):
                if instance.n:
                    rid = sorted(instance.n)[self.rng.randrange(len(instance.n))]
                    instance.d[rid] = instance.n.pop(rid)
            others = [b for b in self.members if b != v]
            if self.rng.random() < 0.5:
                self.edge(v, others[self.rng.randrange(len(others))])  # a redundant twin
            if self.rng.random() < 0.5:
                b = others[self.rng.randrange(len(others))]
                self.edge(v, b, chained=True, into_n=False)  # a junk D relay
            roll = self.rng.random()
            if roll < 0.10 and not self.clique[v].is_contact:
                anchor = others[self.rng.randrange(len(others))]
                a_out = self.edge(v, anchor)
                del instance.n[a_out.rid]
                instance.a_out = a_out
                instance.a_in = layer.new_in(self.topic, 0.0)
                if roll < 0.05:
                    instance.leaving = True
                    instance.delivering = False


def _sets_clique(installer: Installer) -> None:
    installer.full_clique(indirect=False)
    installer.sets()


INSTALL: dict[str, Callable[[Installer], None]] = {
    "random_graph": Installer.random_graph,
    "line": Installer.line,
    "cliques": Installer.cliques,
    "indirect": lambda installer: installer.full_clique(indirect=True),
    "sets": _sets_clique,
    "junk": Installer.legitimate_clique,
}
assert tuple(INSTALL) == KINDS


def _recount(clique: Mapping[NodeId, CliqueNode]) -> None:
    """Holder counts raised by the installed relays (E_L), never lowered (spec §6)."""
    counts: dict[tuple[NodeId, int], dict[NodeId, int]] = {}
    for v, node in clique.items():
        for relay in node.layer.relays.values():
            if relay.kind == OUT and relay.next is not None:
                per = counts.setdefault(relay.next, {})
                per[v] = per.get(v, 0) + 1
    for v, node in clique.items():
        for relay in node.layer.relays.values():
            if relay is node.layer.port:
                continue
            for holder, k in counts.get((v, relay.rid), {}).items():
                # added to what was there: the references in flight (E_M) counted at their
                # sending stay counted, and relays removed above leave extras (allowed)
                relay.holders[holder] = relay.holders.get(holder, 0) + k


def _junk(
    clique: Mapping[NodeId, CliqueNode],
    topics: list[str],
    rng: random.Random,
    extra: Sequence[JunkMaker] = (),
) -> Junk:
    """One junk message (spec §6): a group message with a random header and Refs that are
    stale, the receiver's own ``in``, indirect or falsely claimed; or a relay message for an
    unknown rid; some for a topic nobody runs."""
    nodes = sorted(clique)
    src, dst = rng.choice(nodes), rng.choice(nodes)
    unknown = rng.getrandbits(62) | (1 << 62)  # never a rid a node drew (those are < 2^63
    # and the chance of a hit is nil); kept above 2^62 so the PORT is never named
    if rng.random() < 0.25:
        kind = rng.randrange(3)
        relay_message: Message
        if kind == 0:
            relay_message = RelayGone(rid=unknown)
        elif kind == 1:
            relay_message = SinkFix(rid=unknown, sink=rng.choice(nodes), direct=rng.random() < 0.5)
        else:
            relay_message = HoldCount(pairs=((unknown, rng.randrange(3)),))
        return (src, dst, relay_message)
    topic = rng.choice(topics) if rng.random() < 0.9 else "nobody-runs-this"
    target = clique[dst]
    instance = target.instances.get(topic)
    rid = instance.in_.rid if instance is not None and rng.random() < 0.7 else unknown
    ref = _junk_ref(clique, topic, dst, rng)
    header: dict[str, Any] = {
        "topic": topic,
        "rid": rid,
        "prev": rng.getrandbits(62),
        # the eventual receiver, where a reference it carries is counted (the claim that is
        # wrong in junk is ``direct``)
        "sink": dst,
        "direct": rng.random() < 0.5,
        "hop": 1,
    }
    pick = rng.randrange(5 + len(extra))
    message: Message
    if pick >= 5:
        message = extra[pick - 5](header, ref, nodes, src, rng)
    elif pick == 0:
        message = AskForIntro(**header, u=ref, introducer=src)
    elif pick == 1:
        message = Introduce(**header, w=ref, introducer=src)
    elif pick == 2:
        message = AskToReverse(**header, out=ref)
    elif pick == 3:
        message = Reverse(**header, out=ref)
    else:
        message = Search(**header, sid=rng.choice(nodes), origin=src, d_left=2, hops=0)
    return (src, dst, message)


def _junk_ref(
    clique: Mapping[NodeId, CliqueNode], topic: str, dst: NodeId, rng: random.Random
) -> Ref:
    """A reference that is stale, the receiver's own ``in``, indirect, or falsely claimed;
    one to an existing relay counts a holder (dst) there."""
    nodes = sorted(clique)
    owner = rng.choice(nodes)
    layer = clique[owner].layer
    mine = [r for r in layer.relays.values() if r.key == topic]
    roll = rng.random()
    if roll < 0.25 or not mine:
        stale = rng.getrandbits(62) | (1 << 62)
        return Ref(owner=owner, rid=stale, sink=owner, is_in=True, holder=dst)
    if roll < 0.4 and topic in clique[dst].instances:
        own = clique[dst].instances[topic].in_
        own.holders[dst] = own.holders.get(dst, 0) + 1
        return Ref(owner=dst, rid=own.rid, sink=dst, is_in=True, holder=dst)
    relay = mine[rng.randrange(len(mine))]
    relay.holders[dst] = relay.holders.get(dst, 0) + 1
    sink = relay.sink if rng.random() < 0.8 else rng.choice(nodes)
    is_in = (relay.next is None) if rng.random() < 0.8 else relay.next is not None
    return Ref(owner=owner, rid=relay.rid, sink=sink, is_in=is_in, holder=dst)
