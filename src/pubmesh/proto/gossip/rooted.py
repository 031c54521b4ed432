"""The rooted tree: Plumtree's eager links chosen by a root-distance gradient.

How it works
============
The member with the lowest id is the root and starts a round every ``beacon_interval``; the
round's beacons spread over the HyParView active view, and every member takes as parent a
neighbour one hop closer to the root (DSDV's gradient). The parent and the children are the
member's tree links, which Plumtree keeps eager; the other links stay lazy and repair by
IHAVE/GRAFT what the tree misses. The sections below tell why and give the rules.

Why
===
Plumtree (SRDS 2007 §3) builds its tree from the broadcasts themselves: a duplicate prunes the
link it came on, so the eager graph becomes the first broadcast's first-arrival tree. One
broadcast at a time, that works (RMR 0); but the tree is shared by every sender, and two
broadcasts in flight at once prune *different* edges of the same cycle (each cuts the cycle
where its own two wavefronts meet), so the eager graph falls apart into a forest. IHAVE/GRAFT
repairs the gaps after ``timeout1``, every graft closes a new cycle, and under load the
graph never settles: at 8 publications/s on 1,000 nodes RMR stays near 0.43 and the deepest
delivery takes 2.5× flooding's hops (BENCHMARKS.md, "gossip under concurrent publications").
Even alone, a first-arrival tree over random link latencies is deep (LDH 2.2× flooding's),
and the §3.8 optimization, which moves one node closer to one sender, moves it away from the
others. The Plumtree paper notes that its tree is shaped by the first sender and that other
senders may see a worse one (§3.8, §6); Thicket (Ferreira, Leitão, Rodrigues, SRDS 2010)
answers with one tree per sender, which floods every new sender's first message — the
common case when any subscriber may publish. Prune races are a property of pruning on
duplicates, whatever the tree count (iroh-gossip and Partisan's plumtree keep the paper's
rule and tolerate RMR < 1 under bursts).

What
====
This module takes the tree out of the broadcasts' hands, as GoCast does (Tang, Chang, Ward,
*GoCast: Gossip-enhanced Overlay Multicast for Fast and Dependable Group Communication*,
DSN 2005: a root floods periodic heartbeats over the overlay and every node takes as parent
the neighbour that offers the best path to the root; messages travel the tree, and gossip of
message ids over the other overlay links repairs what the tree misses). Here the tree is a
breadth-first tree of the HyParView active view rooted at the member with the lowest id, and
its links are Plumtree's eager links; everything else of Plumtree stays: IHAVE to the lazy
links, GRAFT after ``timeout1``, duplicates pruning the links a graft added. Since the tree
does not depend on which broadcast arrived first where, concurrent broadcasts cannot cut it,
and a breadth-first tree has depth ≈ the overlay's eccentricity, so the deepest delivery
from any sender is at most depth(sender) + height (≈ flooding's LDH on a random overlay).

The gradient is DSDV's (Perkins, Bhagwat, SIGCOMM 1994): the root sends ``Beacon(root, seq,
dist 0)`` to its neighbours every ``beacon_interval`` with a new sequence number, and every
node keeps (root, seq, dist, parent):

* **better root**: a beacon naming a lower root id than ours (and not one we hold dead) is
  adopted at once: its sender becomes our parent, dist = its dist + 1;
* **new round**: a newer seq of our root is adopted from our parent when the parent brings
  it (or at once if we have no parent); brought first by another neighbour, it waits until
  the next tick for the parent's (so random latencies do not make the tree flap every
  round), then the best neighbour that has it is taken;
* **shorter path, same round**: a neighbour of the same seq whose dist + 1 is strictly less
  than ours becomes our parent. Within one seq a node's dist only decreases, so along parent
  pointers dist strictly decreases and no loop can form (DSDV's argument);
* **parent lost** (HyParView's NeighborDown, or its beacon saying it is detached): a neighbour
  of the same seq with dist ≤ ours − 1 is taken (it cannot be our descendant: theirs are
  deeper); else we are detached (dist ∞) until the next round, we say so to our neighbours,
  and the subtree stays a tree hanging from us, repaired by IHAVE/GRAFT meanwhile;
* every change of (root, seq, dist, parent) is sent to every active neighbour, so each node
  knows its children (the neighbours whose last beacon names it as parent); a new neighbour
  (NeighborUp) gets our beacon at once;
* **root gone**: no new seq for ``root_timeout`` and the root is held dead (its last seq
  remembered for ``10 × root_timeout``, so its old beacons are not taken back) and the node
  claims the root itself after a spread of up to one beacon interval drawn from its id (no
  random draw: Plumtree draws nothing from the node's stream); lower ids win, and a node
  forwards a claim only when it improves what it holds, so a root change costs a few waves;
* **round request**: a node that detaches asks for a new round instead of waiting up to a
  beacon interval for the next one, as Babel's seqno requests do (RFC 8966 §3.8.2.1-3.8.2.2;
  DSDV has no such request, its destinations only advertise periodically):
  ``RoundRequest(root, seq)`` goes to every active neighbour; a neighbour already in a newer
  round answers with its beacon; one attached in round ``seq`` forwards the request to its
  parent, once per round; the root, receiving a request for its current round, starts the
  next one at once, or ``beacon_interval / 4`` after its last round started (a
  ``RoundDue`` timer), so a burst of detachments costs one round. Without it, the fragments
  the overlay's start-up churn detaches stay detached until the root's first tick, 2 to 4
  s after its start, and every broadcast meanwhile reaches them only by IHAVE and GRAFT
  after ``timeout1`` (measured: the first second of publications in a 32-node cluster at
  300/s had a p99 of 0.6-1.2 s).

The rule that keeps it correct
==============================
Parent pointers never close a loop. A node takes as parent only a neighbour whose last beacon
offers a better place: a lower root, a newer round of its root, or, in its own round, a smaller
dist from a neighbour that does not name the node as its parent; and a detached node takes no
offer of its own round (one may come from its own subtree). So within a round dist strictly
decreases along parent pointers (DSDV's argument), and the tree links form a forest: the root's
tree and, until the next round, detached fragments, each still a tree. Tree links are always
eager, whatever duplicates or PRUNEs say: only beacons and NeighborDown change them.

Eager links = the tree links (parent and children) plus *temporary* links: those a GRAFT
opened (ours or a neighbour's), a new neighbour's, and a link that brought a first copy
outside the tree. A temporary link goes lazy after ``temp_ttl`` seconds, or at once with a
PRUNE when a duplicate comes over it, as in Plumtree. A duplicate over a tree link prunes
nothing, and a PRUNE from a tree neighbour is ignored: the beacons decide the tree.

``tree = "plumtree"`` keeps the paper's behaviour (and the Henriques & Pamplona scenarios select
it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from pubmesh.proto.core import Message, NodeId, Outbox, Send, SetTimer, Timer, register_message

#: dist of a detached node (no path to the root this round)
INF = 1 << 30
NONE = -1


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Beacon(Message):
    """The sender's place in the rooted tree: its root, the root's round ``seq``, its hops
    to the root (``dist``, INF when detached) and its parent (NONE at the root)."""

    topic: str
    root: int
    seq: int
    dist: int
    parent: int


register_message(Beacon, 124, layer="tree")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class RoundRequest(Message):
    """A detached node asks ``root`` for a round newer than ``seq`` (module essay)."""

    topic: str
    root: int
    seq: int


register_message(RoundRequest, 125, layer="tree")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class BeaconTick(Timer):
    """Every beacon_interval: the root starts a round; the others check the root's age."""


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class RoundDue(Timer):
    """The root's requested round, once ``beacon_interval / 4`` has passed since its last."""


