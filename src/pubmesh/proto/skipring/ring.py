"""One subscriber's BuildSR instance for one topic: the extended BuildRing and the shortcuts
(Feldmann et al. §2.2, §3.2; docs/protocols/skipring.md §3, §5, §6).

How it works
============
A subscriber v keeps, per topic, its ``label`` (None = ⊥), its closest known smaller and larger
neighbours ``left`` and ``right``, the closing edge ``ring`` (only the smallest and the largest
node keep one), and a table ``shortcuts`` from shortcut label to node. Every stored neighbour is
a :class:`Ref`: (believed label, node). Refs are ordered as (label, node) tuples: the label
orders by r exactly (see :mod:`.labels`), and the node id breaks ties between equal labels,
which can only exist in corrupted states (spec §10.3: the supervisor's configuration decides
which one is right; until then the id keeps linearization a total order).

*Linearization* (BuildRing, Feldmann et al. §2.2 after [12]): v keeps the closest node on each side
and *delegates* every other node it learns of to the neighbour on that node's side, so
references travel towards the place where they belong and the list sorts itself. The
*extension* is the label check: whenever v introduces itself to a neighbour it says which label
it believes the neighbour has (``Check``); a neighbour whose label differs answers with its real
one, so corrupted beliefs about labels die out (the "trace" argument of §2.2). The node with the
smallest and the one with the largest label close the ring with an edge between them
(``IntroduceRing``, testbed ``BuildCycle``).

*Configurations* from the supervisor (§3.1) set v's label and its true predecessor and
successor; neighbours they replace are linearized, never dropped (spec §3), and a stored
neighbour that lies closer than the proposed one is reported to the supervisor (action (iii)).

*Shortcuts* (§3.2.2): v computes its shortcut labels locally from its ring neighbours' labels
(:func:`.labels.side_shortcuts`), and every Timeout introduces its two level-|label| neighbours
to each other; those two are adjacent one level up, so shortcuts are built level by level from
the ring downwards.

The one rule that keeps this correct: **a reference is never silently dropped by a node that
has a label.** It is kept, delegated, or sent back; only ``RemoveConnection`` (from the node
itself or a node that has left) and a failed send remove it. That preserves weak connectivity,
which is all the convergence proof needs (Feldmann et al. §5).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

from pubmesh.proto.core import Message, NodeId, Output, Receive, Send
from pubmesh.proto.skipring.labels import (
    ZERO,
    Label,
    between_cyclic,
    is_label,
    side_shortcuts,
)
from pubmesh.proto.skipring.messages import (
    Check,
    ConfigurationRequest,
    IntroduceRing,
    IntroduceShortcut,
    LabelCorrection,
    Linearize,
    RemoveConnection,
)
from pubmesh.proto.skipring.patricia import PatriciaTrie

#: Hops a delegated reference may skip ahead over shortcuts before it falls back to list
#: delegation (greedy routing in SR(n) needs at most 2 ceil(log2 n) hops).
GREEDY_HOPS = 64


class Ref(NamedTuple):
    """A stored neighbour: the label v believes it has, and its node id. Ordered as a tuple."""

    label: Label
    node: NodeId


class Status(enum.Enum):
    """Where a topic instance is in its life (Feldmann et al. §4.1)."""

    #: subscribed: takes part in the ring and delivers publications
    ACTIVE = "active"
    #: asked to unsubscribe; still in the ring until the supervisor's permission arrives
    LEAVING = "leaving"
    #: got permission (label ⊥): answers every introduction with RemoveConnection until nobody
    #: refers to it any more, then releases the instance (spec §10.11)
    DEPARTED = "departed"


@dataclass(frozen=True, slots=True)
class RingTimeout:
    """The ring's part of the subscriber's Timeout: actions (i), (ii), (iv) of §3.2.1 with the
    subscriber's uniform ``draw`` (None when the instance is not active, which asks nothing),
    the extended BuildRing Timeout, and the shortcut introductions (§3.2.2)."""

    p_request: float
    q: float
    draw: float | None


@dataclass(frozen=True, slots=True)
class ConfigurationReceived:
    """A checked Configuration from the supervisor (§3.1): the label and the proposed ring
    neighbours."""

    label: Label
    pred: Ref | None
    succ: Ref | None


#: the ring layer's closed input set: its messages from neighbours, its Timeout, configurations
RingInput = Receive | RingTimeout | ConfigurationReceived

#: the ring's message classes, in the order a message is matched against them
RING_MESSAGES: tuple[type[Message], ...] = (
    RemoveConnection,
    Check,
    Linearize,
    IntroduceRing,
    LabelCorrection,
    IntroduceShortcut,
)
#: message class -> the first of RING_MESSAGES it is a subclass of (None: not a ring message)
_RING_KINDS: dict[type, type[Message] | None] = {cls: cls for cls in RING_MESSAGES}


def message_kind(
    message: Message, classes: tuple[type[Message], ...], kinds: dict[type, type[Message] | None]
) -> type[Message] | None:
    """The first of ``classes`` ``message`` is an instance of (None: none), looked up in
    ``kinds`` by the message's class and remembered there: the order a ``match`` tries them."""
    kind = kinds.get(type(message))
    if kind is None:
        kind = kinds[type(message)] = next((c for c in classes if isinstance(message, c)), None)
    return kind


