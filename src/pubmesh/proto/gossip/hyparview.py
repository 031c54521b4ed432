"""HyParView: the membership protocol of one topic swarm.

Source: Leitão, Pereira, Rodrigues, *HyParView: a membership protocol for reliable gossip-based
broadcast* (DSN 2007), §4; parameters from docs/protocols/gossip.md and Henriques & Pamplona §2.1.1.

How it works
============
Each member keeps two partial views of the swarm:

* the **active view**, small (fanout + 1, paper: 5) and *symmetric*: if q is in p's active
  view, p is in q's. These are the links broadcast runs over (Plumtree's eager and lazy peers
  are always a subset of it), and they are monitored: the runtime's failure detector reports
  a lost link as ``PeerDown``. It is maintained *reactively*, on joins and failures (§4.2).
* the **passive view**, larger (paper: 30), a reserve of node ids with no connection kept; it
  is refreshed *cyclically* by shuffles (§4.4) and used to repair the active view (§4.3).

The rules (each handler below quotes the one it implements):

* Join(n) at contact c (§4.2): c adds n to its active view (dropping a random member with
  DISCONNECT if full) and sends ForwardJoin(n, ARWL) to every other active member.
* ForwardJoin(n, ttl) at p from s: if ttl = 0 or |active(p)| = 1, p adds n to its active view
  and n adds p. Otherwise, if ttl = PRWL, p adds n to its passive view; and p forwards
  ForwardJoin(n, ttl − 1) to a random active member other than s.
* Disconnect(q): q leaves the active view and goes to the passive view.
* Failure of an active member (§4.3): remove it, then send Neighbor(priority) to a random
  passive node: high priority if the active view is now empty, else low. High priority is
  always accepted (dropping a random member if full; here only while a bucket of forced
  evictions allows, see below); low only if there is room; a rejection makes the requester
  try another passive node.
* Shuffle (§4.4), every ``shuffle_interval``: p sends Shuffle(p, list, ttl) on a random walk,
  list = p plus ka active and kp passive members. Where ttl reaches 0 or the active view has
  one member, the receiver answers ShuffleReply with as many of its passive nodes, and both
  sides merge what they got into their passive views, evicting first what they sent.

The rule that keeps it correct
==============================
The active view is symmetric, up to messages in flight: q is in p's exactly when p is in q's.
So a member that drops a link tells the other end: an eviction to make room, a join that timed
out and a leave each send DISCONNECT, a crashed or unreachable peer is reported to the survivor
as PeerDown, and traffic over a link only one end still has is answered with DISCONNECT (below).
A view never holds the node itself or a repeat, the passive view never holds an active member,
and every change of the active view goes to Plumtree as NeighborUp or NeighborDown (a leave
drops Plumtree with it), so the broadcast layer's links are the active view's. A member left
with no active link promotes from its passive view and, with none left to try, asks the
contact again, rather than stay isolated.

What pubmesh adds
=================
Six rules pubmesh adds, because the paper leaves them to the implementation:

* **Swarm discovery.** Every topic has its own swarm, so a node needs a member of *that* swarm
  to join. The cluster's contact node keeps a :class:`SwarmDirectory` per topic: a uniform
  random sample (reservoir sampling) of the swarm's *joined* members. A node sends
  ContactRequest(topic) to the contact and Joins the member named in the ContactReply (or is
  the first member if there is none). The member confirms with JoinReply, which is what the
  established TCP connection tells a real HyParView node; a node whose Join target is down asks
  again and names the dead member so the directory forgets it. A node that completes its join
  tells the contact (SwarmJoined), and the contact names joined members first: naming a node
  that is itself still joining lets two newcomers join each other and form an island that no
  rule of the paper ever merges back (found by the model tests' liveness check). The contact
  answers look-ups only: it carries no publications unless it is itself a member.
* **Refill.** On every shuffle tick a member whose active view is not full sends a
  low-priority Neighbor request to a passive node (§4.3 promotes from the passive view
  whenever the active view has room; doing it periodically also fills slots freed by
  DISCONNECTs, which the paper's reactive rules leave empty).
* **Rejoin.** A member whose active view is empty and whose passive view is exhausted asks
  the contact for a member again (otherwise a node isolated by a mass failure stays isolated).
* **Announce.** A joined member re-sends SwarmJoined to the contact every ``announce_every``
  shuffles (soft state): a directory emptied by lost reports or false suspicions refills, so an
  isolated member, the contact included, finds the swarm again (the model tests' liveness
  check found the contact founding a swarm of its own beside a pair it no longer knew).
* **Merge.** A periodic announce from a member whose active view is not full asks for a
  sample (``SwarmJoined.room``); the contact answers SwarmSample with a random joined member,
  which the announcer puts in its passive view and asks for a link (a high-priority Neighbor:
  the other component may be full). Shuffles walk
  the active links, so once false suspicions have cut a small swarm into components that each
  still have links, nothing in the paper brings them back together (the model tests' liveness
  check found {0, 2, 4} and {1, 3} staying apart for good); the directory samples the whole
  swarm. Members with full views (nearly all, in a large swarm) send no sample request.
* **Bridge.** Every announce carries the member's active view, and a member announces at each
  of its first ``announce_every`` shuffle ticks, then every ``announce_every``-th. For swarms
  of at most ``component_watch`` members the contact keeps each member's last announced view
  (forgotten after two announce periods) and so knows the swarm's components; a periodic
  announce from a member of one component is answered with a member of another
  (``SwarmSample.bridge``), which the announcer asks for a link with high priority even when
  its own view is full: both ends drop one random link to make room, as in X-BOT's link
  exchange (Leitão et al., SRDS 2009). Without it a small swarm whose members' views were all
  full could stay split for good with no fault at all: HyParView asks for a link only with
  room in the active view, and shuffles walk active links only (the model machines' liveness
  check found it; ``tests/proto/gossip/test_gossip_swarms.py``: about one swarm in 200 of
  4–12 members with active views of 3). A connected swarm is never rewired by it, and a swarm past
  ``component_watch`` members is not watched (the contact keeps a few ids per member only for
  small swarms; a large one rarely has every member full and cut off at once).

What a member can bring into a view, against eclipsing (docs/protocols/gossip.md §2.9, after
Brahms, Basalt and gossipsub v1.1): the paper trusts every id a message names. Here a walk's end
*invites* the named node (ForwardJoinAccept) and adds it only when it asks (Neighbor) over a
connection it made, so an id nobody answers for evicts no one; a walk travels active links;
one member's walks end in a bounded number of invitations per shuffle period; a NeighborReply
is taken only when asked for and a ShuffleReply once per shuffle; one message brings at most
an honest shuffle's number of ids; an id that failed is ignored for ``failed_memory``; and the
high-priority Neighbor requests the paper accepts by evicting a random member evict at most
``forced_evictions`` (3) members in a burst and one per shuffle period after it, whoever sends
them: a coalition's forced links could otherwise replace a node's neighbours as fast as it sends
(with a tenth of 1,000 nodes colluding, the share of honest views with more than twice the
insiders' share is 1.2x that of uniformly random views when every forced request evicts, the
paper's rule, and 1.0x with the bucket).

Non-FIFO delivery (the simulator's per-message latency) can reorder a DISCONNECT and an accept
on one link, leaving a link one-sided. Two lazy repairs answer traffic over such a link with
DISCONNECT: a Shuffle from a node outside the active view (every shuffle hop uses an active
link), and broadcast traffic from one (see :mod:`pubmesh.proto.gossip.node`). Without the
first, a node of 30,000 whose only link was one-sided missed a broadcast.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from mypy_extensions import mypyc_attr

from pubmesh.proto.core import (
    Disconnect,
    Message,
    NodeId,
    Output,
    PeerDown,
    Receive,
    Send,
    SetTimer,
    Timer,
    TimerFired,
    register_message,
)
from pubmesh.proto.gossip.params import GossipParams

NONE = -1  # "no node" in integer-typed message fields
#: SwarmDirectory's bounds when none are given (GossipParams' defaults)
DIRECTORY_TOPICS = GossipParams.directory_topics
DIRECTORY_PER_NODE = GossipParams.directory_per_node
DIRECTORY_EXPIRY = GossipParams.directory_expiry


# --------------------------------------------------------------------------------------------
# Messages (layer "membership"); every one names its topic swarm
# --------------------------------------------------------------------------------------------
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class ContactRequest(Message):
    """To the contact: name me a member of ``topic`` (``dead``: one you named that is down)."""

    topic: str
    dead: int = NONE


register_message(ContactRequest, 100, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class ContactReply(Message):
    topic: str
    member: int  # NONE: no member yet, start the swarm


register_message(ContactReply, 101, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Join(Message):
    topic: str


register_message(Join, 102, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class JoinReply(Message):
    """The member accepted our Join (a real node learns this from the TCP connection)."""

    topic: str


register_message(JoinReply, 110, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class SwarmJoined(Message):
    """To the contact: my join of ``topic``'s swarm is complete; name me to newcomers.
    ``room``: (on a periodic announce) my active view is not full; send me a SwarmSample.
    ``periodic``: a periodic announce (see Bridge); ``active``: my active view, which the
    contact's component watch reads."""

    topic: str
    room: bool = False
    periodic: bool = False
    active: "tuple[int, ...]" = ()  # noqa: UP037 (quoted: mypyc writes tuple[int, ...] as tuple)