class RootedTree:
    """One node's place in a topic swarm's rooted tree (module essay)."""

    __slots__ = (
        "changed",
        "children",
        "dead",
        "dist",
        "forwarded",
        "heard",
        "interval",
        "me",
        "nbr",
        "parent",
        "pending",
        "requesting",
        "root",
        "round_at",
        "round_due",
        "seq",
        "ticking",
        "timeout",
        "topic",
    )

    def __init__(self, me: NodeId, topic: str, interval: float, timeout: float) -> None:
        self.me = me
        self.topic = topic
        self.interval = interval
        self.timeout = timeout
        self.root: NodeId = me
        self.seq = 0
        self.dist = 0
        self.parent: NodeId = NONE
        #: when our root's latest round reached us
        self.heard = 0.0
        #: each neighbour's last beacon: (root, seq, dist, parent)
        self.nbr: dict[NodeId, tuple[int, int, int, int]] = {}
        self.children: set[NodeId] = set()
        #: roots held dead: root -> (its last seq, when)
        self.dead: dict[NodeId, tuple[int, float]] = {}
        #: a newer round of our root waits for our parent (until the next tick)
        self.pending = False
        self.ticking = False
        #: set when (root, seq, dist, parent) changed and the neighbours must hear it
        self.changed = False
        #: we detached: ask our neighbours for a new round at the next flush
        self.requesting = False
        #: the round of our root whose request we last forwarded to our parent
        self.forwarded = -1
        #: at the root: when its current round started, and whether a requested round waits
        #: for the gap (a RoundDue timer runs)
        self.round_at = -math.inf
        self.round_due = False

    # ------------------------------------------------------------------ queries
    def is_tree_link(self, peer: NodeId) -> bool:
        return peer == self.parent or peer in self.children

    def tree_links(self) -> set[NodeId]:
        links = set(self.children)
        if self.parent != NONE:
            links.add(self.parent)
        return links

    def beacon(self) -> Beacon:
        return Beacon(
            topic=self.topic, root=self.root, seq=self.seq, dist=self.dist, parent=self.parent
        )

    def start(self, now: float, out: Outbox[Send | SetTimer]) -> None:
        """Arm the tick once (the first neighbour); a spread from the id, no random draw."""
        if self.ticking:
            return
        self.ticking = True
        self.heard = now
        out.append(SetTimer(self.interval * (1.0 + self._spread()), BeaconTick()))

    def start_warm(
        self, root: NodeId, dist: int, parent: NodeId, nbr: dict[NodeId, tuple[int, int]]
    ) -> None:
        """A warm start's place (pubmesh.proto.gossip.warm): round 1 of ``root`` as the
        protocol leaves it, ``nbr`` each neighbour's dist and parent. The tick is armed by
        the node's first event (a warm start has no outputs)."""
        self.root, self.seq, self.dist, self.parent = root, 1, dist, parent
        self.nbr = {peer: (root, 1, d, p) for peer, (d, p) in nbr.items()}
        self.children = {peer for peer, (_, p) in nbr.items() if p == self.me}

    def _spread(self) -> float:
        return ((self.me * 2654435761) % 1024) / 1024

    # ------------------------------------------------------------------ events
    def on_beacon(self, src: NodeId, msg: Beacon, now: float) -> None:
        root, seq, dist, parent = msg.root, msg.seq, msg.dist, msg.parent
        self.nbr[src] = (root, seq, dist, parent)
        if parent == self.me:
            self.children.add(src)
        else:
            self.children.discard(src)
        held = self.dead.get(root)
        if held is not None and seq <= held[0]:
            return  # a dead root's old round
        if root < self.root and root != self.me:
            if dist < INF:
                self._adopt(root, seq, src, dist + 1, now)
            return
        if root != self.root or root == self.me:
            return
        if seq > self.seq:
            if dist >= INF:
                return
            if src == self.parent or self.parent == NONE or self.dist >= INF:
                self._adopt(root, seq, src, dist + 1, now)
                self._improve()
            else:
                self.pending = True
            return
        if seq == self.seq:
            if self.dist >= INF:
                return  # detached: only a new round attaches us again (see _parent_lost)
            if src == self.parent and dist >= INF:
                self._parent_lost(gone=False)
            elif src == self.parent and dist + 1 < self.dist:
                self.dist = dist + 1
                self.changed = True
            elif dist + 1 < self.dist and parent != self.me:
                self._set_parent(src, dist + 1)

    def neighbor_down(self, peer: NodeId) -> None:
        self.nbr.pop(peer, None)
        self.children.discard(peer)
        if peer == self.parent:
            self._parent_lost(gone=True)

    def on_request(
        self, src: NodeId, msg: RoundRequest, now: float, out: Outbox[Send | SetTimer]
    ) -> None:
        """RoundRequest(root, seq) from ``src`` (module essay, round request)."""
        if msg.root != self.root:
            return  # another root's: the requester learns ours from our beacons
        if self.root == self.me:
            if msg.seq < self.seq:
                out.append(Send(src, self.beacon()))  # our newer round, which it missed
            elif now - self.round_at >= self.interval / 4:
                self._new_round(now)
            elif not self.round_due:
                self.round_due = True
                out.append(SetTimer(self.round_at + self.interval / 4 - now, RoundDue()))
            return
        if self.dist >= INF:
            return  # detached too: our own request is out
        if self.seq > msg.seq:
            out.append(Send(src, self.beacon()))
        elif self.seq == msg.seq and self.forwarded != self.seq and self.parent != NONE:
            self.forwarded = self.seq
            out.append(Send(self.parent, msg))

    def round_due_fired(self, now: float) -> None:
        """RoundDue: the requested round, if we are still the root."""
        self.round_due = False
        if self.root == self.me:
            self._new_round(now)

    def _new_round(self, now: float) -> None:
        self.seq += 1
        self.round_at = self.heard = now
        self.dist = 0
        self.parent = NONE
        self.changed = True

    def tick(self, now: float, out: Outbox[Send | SetTimer]) -> None:
        out.append(SetTimer(self.interval, BeaconTick()))
        if self.root == self.me:
            self._new_round(now)
            return
        if self.pending:
            self._take_newest(now)
        if now - self.heard > self.timeout + self.interval * self._spread():
            # the root is gone: hold it dead and claim the root ourselves
            self.dead[self.root] = (self.seq, now)
            self.root, self.seq, self.dist, self.parent = self.me, 1, 0, NONE
            self.heard = now
            self.pending = False
            self.changed = True
        keep = 10 * self.timeout
        for root in [r for r, (_, at) in self.dead.items() if now - at > keep]:
            del self.dead[root]

    def flush(self, active: list[NodeId], out: Outbox[Send | SetTimer]) -> None:
        """Tell every active neighbour our place if it changed, and ask them for a new round
        if we detached."""
        if self.changed:
            self.changed = False
            beacon = self.beacon()
            for peer in active:
                out.append(Send(peer, beacon))
        if self.requesting:
            self.requesting = False
            if self.dist >= INF:
                request = RoundRequest(topic=self.topic, root=self.root, seq=self.seq)
                for peer in active:
                    out.append(Send(peer, request))

    # ------------------------------------------------------------------ rules
    def _adopt(self, root: NodeId, seq: int, parent: NodeId, dist: int, now: float) -> None:
        self.root, self.seq, self.heard = root, seq, now
        self.pending = False
        self._set_parent(parent, dist)

    def _set_parent(self, parent: NodeId, dist: int) -> None:
        self.parent, self.dist = parent, dist
        self.children.discard(parent)
        self.changed = True

    def _improve(self) -> None:
        """After adopting a round: a neighbour already in it that offers a shorter path."""
        best = self._best(self.seq, self.dist - 1)
        if best is not None:
            self._set_parent(best[1], best[0] + 1)

    def _best(self, seq: int, at_most: int) -> tuple[int, NodeId] | None:
        best: tuple[int, NodeId] | None = None
        for peer, (root, s, dist, parent) in self.nbr.items():
            if root != self.root or s != seq or parent == self.me or dist > at_most:
                continue
            if best is None or (dist, peer) < best:
                best = (dist, peer)
        return best

    def _parent_lost(self, gone: bool) -> None:
        """Take a same-round neighbour with dist ≤ ours − 1 (never a descendant), else
        detach until the next round. A detached node keeps its subtree, and a parent that is
        only detached (not ``gone``) stays its parent: the fragment stays a tree, whose
        members keep reaching each other until the next round joins it to the rest. A
        detached node takes no same-round offer: one may come from its own subtree, sent
        before the detachment, and would close a loop."""
        best = self._best(self.seq, self.dist - 1) if self.dist < INF else None
        if best is not None:
            self._set_parent(best[1], best[0] + 1)
            return
        if gone:
            self.parent = NONE
        self.dist = INF
        self.changed = True
        self.requesting = True

    def _take_newest(self, now: float) -> None:
        """A newer round waited a tick for our parent: take the best neighbour in it."""
        newest = max(
            (s for r, s, d, p in self.nbr.values() if r == self.root and d < INF),
            default=self.seq,
        )
        if newest <= self.seq:
            self.pending = False
            return
        best = self._best(newest, INF - 1)
        if best is not None:
            self._adopt(self.root, newest, best[1], best[0] + 1, now)