class TopicState:
    """BuildSR state of one subscriber for one topic: the ring layer.

    :meth:`handle` is its one entry point; the rule methods below it append their outputs to
    ``out`` (the rule tests drive them one at a time)."""

    __slots__ = (
        "config_requests",
        "confirmed",
        "label",
        "left",
        "me",
        "quiet",
        "right",
        "ring",
        "shortcuts",
        "status",
        "supervisor",
        "topic",
        "trie",
    )

    def __init__(self, topic: str, me: NodeId, supervisor: NodeId) -> None:
        self.topic = topic
        self.me = me
        self.supervisor = supervisor
        self.label: Label | None = None
        self.left: Ref | None = None
        self.right: Ref | None = None
        self.ring: Ref | None = None
        #: ring-slot nodes whose stored label came from the node itself (its own Check or
        #: introduction) or from the supervisor, rather than from a third party's belief
        self.confirmed: set[NodeId] = set()
        #: shortcut label -> node (None until an introduction names it); labels that coincide
        #: with a ring neighbour's are not stored separately (spec §2 item 4)
        self.shortcuts: dict[Label, NodeId | None] = {}
        self.trie = PatriciaTrie()
        self.status = Status.ACTIVE
        #: consecutive Timeouts without a message for this instance (for releasing it)
        self.quiet = 0
        #: configuration requests sent, by action (i)-(iv) = 1-4
        self.config_requests = [0, 0, 0, 0, 0]

    # ------------------------------------------------------------------ the one entry point
    def handle(self, event: RingInput, now: float) -> list[Output]:
        """A ring message from a neighbour (the subscriber hands over only those of an instance
        with a label), the ring's Timeout, or a configuration."""
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                self.receive(src, message, out)
            case RingTimeout(p_request=p_request, q=q, draw=draw):
                self.timeout(p_request, q, draw, out)
            case ConfigurationReceived(label=label, pred=pred, succ=succ):
                self.receive_configuration(label, pred, succ, out)
        return out

    def timeout(self, p_request: float, q: float, draw: float | None, out: list[Output]) -> None:
        """The ring's part of Timeout: ``handle(RingTimeout(p_request, q, draw))``, which the
        subscriber calls directly."""
        if draw is not None:
            self.config_actions(p_request, q, draw, out)
        self.build_ring_timeout(out)
        self.shortcut_timeout(out)

    def receive(self, src: NodeId, message: Message, out: list[Output]) -> None:
        """A ring message from ``src``: ``handle(Receive(src, message))``, which the subscriber
        calls directly. The message's class is mapped once to the first of the ring's message
        classes it is an instance of, in the order :meth:`handle` matched them."""
        kind = message_kind(message, RING_MESSAGES, _RING_KINDS)
        m: Any = message  # the kind says which class it is
        if kind is IntroduceShortcut:
            self.introduce_shortcut(m.label, m.node, out)
        elif kind is Check:
            if is_label(m.label):
                self.check(Ref(m.label, m.node), m.claimed, m.closing, out, direct=m.node == src)
        elif kind is Linearize:
            self.linearize(Ref(m.label, m.node), out, direct=m.node == src, hops=m.hops)
            self.correct(src, m.claimed, out)
        elif kind is IntroduceRing:
            self.introduce_ring(Ref(m.label, m.node), out, direct=m.node == src, hops=m.hops)
            self.correct(src, m.claimed, out)
        elif kind is LabelCorrection:
            if m.node == src:
                self.label_correction(Ref(m.label, m.node), out)
        elif kind is RemoveConnection:
            self.forget(m.node)

    # ------------------------------------------------------------------ helpers
    def me_ref(self) -> Ref:
        assert self.label is not None
        return Ref(self.label, self.me)

    def _send(self, dst: NodeId, message: Message, out: list[Output]) -> None:
        out.append(Send(dst, message))

    def ring_refs(self) -> list[Ref]:
        """left, right and ring, without repetitions of a node."""
        seen: set[NodeId] = set()
        refs = []
        for ref in (self.left, self.right, self.ring):
            if ref is not None and ref.node not in seen:
                seen.add(ref.node)
                refs.append(ref)
        return refs

    def ring_nodes(self) -> list[NodeId]:
        return sorted({ref.node for ref in (self.left, self.right, self.ring) if ref is not None})

    def shortcut_nodes(self) -> list[NodeId]:
        return sorted({node for node in self.shortcuts.values() if node is not None})

    def neighbours(self) -> list[NodeId]:
        """Every node this instance refers to (ring and shortcuts), sorted."""
        nodes = {ref.node for ref in (self.left, self.right, self.ring) if ref is not None}
        nodes.update(node for node in self.shortcuts.values() if node is not None)
        nodes.discard(self.me)
        return sorted(nodes)

    def request(self, node: NodeId, action: int, out: list[Output]) -> None:
        """Ask the supervisor for ``node``'s configuration (actions (i)-(iv), §3.2.1)."""
        self.config_requests[action] += 1
        self._send(
            self.supervisor,
            ConfigurationRequest(topic=self.topic, node=node, action=action),
            out,
        )

    def _note(self, u: Ref, direct: bool) -> None:
        """Record whether the label we now hold for u.node is confirmed: heard from u itself
        (or the supervisor) confirms it, a third party's belief unconfirms it."""
        node = u.node
        if direct:
            self.confirmed.add(node)
            return
        if node not in self.confirmed:
            return  # nothing to unconfirm (the common case of a delegated reference)
        # unconfirmed unless u.node is held (left, right or ring), and every time with u.label
        held = False
        for ref in (self.left, self.right, self.ring):
            if ref is not None and ref.node == node:
                if ref.label != u.label:
                    self.confirmed.discard(node)
                    return
                held = True
        if not held:
            self.confirmed.discard(node)

    def forget(self, node: NodeId) -> bool:
        """Drop every reference to ``node`` (RemoveConnection, §4.1). True if one was held."""
        held = False
        if self.left is not None and self.left.node == node:
            self.left, held = None, True
        if self.right is not None and self.right.node == node:
            self.right, held = None, True
        if self.ring is not None and self.ring.node == node:
            self.ring, held = None, True
        for name, ref in self.shortcuts.items():
            if ref == node:
                self.shortcuts[name] = None
                held = True
        self.confirmed.discard(node)
        return held

    # ------------------------------------------------------------------ BuildRing
    def linearize(self, u: Ref, out: list[Output], *, direct: bool = False, hops: int = 0) -> None:
        """Linearize(u) (Feldmann et al. §2.2; testbed ``BuildCycle.linearize``; spec §3).

        If u is already a list neighbour and its label changed, it is re-sorted with the new
        label. Otherwise, on u's side: adopt u if the slot is empty or u lies between v and the
        current neighbour (which is then delegated to u), else delegate u to the neighbour.
        ``direct`` says the label came from u itself, which confirms it (see ``confirmed``)."""
        if u.node == self.me or self.label is None or not is_label(u.label):
            return
        self._note(u, direct)
        if direct and self.shortcuts:
            # u told us its label: a shortcut entry that files u under another label is wrong
            # (u is kept: this call places it)
            for name, node in self.shortcuts.items():
                if node == u.node and name != u.label:
                    self.shortcuts[name] = None
        me = self.me_ref()
        in_list = resort = False
        if self.left is not None and self.left.node == u.node:
            if self.left.label == u.label:
                in_list = True
            else:
                self.left, resort = None, True
        if self.right is not None and self.right.node == u.node:
            if self.right.label == u.label:
                in_list = True
            else:
                self.right, resort = None, True
        ring = self.ring
        if ring is not None and ring.node == u.node:
            if ring.label != u.label:
                if (ring < me) == (u < me):
                    self.ring = u  # same side: the edge stays, with the corrected label
                else:
                    self.ring, resort = None, True
            if not resort:
                return  # already known as the closing edge
        if in_list:
            return
        if u < me:
            left = self.left
            if left is None:
                self.left = u
            elif left < u:
                self.left = u
                self._send(
                    u.node,
                    Linearize(topic=self.topic, node=left.node, label=left.label, claimed=u.label),
                    out,
                )
            else:
                self._delegate(u, left, out, hops=hops)
        else:
            right = self.right
            if right is None:
                self.right = u
            elif u < right:
                self.right = u
                self._send(
                    u.node,
                    Linearize(
                        topic=self.topic, node=right.node, label=right.label, claimed=u.label
                    ),
                    out,
                )
            else:
                self._delegate(u, right, out, hops=hops)

    def _delegate(self, u: Ref, neighbour: Ref, out: list[Output], *, hops: int) -> None:
        """Delegate u towards its place: to the list neighbour on u's side (BuildRing, §2.2),
        or, for the first ``GREEDY_HOPS`` hops of its journey, to the stored shortcut that
        lies between v and u closest to u, if that is closer than the neighbour.

        The skip-ahead is ours (the paper delegates along the list only): a reference dropped
        from a shortcut table belongs near a node with a short label, often half a ring away,
        and list delegation takes Θ(n) hops to carry it there (measured: 10^5 Linearize
        messages per second at n = 1,000 after a database corruption, dying out over a
        minute). Over the shortcuts it takes O(log n) hops in SR(n). Every hop still goes to
        a node strictly between v and u in v's view, and after ``GREEDY_HOPS`` hops the
        message falls back to list delegation, so wrong shortcut entries of a corrupted state
        cannot keep a reference circling."""
        # candidates as plain (label, node) tuples, ordered as Refs are: no Ref built per entry
        target: tuple[Label, NodeId] = neighbour
        if hops < GREEDY_HOPS and self.shortcuts:
            me = self.me
            below = u < (self.label, me)
            for candidate in self.shortcuts.items():
                node = candidate[1]
                if node is None or node == u.node or node == me:
                    continue
                if (u < candidate < target) if below else (target < candidate < u):
                    target = candidate  # type: ignore[assignment]  # node is not None here
        self._send(
            target[1],
            Linearize(
                topic=self.topic, node=u.node, label=u.label, hops=hops + 1, claimed=target[0]
            ),
            out,
        )

    def _toward_end(self, u: Ref, smallest: bool, out: list[Output], *, hops: int) -> None:
        """Pass IntroduceRing(u) towards the smallest (``smallest``) or the largest node: to the
        list neighbour on that side or, for the first ``GREEDY_HOPS`` hops, to the farthest
        stored shortcut on that side (see :meth:`_delegate`)."""
        target = self.left if smallest else self.right
        assert target is not None
        if hops < GREEDY_HOPS:
            for name, node in self.shortcuts.items():
                if node is None or node == u.node or node == self.me:
                    continue
                candidate = Ref(name, node)
                if (candidate < target) if smallest else (candidate > target):
                    target = candidate
        if target.node == u.node:
            self.linearize(u, out)  # never drop a reference
            return
        self._send(
            target.node,
            IntroduceRing(
                topic=self.topic, node=u.node, label=u.label, hops=hops + 1, claimed=target.label
            ),
            out,
        )

    def introduce_ring(
        self, u: Ref, out: list[Output], *, direct: bool = False, hops: int = 0
    ) -> None:
        """IntroduceRing(u): u is offered as the closing-edge neighbour (testbed
        ``introduce_cyc``; spec §3). A node that is not the matching end passes u on towards
        it; the matching end keeps the farther of u and its current ``ring`` on the same side
        and linearizes the nearer; candidates on opposite sides are both linearized."""
        if u.node == self.me or self.label is None or not is_label(u.label):
            return
        self._note(u, direct)
        me = self.me_ref()
        ring = self.ring
        if ring is not None and ring.node == u.node:
            if ring.label != u.label:
                if (ring < me) == (u < me):
                    self.ring = u
                else:
                    self.ring = None
                    self.introduce_ring(u, out)
            return
        if ring is None:
            if (u < me and self.right is None) or (u > me and self.left is None):
                self.ring = u
            else:
                self._toward_end(u, smallest=u > me, out=out, hops=hops)
            return
        if (u < me) == (ring < me):
            # same side: the farther one is the better candidate for the end of the ring
            farther, nearer = (u, ring) if (u < ring) == (u < me) else (ring, u)
            self.ring = farther
            self.linearize(nearer, out)
        else:
            self.ring = None
            self.linearize(u, out)
            self.linearize(ring, out)

    def correct(self, src: NodeId, claimed: str, out: list[Output]) -> None:
        """The label check on a delegated introduction: ``src`` handed us a reference believing
        our label is ``claimed``; if it is not, tell ``src`` the real one, as the answer to a
        ``Check`` would (§2.2). Without it a wrong belief about a neighbour's label keeps
        reflecting references between the two until the next Timeout's Check."""
        if claimed and claimed != self.label and src != self.me and self.label is not None:
            self._send(src, LabelCorrection(topic=self.topic, node=self.me, label=self.label), out)

    def label_correction(self, u: Ref, out: list[Output]) -> None:
        """LabelCorrection(u): u says it has label u.label. Every reference to u filed under
        another label is fixed (ring slots re-sorted, shortcut entries cleared and u placed by
        Linearize); a node that holds no reference to u ignores it."""
        if u.node == self.me or self.label is None or not is_label(u.label):
            return
        held = any(
            ref is not None and ref.node == u.node and ref.label != u.label
            for ref in (self.left, self.right, self.ring)
        ) or any(node == u.node and name != u.label for name, node in self.shortcuts.items())
        if held:
            self.linearize(u, out, direct=True)

    def check(
        self, u: Ref, claimed: str, closing: bool, out: list[Output], *, direct: bool = True
    ) -> None:
        """Check(u, claimed) at w, the label check of the extended BuildRing (§2.2): a wrong
        belief about w's label is answered with the right label; a right one lets w process u
        as an ordinary introduction."""
        assert self.label is not None
        if claimed != self.label:
            if closing:
                answer: Message = IntroduceRing(topic=self.topic, node=self.me, label=self.label)
            else:
                answer = Linearize(topic=self.topic, node=self.me, label=self.label)
            self._send(u.node, answer, out)
        elif closing:
            self.introduce_ring(u, out, direct=direct)
        else:
            self.linearize(u, out, direct=direct)

    def build_ring_timeout(self, out: list[Output]) -> None:
        """Timeout of the extended BuildRing (testbed ``BuildCycle.timeout``; spec §3)."""
        me = self.me_ref()
        topic = self.topic
        # closing edge
        ring = self.ring
        if ring is None:
            if self.left is None and self.right is not None:
                self._send(
                    self.right.node, IntroduceRing(topic=topic, node=self.me, label=me.label), out
                )
            elif self.right is None and self.left is not None:
                self._send(
                    self.left.node, IntroduceRing(topic=topic, node=self.me, label=me.label), out
                )
        elif ring > me and self.left is not None:
            # the largest node belongs to the smallest one, which lies further left
            self.ring = None
            self._toward_end(ring, smallest=True, out=out, hops=0)
        elif ring < me and self.right is not None:
            self.ring = None
            self._toward_end(ring, smallest=False, out=out, hops=0)
        else:
            self._send(
                ring.node,
                Check(topic=topic, node=self.me, label=me.label, claimed=ring.label, closing=True),
                out,
            )
        # list neighbours: check them, or re-sort one that ended up on the wrong side
        left = self.left
        if left is not None:
            if left < me:
                self._send(
                    left.node,
                    Check(topic=topic, node=self.me, label=me.label, claimed=left.label),
                    out,
                )
            else:
                self.left = None
                self.linearize(left, out)
        right = self.right
        if right is not None:
            if right > me:
                self._send(
                    right.node,
                    Check(topic=topic, node=self.me, label=me.label, claimed=right.label),
                    out,
                )
            else:
                self.right = None
                self.linearize(right, out)

    # ------------------------------------------------------------------ configurations
    def receive_configuration(
        self, label: Label, pred: Ref | None, succ: Ref | None, out: list[Output]
    ) -> None:
        """ReceiveConfiguration(label, pred, succ) (Feldmann et al. §3.1, §3.2.1; testbed
        ``BuildCycle.receiveConfiguration``; spec §3, §5).

        Action (iii) first: a stored ring neighbour w that lies strictly between the proposed
        predecessor and v (or between v and the proposed successor), cyclically, is closer
        than the supervisor knows, so w is not recorded: ask the supervisor to configure w.
        Then adopt the label; the predecessor becomes ``left`` (``ring`` if it wraps around,
        i.e. v is "0"), the successor ``right`` (``ring`` for the largest node), and the
        neighbours they replace are linearized."""
        if self.status is Status.ACTIVE:
            me = Ref(label, self.me)
            for w in self.ring_refs():
                if w.node == self.me:
                    continue
                closer = pred is None and succ is None  # alone: every neighbour is unrecorded
                if pred is not None and w.node != pred.node:
                    closer = closer or between_cyclic(pred, w, me)
                if succ is not None and w.node != succ.node:
                    closer = closer or between_cyclic(me, w, succ)
                if closer:
                    self.request(w.node, 3, out)
        old = [self.left, self.right, self.ring]
        self.label = label
        self.left = self.right = self.ring = None
        if pred is not None and pred.node != self.me:
            if pred.label > label:
                self.ring = pred
            else:
                self.left = pred
        if succ is not None and succ.node != self.me:
            if succ.label < label:
                self.ring = succ
            else:
                self.right = succ
        fresh = {ref.node for ref in (self.left, self.right, self.ring) if ref is not None}
        self.confirmed.update(fresh)
        for ref in old:
            if ref is not None and ref.node not in fresh:
                fresh.add(ref.node)
                self.linearize(ref, out)

    # ------------------------------------------------------------------ shortcuts
    def side_neighbours(self) -> tuple[Ref | None, bool, Ref | None, bool]:
        """The ring neighbour on each side and whether it is reached over the closing edge:
        (left, wrapped, right, wrapped). The left neighbour of the smallest node is the largest
        node, held in ``ring`` (spec §6)."""
        me = self.me_ref()
        left, left_wrapped = self.left, False
        right, right_wrapped = self.right, False
        if left is None and self.ring is not None and self.ring > me:
            left, left_wrapped = self.ring, True
        if right is None and self.ring is not None and self.ring < me:
            right, right_wrapped = self.ring, True
        return left, left_wrapped, right, right_wrapped

    def ref_for(self, name: Label) -> NodeId | None:
        for ref in (self.left, self.right, self.ring):
            if ref is not None and ref.label == name:
                return ref.node
        return self.shortcuts.get(name)

    def shortcut_timeout(self, out: list[Output]) -> None:
        """Recompute the shortcut labels and introduce the two level-|label| neighbours to each
        other (Feldmann et al. §3.2.2; spec §6)."""
        assert self.label is not None
        own = self.label
        left, left_wrapped, right, right_wrapped = self.side_neighbours()
        lefts = side_shortcuts(own, left.label, right=False, wrapped=left_wrapped) if left else []
        rights = (
            side_shortcuts(own, right.label, right=True, wrapped=right_wrapped) if right else []
        )
        ring_labels = {ref.label for ref in (self.left, self.right, self.ring) if ref is not None}
        wanted = (set(lefts) | set(rights)) - ring_labels
        wanted.discard(own)
        old = self.shortcuts
        if set(old) != wanted:
            self.shortcuts = {name: old.get(name) for name in sorted(wanted)}
            for name in sorted(set(old) - wanted):
                node = old[name]
                if node is not None:
                    # a shortcut that is no longer wanted is never dropped (see release)
                    self.release(node, out)
        # the introduction rule: the last label computed on each side, or the ring neighbour
        a = lefts[-1] if lefts else (left.label if left else None)
        b = rights[-1] if rights else (right.label if right else None)
        if a is None or b is None or a == b:
            return
        # a ring neighbour is introduced only once its label is confirmed: an unchecked belief
        # introduced as a shortcut travels through linearization and can come back to us
        # before our next label check, forever (found in simulation)
        if not lefts and left is not None and left.node not in self.confirmed:
            return
        if not rights and right is not None and right.node not in self.confirmed:
            return
        node_a, node_b = self.ref_for(a), self.ref_for(b)
        if node_a is None or node_b is None or node_a == node_b:
            return
        self._send(node_a, IntroduceShortcut(topic=self.topic, node=node_b, label=b), out)
        self._send(node_b, IntroduceShortcut(topic=self.topic, node=node_a, label=a), out)

    def introduce_shortcut(self, name: str, node: NodeId, out: list[Output]) -> None:
        """IntroduceShortcut(x, u) (§3.2.2; spec §6, §10.7): if x is one of v's shortcut
        labels, u becomes that shortcut and a different old reference goes to BuildRing;
        an unknown label's reference is linearized, never dropped."""
        if node == self.me or self.label is None:
            return
        if name in self.shortcuts:
            old = self.shortcuts[name]
            self.shortcuts[name] = node
            if old is not None and old != node:
                self.release(old, out)
        elif is_label(name):
            self.release(node, out)

    def release(self, node: NodeId, out: list[Output]) -> None:
        """Let go of a reference to ``node`` that comes with an unchecked label (a replaced or
        unwanted shortcut entry, an introduction under a label we do not want) without
        weakening connectivity: unless we still hold ``node`` elsewhere, we introduce
        ourselves to it (``Linearize(v)``), which turns the edge around.

        Spec §6 and §10.7 say to Linearize the reference itself. We reverse it instead: the
        label a shortcut entry files a node under is somebody's belief, and a stale one,
        delegated to where that label would sit, displaces a correct ring neighbour until the
        next Check (seen at n = 1,000: legitimacy lost for seconds after it was reached).
        Reversed, the only label that travels is v's own, which is right."""
        if node == self.me or self.label is None:
            return
        if any(ref is not None and ref.node == node for ref in (self.left, self.right, self.ring)):
            return
        if any(held == node for held in self.shortcuts.values()):
            return
        self._send(node, Linearize(topic=self.topic, node=self.me, label=self.label), out)

    # ------------------------------------------------------------------ periodic actions
    def config_actions(self, p_request: float, q: float, draw: float, out: list[Output]) -> None:
        """Actions (i), (ii), (iv) of §3.2.1 with one uniform draw in [0, 1).

        (i) label ⊥: ask to be integrated. (ii) with probability p(|label|) ask for the
        configuration. (iv) a node whose local state says its label is minimal (no left
        neighbour) asks with probability q. Node "0" is excluded from (iv): its label is
        minimal by definition, so it has nothing to doubt, and in a legitimate state it is the
        only node without a left neighbour; with it the expected number of requests per
        timeout interval would be 1/2 + 5/8 + (< 1/4) > 1, against the paper's lemma (< 1).
        At most one request per Timeout."""
        if self.label is None:
            self.request(self.me, 1, out)
        elif draw < p_request:
            self.request(self.me, 2, out)
        elif self.left is None and self.label != ZERO and draw < p_request + q * (1 - p_request):
            self.request(self.me, 4, out)