register_message(SwarmJoined, 111, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class SwarmSample(Message):
    """The contact's answer to an announce with room: a random joined member (see Merge); or,
    with ``bridge``, a member of another component of the swarm (see Bridge)."""

    topic: str
    member: int  # NONE: the directory knows no other member
    bridge: bool = False


register_message(SwarmSample, 112, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardJoin(Message):
    topic: str
    new_node: int
    ttl: int


register_message(ForwardJoin, 103, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class ForwardJoinAccept(Message):
    """p added the new node n at the end of the walk; n adds p (the link is symmetric)."""

    topic: str


register_message(ForwardJoinAccept, 104, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Neighbor(Message):
    topic: str
    high_priority: bool


register_message(Neighbor, 105, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class NeighborReply(Message):
    topic: str
    accepted: bool


register_message(NeighborReply, 106, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class DisconnectRequest(Message):
    """HyParView's DISCONNECT: remove me from your active view."""

    topic: str


register_message(DisconnectRequest, 107, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class Shuffle(Message):
    topic: str
    origin: int
    nodes: "tuple[int, ...]"  # noqa: UP037 (quoted: mypyc writes tuple[int, ...] as tuple)
    ttl: int


register_message(Shuffle, 108, layer="membership")


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleReply(Message):
    topic: str
    nodes: "tuple[int, ...]"  # noqa: UP037 (quoted: mypyc writes tuple[int, ...] as tuple)


register_message(ShuffleReply, 109, layer="membership")


#: every membership message: the gossip node routes these to HyParView
MEMBERSHIP_MESSAGES = (
    ContactRequest,
    ContactReply,
    Join,
    JoinReply,
    SwarmJoined,
    SwarmSample,
    ForwardJoin,
    ForwardJoinAccept,
    Neighbor,
    NeighborReply,
    DisconnectRequest,
    Shuffle,
    ShuffleReply,
)


# --------------------------------------------------------------------------------------------
# Events HyParView hands to the broadcast layer (iroh-gossip's NeighborUp/NeighborDown)
# --------------------------------------------------------------------------------------------
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class NeighborUp:
    peer: NodeId


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class NeighborDown:
    peer: NodeId


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class Joined:
    """The swarm join is complete: the node may broadcast (a relay flushes its buffer)."""


MembershipOutput = Output | NeighborUp | NeighborDown | Joined


# --------------------------------------------------------------------------------------------
# Commands from the node and timers (the layer's closed input set is MembershipInput)
# --------------------------------------------------------------------------------------------
@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class JoinSwarm:
    """Begin joining the swarm through ``contact`` (the cluster's contact node)."""

    contact: NodeId


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class LeaveSwarm:
    """Leave the swarm: DISCONNECT every active member (Henriques & Pamplona §2.1.2 notifies
    them)."""


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class ShuffleTick(Timer):
    """§4.4: the periodic shuffle (and pubmesh's refill of a non-full active view)."""


@mypyc_attr(native_class=False)
@dataclass(frozen=True, slots=True)
class JoinTimeout(Timer):
    """The swarm join attempt ``generation`` got no answer in ``join_timeout`` seconds."""

    generation: int


MembershipTimer = ShuffleTick | JoinTimeout
MembershipInput = Receive | TimerFired | PeerDown | JoinSwarm | LeaveSwarm


class SwarmDirectory:
    """The contact node's per-topic directory: uniform random samples of the swarm.

    Two reservoirs per topic (Vitter's algorithm R), so joiners enter the swarm at random points
    rather than next to the newest members, which would grow the overlay like a chain
    (measured: eccentricity 16-21 instead of 7-9 at 1,000 nodes):

    * ``members``: nodes that completed a join (their SwarmJoined) or founded the swarm;
    * ``asked``: every node that asked.

    A look-up names a joined member if it knows a live one, and only otherwise a node that
    asked. Naming a node that is itself still joining lets two newcomers join each other and
    form an island that no rule of the paper merges back (the model tests' liveness check found
    it); never naming one would strand the contact when a SwarmJoined is lost with a broken
    connection and the contact's own active view empties (found by the same check).

    The **component watch** (see Bridge) keeps, for swarms of at most ``watch`` members, every
    member's last announced active view (cut to ``view_size`` ids, so a member's report cannot
    grow it) with its time; a view older than ``expiry`` seconds is forgotten (its member
    crashed or left). A swarm that grows past ``watch`` members is no longer watched
    (``unwatched``): a partial map would show a connected swarm as split.

    **Bounded whatever members send**, against memory floods. A topic's state is bounded by the
    reservoirs and the watch; the number of topics by three rules, since any member may ask
    for any topic: at most ``max_topics`` topics (the one touched least recently goes), a topic
    no one asked about or announced in for ``topic_expiry`` seconds goes, and a node holds a
    place in at most ``per_node`` topics (its place in the one it touched least recently is
    given up for a new one). Honest swarms announce every few shuffles and stay; one member
    asking for topics without end holds ``per_node`` of them. :meth:`held_bytes` is an upper
    bound of what it keeps, counted in the node's memory budget."""

    __slots__ = (
        "asked",
        "expiry",
        "holders",
        "max_topics",
        "members",
        "per_node",
        "places",
        "rng",
        "seen",
        "seen_asked",
        "size",
        "topic_expiry",
        "touched",
        "unwatched",
        "view_size",
        "views",
        "watch",
    )

    def __init__(
        self,
        size: int,
        rng: random.Random,
        watch: int = 0,
        expiry: float = 0.0,
        view_size: int = 0,
        *,
        max_topics: int = DIRECTORY_TOPICS,
        per_node: int = DIRECTORY_PER_NODE,
        topic_expiry: float = DIRECTORY_EXPIRY,
    ) -> None:
        self.size = size
        self.rng = rng
        self.max_topics = max_topics
        self.per_node = per_node
        self.topic_expiry = topic_expiry
        #: topic -> when it was last asked about or announced in, least recent first
        self.touched: OrderedDict[str, float] = OrderedDict()
        #: node -> the topics it holds a place in (a reservoir or the watch), least recent
        #: first; ``places``: how many such places in all
        self.holders: dict[NodeId, OrderedDict[str, None]] = {}
        self.places = 0
        self.members: dict[str, list[NodeId]] = {}
        self.asked: dict[str, list[NodeId]] = {}
        self.seen: dict[str, int] = {}
        self.seen_asked: dict[str, int] = {}
        self.watch = watch
        self.expiry = expiry
        self.view_size = view_size
        #: topic -> member -> (when announced, its active view)
        self.views: dict[str, dict[NodeId, tuple[float, tuple[NodeId, ...]]]] = {}
        self.unwatched: set[str] = set()

    # ------------------------------------------------------------------ bounds
    def touch(self, topic: str, now: float) -> None:
        """``topic`` asked about or announced in at ``now``: kept as recent; topics idle past
        ``topic_expiry`` go, and the least recent one when a new topic finds ``max_topics``."""
        touched = self.touched
        if topic in touched:
            touched.move_to_end(topic)
        elif len(touched) >= self.max_topics:
            self._drop_topic(next(iter(touched)))
        touched[topic] = now
        while touched:
            oldest, at = next(iter(touched.items()))
            if now - at <= self.topic_expiry:
                break
            self._drop_topic(oldest)

    def _hold(self, topic: str, node: NodeId) -> None:
        """``node`` has a place in ``topic``: past ``per_node`` topics it gives up its place in
        the one it touched least recently."""
        held = self.holders.get(node)
        if held is None:
            held = self.holders[node] = OrderedDict()
        if topic in held:
            held.move_to_end(topic)
            return
        held[topic] = None
        self.places += 1
        if len(held) > self.per_node:
            self._forget(next(iter(held)), node)

    def _forget(self, topic: str, node: NodeId) -> None:
        """``node``'s place in ``topic`` given up; a topic left with nobody goes."""
        for reservoir in (self.members.get(topic), self.asked.get(topic)):
            if reservoir is not None and node in reservoir:
                reservoir.remove(node)
        views = self.views.get(topic)
        if views is not None:
            views.pop(node, None)
        self._release(topic, node)
        if not self.members.get(topic) and not self.asked.get(topic) and not views:
            self._drop_topic(topic)

    def _release(self, topic: str, node: NodeId) -> None:
        """``node`` may no longer be in ``topic``: its place there is counted no more unless
        a reservoir or the watch still holds it."""
        if (
            node in self.members.get(topic, ())
            or node in self.asked.get(topic, ())
            or node in self.views.get(topic, {})
        ):
            return
        held = self.holders.get(node)
        if held is not None and topic in held:
            del held[topic]
            self.places -= 1
            if not held:
                del self.holders[node]

    def _drop_topic(self, topic: str) -> None:
        nodes = {
            *self.members.pop(topic, ()),
            *self.asked.pop(topic, ()),
            *self.views.pop(topic, {}),
        }
        self.seen.pop(topic, None)
        self.seen_asked.pop(topic, None)
        self.unwatched.discard(topic)
        self.touched.pop(topic, None)
        for node in sorted(nodes):
            self._release(topic, node)

    def fill(self, topic: str, members: list[NodeId], asked: list[NodeId], seen: int) -> None:
        """A warm start's reservoirs for ``topic`` (pubmesh.proto.gossip.warm), as algorithm
        R leaves them once ``seen`` members have asked and announced."""
        self.touch(topic, 0.0)
        self.members[topic] = members
        self.asked[topic] = asked
        self.seen[topic] = seen
        self.seen_asked[topic] = seen
        for node in (*members, *asked):
            self._hold(topic, node)

    def held_bytes(self) -> int:
        """An upper bound of the bytes it keeps: per topic its name, two reservoirs and a
        watched map; per place a holder's entry."""
        per_topic = 400 + 16 * 2 * self.size + self.watch * (120 + 8 * self.view_size)
        return len(self.touched) * per_topic + self.places * 80 + len(self.holders) * 200

    # ------------------------------------------------------------------ the watch
    def report(self, topic: str, member: NodeId, active: tuple[NodeId, ...], now: float) -> None:
        """``member`` announced ``active`` at ``now`` (component watch; see Bridge)."""
        if not self.watch or topic in self.unwatched:
            return
        self.touch(topic, now)
        views = self.views.setdefault(topic, {})
        views[member] = (now, active[: self.view_size])
        self._hold(topic, member)
        for node in [m for m, (at, _) in views.items() if now - at > self.expiry]:
            del views[node]
            self._release(topic, node)
        if len(views) > self.watch:
            self.unwatched.add(topic)
            del self.views[topic]
            for node in sorted(views):
                self._release(topic, node)

    def answer(
        self,
        topic: str,
        member: NodeId,
        active: tuple[NodeId, ...],
        now: float,
        *,
        periodic: bool,
        room: bool,
        extra: NodeId = NONE,
    ) -> tuple[NodeId, bool] | None:
        """The contact's answer to ``member``'s announce of ``active`` (its own, when the
        contact is a member): ``(member of another component, True)`` for a periodic announce
        of a split swarm (Bridge), else ``(random joined member, False)`` with ``room``
        (Merge; ``extra`` as in :meth:`sample`), else None."""
        self.report(topic, member, active, now)
        bridge = self.bridge(topic, member) if periodic else NONE
        if bridge != NONE:
            return bridge, True
        if room:
            return self.sample(topic, member, extra), False
        return None

    def bridge(self, topic: str, member: NodeId) -> NodeId:
        """A random member of a component of the watched swarm other than ``member``'s, NONE
        if the announced views show one component (or the swarm is not watched). Two members
        are in one component if an announced active view links them either way (a view may be
        a period old: a link either side still reports is taken as there).

        Only a *whole* map is read: while an announced view names a member that has not
        announced its own view yet, the watch knows part of the swarm, and its parts look like
        components of their own. Bridging on such a map rewired a connected swarm: in a warm
        2,000-member overlay the first 64 announces, before the swarm was known to be past the
        watch, drew 58 bridges, whose dropped links then asked for refills every shuffle
        (2,780 Neighbor requests in 30 s, 18x as many, and the rooted tree's beacons with them:
        upkeep a steady overlay should not pay). A split swarm's map is whole once each member
        has announced, which it does at each of its first ``announce_every`` shuffle ticks."""
        views = self.views.get(topic)
        if not views or member not in views:
            return NONE
        if any(peer not in views for _at, active in views.values() for peer in active):
            return NONE  # a partial map: its parts are not components
        parent = {m: m for m in views}

        def find(node: NodeId) -> NodeId:
            while parent[node] != node:
                parent[node] = parent[parent[node]]
                node = parent[node]
            return node

        for node, (_at, active) in sorted(views.items()):
            for peer in active:
                if peer in parent:
                    parent[find(node)] = find(peer)
        mine = find(member)
        others = sorted(m for m in views if find(m) != mine)
        if not others:
            return NONE
        chosen = others[self.rng.randrange(len(others))]
        # the link the member is about to make, taken as there until its next announce: the
        # other members of its component announcing before then are not sent across too
        at, active = views[member]
        views[member] = (at, (*active, chosen))
        return chosen

    def lookup(
        self, topic: str, requester: NodeId, dead: NodeId, extra: NodeId = NONE, now: float = 0.0
    ) -> int:
        """A node for ``requester`` to join (NONE if there is none: the requester founds the
        swarm and is recorded as a member); records the requester as having asked. ``extra``
        is the contact itself when it is a joined member."""
        self.touch(topic, now)
        members = self.members.setdefault(topic, [])
        asked = self.asked.setdefault(topic, [])
        for known in (members, asked):
            if dead in known:
                known.remove(dead)
        self._release(topic, dead)
        candidates = self._joined(members, requester, extra)
        if not candidates:
            candidates = [m for m in asked if m != requester]
        member = candidates[self.rng.randrange(len(candidates))] if candidates else NONE
        self._sample(asked, self.seen_asked, topic, requester)
        if member == NONE:
            self.record(topic, requester, now)
        return member

    def sample(self, topic: str, requester: NodeId, extra: NodeId = NONE) -> int:
        """A random joined member other than ``requester`` (``extra``, the contact when it is
        a joined member, counts as one), NONE if there is none; records nothing."""
        candidates = self._joined(self.members.get(topic, []), requester, extra)
        return candidates[self.rng.randrange(len(candidates))] if candidates else NONE

    @staticmethod
    def _joined(members: list[NodeId], requester: NodeId, extra: NodeId) -> list[NodeId]:
        """The joined members other than ``requester``, with ``extra`` (the contact) added."""
        candidates = [m for m in members if m != requester]
        if extra not in (NONE, requester) and extra not in candidates:
            candidates.append(extra)
        return candidates

    def record(self, topic: str, node: NodeId, now: float = 0.0) -> None:
        """``node`` is a joined member of ``topic``'s swarm."""
        self.touch(topic, now)
        self._sample(self.members.setdefault(topic, []), self.seen, topic, node)

    def _sample(
        self, reservoir: list[NodeId], seen: dict[str, int], topic: str, node: NodeId
    ) -> None:
        """One step of algorithm R: ``node`` is the n-th distinct arrival."""
        if node in reservoir:
            self._hold(topic, node)
            return
        count = seen.get(topic, 0) + 1
        seen[topic] = count
        if len(reservoir) < self.size:
            reservoir.append(node)
            self._hold(topic, node)
        else:
            slot = self.rng.randrange(count)
            if slot < len(reservoir):
                replaced, reservoir[slot] = reservoir[slot], node
                self._release(topic, replaced)
                self._hold(topic, node)


class HyParView:
    """The membership state machine of one node in one topic swarm."""

    __slots__ = (
        "active",
        "asked",
        "clock",
        "contact",
        "counters",
        "directory",
        "evict_after",
        "failed",
        "invited",
        "invited_until",
        "invites_left",
        "join_generation",
        "joined",
        "last_invite",
        "last_shuffle",
        "me",
        "p",
        "passive",
        "pending_join",
        "pending_neighbor",
        "rng",
        "ticks",
        "topic",
        "tried",
    )

    def __init__(
        self,
        me: NodeId,
        topic: str,
        params: GossipParams,
        rng: random.Random,
        directory: SwarmDirectory | None = None,
    ) -> None:
        self.me = me
        #: set on the contact node: its own directory answers its own look-ups
        self.directory = directory
        self.topic = topic
        self.p = params
        self.rng = rng
        self.active: list[NodeId] = []
        self.passive: list[NodeId] = []
        self.last_shuffle: tuple[NodeId, ...] = ()
        self.pending_neighbor: NodeId = NONE
        #: passive nodes that refused (or failed) a Neighbor request since the last tick; a
        #: list: it holds a few ids at most, and an empty list is a quarter of an empty set
        self.tried: list[NodeId] = []
        self.pending_join: NodeId = NONE
        self.joined = False
        self.join_generation = 0
        self.ticks = 0
        self.contact: NodeId = NONE
        self.counters: dict[str, int] = {}
        #: the time of the event being handled (the contact's own announce is timed by it)
        self.clock = 0.0
        # insider resilience (module docstring, "What a member can bring into a view"):
        #: nodes a ttl-0 ForwardJoin named, invited and not yet heard from: id -> deadline
        self.invited: dict[NodeId, float] = {}
        #: nodes this node sent a Neighbor request to, not answered yet (only their replies
        #: are taken)
        self.asked: dict[NodeId, None] = {}
        #: nodes that failed (a dial, an invitation unanswered): id -> until when ignored
        self.failed: dict[NodeId, float] = {}
        #: a joining node takes invitations (ForwardJoinAccept) until then, this many more
        self.invited_until = 0.0
        self.invites_left = 0
        #: per active member: when a ttl-0 ForwardJoin it forwarded last invited a node that
        #: would evict one of ours
        self.last_invite: dict[NodeId, float] = {}
        #: forced evictions are paid from a bucket: the time up to which its tokens are spent
        #: (_may_evict)
        self.evict_after = -math.inf

    # ------------------------------------------------------------------ the one entry point
    def handle(self, event: MembershipInput, now: float) -> list[MembershipOutput]:
        """HyParView's handler: a membership message, one of its timers, a failure notice, or
        the node's join and leave commands in; sends, timers and neighbour events out."""
        out: list[MembershipOutput] = []
        self.clock = now
        match event:
            case Receive(src=src, message=msg):
                self._receive(src, msg, out)
            case TimerFired(timer=timer):
                self._fire(timer, out)
            case PeerDown(peer=peer):
                self._peer_down(peer, out)
            case JoinSwarm(contact=contact):
                self._start(contact, out)
            case LeaveSwarm():
                self._leave(out)
        return out

    def receive(self, src: NodeId, msg: Message, now: float) -> list[MembershipOutput]:
        """``handle(Receive(src, msg), now)`` without the wrapper: the simulator's hot path."""
        out: list[MembershipOutput] = []
        self.clock = now
        self._receive(src, msg, out)
        return out

    def fire(self, timer: Timer, now: float) -> list[MembershipOutput]:
        """``handle(TimerFired(timer), now)`` without the wrapper: the simulator's hot path."""
        out: list[MembershipOutput] = []
        self.clock = now
        self._fire(timer, out)
        return out

    def _fire(self, timer: Timer, out: list[MembershipOutput]) -> None:
        match timer:
            case ShuffleTick():
                self._shuffle(out)
                self.tried.clear()
                self._promote(NONE, out)  # refill a non-full active view
                self.ticks += 1
                every = self.p.announce_every
                # the first ``every`` ticks announce each (a new swarm is still settling: the
                # contact's component watch needs fresh views early), then every ``every``th
                if every and (self.ticks < every or self.ticks % every == 0) and self.joined:
                    self._announce(out, periodic=True)
                out.append(SetTimer(self.p.shuffle_interval, ShuffleTick()))
            case JoinTimeout(generation=generation):
                self._join_timeout(generation, out)

    # ------------------------------------------------------------------ joining the swarm
    def _start(self, contact: NodeId, out: list[MembershipOutput]) -> None:
        """Begin joining the swarm through ``contact``; the first shuffle at a random phase."""
        self.contact = contact
        out.append(SetTimer(self.p.shuffle_interval * self.rng.uniform(0.5, 1.5), ShuffleTick()))
        self._ask_contact(NONE, out)

    def _ask_contact(self, dead: NodeId, out: list[MembershipOutput]) -> None:
        self.join_generation += 1
        if self.contact == self.me and self.directory is not None:
            member = self.directory.lookup(self.topic, self.me, dead, now=self.clock)
            self._on_contact_reply(member, out)
            return
        if self.contact == NONE or self.contact == self.me:
            # no one to ask: this node starts (or restarts) the swarm
            self._joined(out)
            return
        out.append(Send(self.contact, ContactRequest(topic=self.topic, dead=dead)))
        out.append(SetTimer(self.p.join_timeout, JoinTimeout(self.join_generation)))

    def _on_contact_reply(self, member: NodeId, out: list[MembershipOutput]) -> None:
        self.join_generation += 1
        if member == NONE or member == self.me:
            self._joined(out)  # first member of the swarm
            return
        self._add_active(member, out)
        out.append(Send(member, Join(topic=self.topic)))
        # the members its ForwardJoin walks end at will invite it: it takes as many
        # invitations as it has room for, while the walks can still be under way
        self.invited_until = self.clock + 2 * self.p.join_timeout
        self.invites_left = self.p.active_size
        self.pending_join = member
        out.append(SetTimer(self.p.join_timeout, JoinTimeout(self.join_generation)))

    def _joined(self, out: list[MembershipOutput]) -> None:
        self.pending_join = NONE
        if not self.joined:
            self.joined = True
            out.append(Joined())
            self._announce(out)

    def _announce(self, out: list[MembershipOutput], *, periodic: bool = False) -> None:
        """Tell the contact this node is a joined member (see SwarmDirectory): when the join
        completes, and again every ``announce_every`` shuffles, so a directory that lost its
        members (a SwarmJoined lost with a broken connection, members reported dead by a
        false suspicion) learns them again. A periodic announce with room in the active view
        asks for a SwarmSample (Merge); every announce carries the active view, and a periodic
        one may be answered with a member of another component (Bridge). The contact samples
        and watches its own directory."""
        room = periodic and len(self.active) < self.p.active_size
        active = tuple(self.active)
        if self.contact not in (NONE, self.me):
            joined = SwarmJoined(topic=self.topic, room=room, periodic=periodic, active=active)
            out.append(Send(self.contact, joined))
        elif self.directory is not None:
            answer = self.directory.answer(
                self.topic, self.me, active, self.clock, periodic=periodic, room=room
            )
            if answer is not None:
                self._on_answer(*answer, out)

    def _on_answer(self, member: NodeId, bridge: bool, out: list[MembershipOutput]) -> None:
        """The contact's answer to an announce (a SwarmSample, or the contact's own)."""
        if bridge:
            self._on_bridge(member, out)
        else:
            self._on_sample(member, out)

    def _on_sample(self, member: NodeId, out: list[MembershipOutput]) -> None:
        """Merge: a joined member with room in its active view takes the sampled member into
        its passive view and, unless a Neighbor request is already out, asks it at once with
        high priority, which a full member accepts by dropping one of its links: a small
        component has room, the rest of the swarm is full, and a low-priority request would be
        refused (the model's liveness check found {1, 2} beside a full {0, 3, 4, 5})."""
        if member in (NONE, self.me) or member in self.active or not self.joined:
            return
        self._add_passive(member)
        if len(self.active) < self.p.active_size and self.pending_neighbor == NONE:
            self.pending_neighbor = member
            self._ask_neighbor(member, True, out)

    def _on_bridge(self, member: NodeId, out: list[MembershipOutput]) -> None:
        """Bridge: the contact's component watch saw ``member`` in another component of the
        swarm than ours. Ask it for a link with high priority whether or not our active view is
        full: it accepts (dropping a random link of its own if full, with DISCONNECT), and so
        do we when its answer comes (``_add_active``), so both views keep their size and the
        two components become one. The two dropped members keep their other links and refill
        from their passive views. This is X-BOT's exchange of an active link for a new peer
        (Leitão, Marques, Pereira, Rodrigues, *X-BOT: A Protocol for Resilient Optimization of
        Unstructured Overlay Networks*, SRDS 2009, §4), done only where the watch shows a split,
        so a connected swarm is never rewired."""
        if member in (NONE, self.me) or member in self.active or not self.joined:
            return
        self._add_passive(member)
        # even with a refill request out: that one goes to our own component (the passive view
        # is what shuffles brought), is low priority, and the full members there refuse it
        self.pending_neighbor = member
        self._ask_neighbor(member, True, out)

    # ------------------------------------------------------------------ messages
    def _receive(self, src: NodeId, msg: Message, out: list[MembershipOutput]) -> None:
        """A membership message from ``src``."""
        name = type(msg).__name__
        self.counters[name] = self.counters.get(name, 0) + 1
        match msg:
            case ContactReply(member=member):
                if self.pending_join == NONE and not (self.joined and self.active):
                    self._on_contact_reply(member, out)
            case Join():
                self._on_join(src, out)
            case JoinReply():
                if self.pending_join == src:
                    self.join_generation += 1
                    self._joined(out)
            case ForwardJoin(new_node=new_node, ttl=ttl):
                self._on_forward_join(src, new_node, ttl, out)
            case ForwardJoinAccept():
                self._on_invitation(src, out)
            case Neighbor(high_priority=high):
                self._on_neighbor(src, high, out)
            case NeighborReply(accepted=accepted):
                self._on_neighbor_reply(src, accepted, out)
            case DisconnectRequest():
                # "Disconnect(q): q leaves the active view and goes to the passive view."
                if src in self.active:
                    self._remove_active(src, out, to_passive=True)
                    # Echo the DISCONNECT: an accept we sent q before (a ForwardJoinAccept or
                    # NeighborReply crossing q's DISCONNECT on the link) may re-add us at q
                    # after this; the echo removes that one-sided link. q ignores the echo
                    # when it does not hold us, so it cannot loop.
                    out.append(Send(src, DisconnectRequest(topic=self.topic)))
                    # Refill from the passive view, but not from q, which has just dropped us
                    # (a full node evicts a random member for a high-priority Neighbor): lonely
                    # nodes whose passive views hold only q would otherwise evict one another
                    # from q's active view forever (found by the model's liveness check).
                    # With no one else to try, the node does not ask the contact now but at
                    # its next shuffle tick: the contact would name q again, q would find the
                    # echo on a link just re-made and echo it back, and two nodes that hold
                    # only each other would exchange DISCONNECT, echo and Join forever with no
                    # timer in between (found by the FIFO model machine).
                    self._tried(src)
                    self._promote(NONE, out, ask_contact=False)
            case Shuffle(origin=origin, nodes=nodes, ttl=ttl):
                if src not in self.active:
                    # Every hop of a shuffle walk goes over an active link, so the sender holds
                    # us in its active view and we do not hold it: a one-sided link (left by
                    # reordered messages). Tell it to drop us; it will refill from its passive
                    # view. Shuffles run every period, so such links do not outlive a few.
                    out.append(Send(src, DisconnectRequest(topic=self.topic)))
                self._on_shuffle(src, origin, nodes, ttl, out)
            case ShuffleReply(nodes=nodes):
                # the origin merges the reply (one per shuffle it sent), evicting first what
                # it sent
                if self.last_shuffle:
                    self._merge_passive(self._sampled(nodes), self.last_shuffle)
                    self.last_shuffle = ()
            case SwarmSample(member=member, bridge=bridge):
                self._on_answer(member, bridge, out)

    def _on_join(self, new: NodeId, out: list[MembershipOutput]) -> None:
        """Join(n) at c: c adds n to its active view and sends ForwardJoin(n, ARWL) to every
        other active member; c confirms with JoinReply. (Not paid from the bucket of forced
        evictions: newcomers that a full contact turned away, left to the walks' invitations,
        split a 1,000-node swarm at its start.)"""
        self._add_active(new, out)
        for peer in list(self.active):
            if peer != new:
                out.append(Send(peer, ForwardJoin(topic=self.topic, new_node=new, ttl=self.p.arwl)))
        # A node that is joined by others before its own join completed still completes it:
        # the directory may name a node that is itself still joining, and marking it joined
        # here would let a cluster of newcomers grow around it, cut off from the swarm.
        out.append(Send(new, JoinReply(topic=self.topic)))

    def _on_forward_join(
        self, src: NodeId, new: NodeId, ttl: int, out: list[MembershipOutput]
    ) -> None:
        """ForwardJoin(n, ttl) at p from s: if ttl = 0 or |active(p)| = 1, add n to the active
        view; otherwise, if ttl = PRWL add n to the passive view, and forward
        ForwardJoin(n, ttl−1) to a random active member other than s."""
        if new == self.me or src not in self.active or self._failed(new):
            return  # a walk travels active links; a node that failed is not tried again yet
        candidates = [p for p in self.active if p != src and p != new]
        if ttl <= 0 or len(self.active) <= 1 or not candidates:
            if new not in self.active and new not in self.invited:
                self._invite(src, new, out)
            return
        if ttl == self.p.prwl:
            self._add_passive(new)
        target = candidates[self.rng.randrange(len(candidates))]
        out.append(Send(target, ForwardJoin(topic=self.topic, new_node=new, ttl=ttl - 1)))

    def _invite(self, src: NodeId, new: NodeId, out: list[MembershipOutput]) -> None:
        """ForwardJoin's end, as pubmesh runs it: the paper adds ``new`` to the active view at
        once. Here ``new`` is invited (ForwardJoinAccept) and enters only when its Neighbor
        request comes, over a connection it made: an id nobody answers for evicts no one. And
        one active member's walks end in an invitation (a connection to an address it names)
        at most once per shuffle period when the view is full (the invitation may evict), else
        ``active_size`` times per period; the others are dropped (the joiner has other walks)."""
        now = self.clock
        full = len(self.active) >= self.p.active_size
        gap = self.p.shuffle_interval / (1 if full else self.p.active_size)
        if now - self.last_invite.get(src, -1e18) < gap:
            return  # not into the passive view either: a flood of names would fill it
        self.last_invite[src] = now
        if len(self.invited) >= 2 * self.p.active_size:
            self.invited.pop(next(iter(self.invited)))
        self.invited[new] = now + self.p.join_timeout
        out.append(Send(new, ForwardJoinAccept(topic=self.topic)))

    def _on_invitation(self, src: NodeId, out: list[MembershipOutput]) -> None:
        """A ForwardJoinAccept: taken only while this node's own join may still draw them (the
        paper's n adds p at once); the link is asked for with a Neighbor request, which ``src``
        accepts because it invited us."""
        if src in self.active or self.clock > self.invited_until or self.invites_left <= 0:
            return
        self.invites_left -= 1
        self._ask_neighbor(src, not self.active, out)

    def _ask_neighbor(self, peer: NodeId, high: bool, out: list[MembershipOutput]) -> None:
        if len(self.asked) >= 4 * self.p.active_size:
            self.asked.pop(next(iter(self.asked)))
        self.asked[peer] = None
        out.append(Send(peer, Neighbor(topic=self.topic, high_priority=high)))

    def _failed(self, peer: NodeId) -> bool:
        until = self.failed.get(peer)
        if until is None:
            return False
        if until <= self.clock:
            del self.failed[peer]
            return False
        return True

    def _fail(self, peer: NodeId) -> None:
        """``peer`` could not be reached: not invited, asked or merged for a while."""
        if peer not in self.failed and len(self.failed) >= 2 * self.p.passive_view + 8:
            self.failed.pop(next(iter(self.failed)))
        self.failed[peer] = self.clock + self.p.failed_memory

    def _on_neighbor(self, src: NodeId, high: bool, out: list[MembershipOutput]) -> None:
        """A request is accepted if there is room or we invited its sender; the paper accepts
        a high-priority one always (dropping a random member if full), here only while the
        bucket of forced evictions allows (``_may_evict``)."""
        deadline = self.invited.pop(src, None)
        invited = deadline is not None and deadline >= self.clock
        room = len(self.active) < self.p.active_size or src in self.active
        accept = room or invited or (high and self._may_evict())
        if accept:
            self._add_active(src, out)
        out.append(Send(src, NeighborReply(topic=self.topic, accepted=accept)))

    def _may_evict(self) -> bool:
        """Whether a request the rules accept by evicting a member (a high-priority Neighbor)
        may evict one now: a token bucket of ``forced_evictions`` (0: no bucket), one more
        every shuffle period. The paper accepts every such request; a coalition of members sending
        them would then replace a node's honest neighbours as fast as it likes, and eclipse it."""
        burst = self.p.forced_evictions
        if burst == 0:
            return True
        period = self.p.shuffle_interval
        self.evict_after = max(self.evict_after, self.clock - burst * period)
        if self.evict_after + period > self.clock:
            return False
        self.evict_after += period
        return True

    def _on_neighbor_reply(self, src: NodeId, accepted: bool, out: list[MembershipOutput]) -> None:
        if src not in self.asked and src != self.pending_neighbor:
            # we asked nothing of it: an accept would let any member take a place in our
            # view, evicting an honest neighbour each time; tell it to drop us
            if accepted and src not in self.active:
                out.append(Send(src, DisconnectRequest(topic=self.topic)))
            return
        self.asked.pop(src, None)
        if self.pending_neighbor == src:
            self.pending_neighbor = NONE
        if accepted:
            self._add_active(src, out)
            self.tried.clear()
        else:
            # "a rejection makes the requester try another passive node"
            self._tried(src)
            self._promote(NONE, out)

    def _on_shuffle(
        self,
        src: NodeId,
        origin: NodeId,
        nodes: tuple[NodeId, ...],
        ttl: int,
        out: list[MembershipOutput],
    ) -> None:
        """Forward the walk while ttl > 0 and the active view has more than one member; else
        answer with as many passive nodes and merge, evicting first what was sent back."""
        ttl -= 1
        candidates = [p for p in self.active if p != src and p != origin]
        if ttl > 0 and len(self.active) > 1 and candidates:
            target = candidates[self.rng.randrange(len(candidates))]
            out.append(Send(target, Shuffle(topic=self.topic, origin=origin, nodes=nodes, ttl=ttl)))
            return
        if origin == self.me:
            return
        nodes = self._sampled(nodes)
        reply = tuple(self.rng.sample(self.passive, min(len(nodes), len(self.passive))))
        out.append(Send(origin, ShuffleReply(topic=self.topic, nodes=reply)))
        self._merge_passive(nodes, reply)

    def _sampled(self, nodes: tuple[NodeId, ...]) -> tuple[NodeId, ...]:
        """What one message may bring into the passive view: as many ids as an honest shuffle
        carries (the origin, ``shuffle_ka`` active and ``shuffle_kp`` passive members), a
        random sample of them if it names more, so one message cannot fill the view with ids
        nobody answers for."""
        most = 1 + self.p.shuffle_ka + self.p.shuffle_kp
        if len(nodes) <= most:
            return nodes
        return tuple(self.rng.sample(nodes, most))

    # ------------------------------------------------------------------ failures and timers
    def _peer_down(self, peer: NodeId, out: list[MembershipOutput]) -> None:
        """The failure detector reports ``peer`` unreachable."""
        if peer in self.passive:
            self.passive.remove(peer)
        self.asked.pop(peer, None)
        if self.invited.pop(peer, None) is not None or self.pending_neighbor == peer:
            self._fail(peer)  # an id named to us that nobody answers for
        retry = False
        if self.pending_neighbor == peer:
            # the passive node we asked is down: try another one
            self.pending_neighbor = NONE
            self._tried(peer)
            retry = True
        if self.pending_join == peer:
            # the member the contact named is gone: ask again, naming it
            self.pending_join = NONE
            if peer in self.active:
                self._remove_active(peer, out, to_passive=False)
            self._ask_contact(peer, out)
            return
        if peer in self.active:
            # "On failure of an active member: remove it, then promote from the passive view"
            self._remove_active(peer, out, to_passive=False)
            retry = True
        if retry:
            self._promote(peer, out)

    def _join_timeout(self, generation: int, out: list[MembershipOutput]) -> None:
        if generation == self.join_generation and not self.joined:
            # no JoinReply and no failure notice: the request or its answer was lost, or is
            # slow. The member may already hold us in its active view, so tell it to drop us
            # (a DISCONNECT for a link it does not have is ignored) before asking again.
            if self.pending_join != NONE:
                out.append(Send(self.pending_join, DisconnectRequest(topic=self.topic)))
                if self.pending_join in self.active:
                    self._remove_active(self.pending_join, out, to_passive=True)
                self.pending_join = NONE
            self._ask_contact(NONE, out)

    def _leave(self, out: list[MembershipOutput]) -> None:
        """Leave the swarm: DISCONNECT every active member (Henriques & Pamplona §2.1.2 notifies
        them)."""
        for peer in self.active:
            out.append(Send(peer, DisconnectRequest(topic=self.topic)))
            out.append(Disconnect(peer))
        self.active.clear()

    def _shuffle(self, out: list[MembershipOutput]) -> None:
        """p sends Shuffle(p, list, ttl) to a random active member, list = p, ka active and kp
        passive members."""
        if not self.active:
            return
        rng = self.rng
        active = rng.sample(self.active, min(self.p.shuffle_ka, len(self.active)))
        passive = rng.sample(self.passive, min(self.p.shuffle_kp, len(self.passive)))
        nodes = (self.me, *active, *passive)
        self.last_shuffle = nodes
        target = self.active[rng.randrange(len(self.active))]
        ttl = self.p.shuffle_ttl or self.p.arwl
        out.append(Send(target, Shuffle(topic=self.topic, origin=self.me, nodes=nodes, ttl=ttl)))

    def _promote(
        self, dead: NodeId, out: list[MembershipOutput], *, ask_contact: bool = True
    ) -> None:
        """Send Neighbor to a random passive node not yet tried: high priority if the active
        view is empty. With nothing left to try and no active member, ask the contact (unless
        ``ask_contact`` is false: then the next shuffle tick tries again, the tried nodes
        included)."""
        if len(self.active) >= self.p.active_size or self.pending_neighbor != NONE:
            return
        candidates = [p for p in self.passive if p not in self.tried]
        if not candidates:
            if not ask_contact:
                return
            self.tried.clear()
            if not self.active and self.pending_join == NONE:
                self.joined = False
                self._ask_contact(dead, out)
            return
        peer = candidates[self.rng.randrange(len(candidates))]
        self.pending_neighbor = peer
        self._ask_neighbor(peer, not self.active, out)

    # ------------------------------------------------------------------ views
    def _tried(self, peer: NodeId) -> None:
        if peer not in self.tried:
            self.tried.append(peer)

    def _add_active(self, peer: NodeId, out: list[MembershipOutput]) -> None:
        if peer == self.me or peer in self.active:
            return
        if len(self.active) >= self.p.active_size:
            victim = self.active[self.rng.randrange(len(self.active))]
            out.append(Send(victim, DisconnectRequest(topic=self.topic)))
            self._remove_active(victim, out, to_passive=True)
        if peer in self.passive:
            self.passive.remove(peer)
        self.active.append(peer)
        out.append(NeighborUp(peer))

    def _remove_active(
        self, peer: NodeId, out: list[MembershipOutput], *, to_passive: bool
    ) -> None:
        self.active.remove(peer)
        self.last_invite.pop(peer, None)
        out.append(NeighborDown(peer))
        if to_passive:
            self._add_passive(peer)

    def _add_passive(self, peer: NodeId, evict_first: Iterable[NodeId] = ()) -> None:
        if peer == self.me or peer in self.active or peer in self.passive or self._failed(peer):
            return
        if self.p.passive_view == 0:
            return
        if len(self.passive) >= self.p.passive_view:
            preferred = [p for p in evict_first if p in self.passive]
            if preferred:
                self.passive.remove(preferred[0])
            else:
                self.passive.pop(self.rng.randrange(len(self.passive)))
        self.passive.append(peer)

    def _merge_passive(self, nodes: Iterable[NodeId], sent: Iterable[NodeId]) -> None:
        sent = tuple(sent)
        for node in nodes:
            self._add_passive(node, sent)
