"""The brokertree node: δ-fault-tolerant content-based publish/subscribe over a broker tree
with exactly-once, per-publisher in-order delivery (Kazemzadeh & Jacobsen,
*Highly Available Distributed Publish/Subscribe Systems*; docs/protocols/brokertree.md).

How it works
============
**The tree and the maps** (Kazemzadeh & Jacobsen §2.2, spec §2–§3). Brokers (the stack's well-known
nodes, handed to every node in ``Start``) form one tree drawn by the spec's seeded generator;
every client hangs off a broker that is a pure function of (topology_seed, id). So every node
computes the same tree, and the *topology map* — the nodes within δ + 1 hops with the path to
each [P §2.2] — is a view of it (:mod:`.view`).

**Connections** (Kazemzadeh & Jacobsen §3.2–3.3, §4.1, §9; spec §4). A node keeps FIFO, loss-free
sessions (:mod:`.session`, the stand-in for the paper's TCP connections) with its tree neighbours.
On the path to any node, the *active* connection is the closest node it has a session with, every
node before it having failed [P §3.2]. When an active peer Y fails (a suspicion of the failure
detector, Kazemzadeh & Jacobsen fn. 2) it becomes *beingReplaced* and the node opens *replacing*
sessions to Y's neighbours on the far side, up to δ + 1 hops out [P §3.3: "repeats a maximum of δ +
1 times"]; the nodes skipped form a *small fragment*. A path whose δ + 1 first nodes are all down,
or that ends in failed nodes, has no active connection: a *large fragment* with this node as its
*lead* [P §3.2]. The lead probes the failed nodes every ``probe_period`` [P §4.1]; when one answers
it is active again and the farther sessions become inactive (kept open, spec §4 [X]).

**The check-out queue** (Kazemzadeh & Jacobsen §9; spec §4). Every publication, subscription and
unsubscription a node forwards is queued once, numbered with the node's own sequence number
``lseq``, and each active session's pointer checks out, in queue order, the entries relevant to it:
those with a recipient whose path it is the active connection of, and that did not come from its
direction. A copy sent while bypassing N₁ … N_k carries the seqVect ``[N_k:⊥ … N₁:⊥, N:lseq] + vin``
(:mod:`.seqvect`); a copy whose vector would break the legitimacy bound (more than δ ⊥ among the
newest 2δ + 1 entries, Kazemzadeh & Jacobsen §5.3) is not sent and its session *stalls* there, head
of line, until it is re-activated (spec §4: skipping it lost publications in the spec's model check)
or, past ``stall_timeout``, until the nodes it bypasses are presumed gone for good; it then gives
such copies up (Kazemzadeh & Jacobsen §5.5 never propagates them) and goes on, so a broker that
never comes back cannot block for ever the copies behind it that the δ guarantee covers
(:meth:`.flow.Flow.presumed_gone`). An entry is *confirmed* (rule CF) when every peer it was
sent to has confirmed it, every active session has passed it and every recipient has an active
connection on its path; the node then confirms it to whoever sent it, and a subscription enters the
routing table (STEP-I…III of Kazemzadeh & Jacobsen §3.5).

**Subscriptions** (Kazemzadeh & Jacobsen §3; spec §5). A subscription is for every broker: its
recipients are the brokers at the edge of the map in every outward branch. Confirmed, it becomes the
tuple ⟨pred, from, seqVect⟩ [P §2.2], ``from`` being δ + 1 hops back towards the subscriber (or the
subscriber itself). A path to the edge through a large fragment makes the confirmation *partial*: it
carries π = ⟨lead, seq, lFrag⟩ back to the subscriber [P §3.5 case 2].

**Publications** (Kazemzadeh & Jacobsen §2.2, §6; spec §6). The recipients of a publication at N are
the ``from`` of every matching tuple downstream of N: the path to each is the route, so a copy
follows one shortest path per subscriber while no node fails, and bypasses failed nodes when some
do. A subscriber runs Fig. 5's duplicate detector and delivers the first copy; a per-publisher
high-water mark is the safety net of spec §6.5.

**Recovery** (Kazemzadeh & Jacobsen §4; spec §7). Every activation performs the handshake and the
LSeq exchange [P §4.2.1]; each side then sends the other the subscription tuples it may lack (a
restarted broker: the whole table), and the receiver adds the ones it lacks and passes them on, away
from their subscribers (so a restarted broker gets its table back, spec §11(c)). The activated
session's pointer restarts at the head of the queue, so every unconfirmed message is resent in order
through it [P §4.3].

**Acknowledgements** (Kazemzadeh & Jacobsen §8; spec §8). With ``ack = "conf"`` every message is
confirmed hop by hop. With ``ack = "dack"`` (the default) publications are not: every
``dack_period`` each node tells each session peer, for nodes A on its side and B on the peer's
within δ + 1 hops of each other, the highest seq of B that A received and up to which A purged
(*depth acknowledgements*); a node purges a publication once, on every path to its recipients,
all nodes report its arrival or one reports its discard [P §8 (i)/(ii)].

The parts
=========
The node holds one :class:`~.shared.TreeState`, the state every part reads (the view, the
sessions, the queue, the table, ``down``, ``links``, the partition table, a client's
subscriptions and marks), takes every input and settles after each. It composes six parts,
each built on that state alone and holding the fields it alone uses:
:class:`.connections.Connections` (sessions, routes and link activation),
:class:`.recovery.Recovery` (handshake, summaries, whole tables), :class:`.flow.Flow`
(check-out and confirmation), :class:`.purge.Purger` (depth acks and the purge),
:class:`.client.Client` (a client's subscriptions and publications) and
:class:`.history.BrokerTreeHistory` (the topic history of spec §14: a client's own
publications retained for late subscribers, their queries and the replayed deliveries). No
part sees the node or another part: what one part's work means for another is a typed
effect in its output list that the node routes in place right after the call
(:mod:`.shared`'s essay), or a value it returns that the node acts on (an LSeq's outcome, the
publications held during recovery), and delivery, which the client part and the history
both decide, is the node's (``_deliver``). The order of the calls is the order of the rules
below, so the cut changes no trace: the traces are byte-identical to those of the same rules
in one class.

The rule that keeps it correct
==============================
**A node's messages leave on every session in the order it numbered them, and a copy never
skips more than δ of any 2δ + 1 consecutive nodes.** FIFO sessions, in-order check-out, resend
from the head on every activation and head-of-line stalls give the first; the legitimacy check
gives the second; together they are Lemma 1's hypotheses, under which Fig. 5 catches every
duplicate and nothing arrives out of per-publisher order.

Deviations from the spec (each also where it is implemented), found by tracing lost
publications in simulation; every one is covered by a test
================================================================================
* **No Join/Depart** (spec §3, "for TCP and churn"): the tree is a pure function of the
  parameters and the broker list, and a client's broker of its id, so every node places any
  node it hears of; a client that comes just dials its broker. ``TopoSummary`` remains, for
  one job: a broker tells each client peer the subscriber clients within δ + 1 hops of it.
* **A publisher client routes to the subscribers around it** (those TopoSummary names),
  through its broker while it is up and straight to them while it is down (Kazemzadeh & Jacobsen
  §13: a client connects to the failed broker's farther neighbours, "which may include both brokers
  and other clients"). With ``client_tables = "broker"`` a client holds no table, and the brokers
  beyond its failed broker see its siblings as upstream: without this, a subscriber next to a
  publisher misses everything while their broker is down.
* **from is read off the tree** [P §2.2's definition] rather than off ``vect[δ]`` (spec §5):
  equal on tree paths (the spec's [D1]), but a summary forwarded around a failed node can
  carry a vector of a path that is not the tree's.
* **Duplicate tuples by origin** (the table is keyed by origin, with tombstones for
  unsubscriptions) instead of [P §4.2.1]'s lSeq test, and a summary carries every tuple whose
  subscriber is not beyond the peer, not only those numbered after the peer's lSeq: both lSeq
  rules are exact only if every tuple reached the peer in the order it was numbered, which a
  false suspicion or a summary forwarded while a session was down breaks.
* **A subscription already in the table is propagated again** [P §5.6.1], not confirmed at
  once: a summary may have brought the tuple here without the nodes beyond having it, and a
  Conf must mean they do.
* **Recovery is a whole table from a complete peer** (spec §7 has each side send the share
  the other may lack): a peer that knew an older incarnation says so in LSeq, the restarted
  broker asks for whole tables, is whole once a peer that lost nothing has sent one, and
  holds the publications it receives until then (Lemma 2: the transfer comes "before any
  publication"). A broker nobody knew (a first start) is whole after a probe period.
* **A stall ends** (spec §4 holds a stalled session until it is re-activated): once the
  session has been stalled ``stall_timeout`` seconds since its activation, the nodes it bypasses are
  presumed gone and the illegitimate copies are given up for that session (``past_stall = "skip"``,
  Kazemzadeh & Jacobsen §5.5) or, as an extension beyond the paper, sent all the same
  (``"forward"``). Without it, one publication beyond the guarantee blocked every later copy on its
  session for good, half of the losses at the SRDS'11 setup.
* ``client_tables = "full"`` is refused: clients holding tables would need every broker to
  enumerate the clients of its map, which a join-free tree does not give.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB
from pubmesh.proto.brokertree.client import Client
from pubmesh.proto.brokertree.connections import Connections
from pubmesh.proto.brokertree.flow import Flow
from pubmesh.proto.brokertree.history import (
    BrokerTreeHistory,
    HistoryDone,
    HistoryFlush,
    HistoryTick,
)
from pubmesh.proto.brokertree.messages import (
    Conf,
    Dack,
    Heartbeat,
    Hello,
    HelloAck,
    HistoryAsk,
    HistoryPub,
    LSeq,
    OriginT,
    Pub,
    Reset,
    SeqT,
    Sub,
    SubSummary,
    TopoSummary,
    Unsub,
    Vect,
)
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.purge import Purger
from pubmesh.proto.brokertree.recovery import Recovery
from pubmesh.proto.brokertree.recovery import Released as HeldBack
from pubmesh.proto.brokertree.seqvect import bypassed_in
from pubmesh.proto.brokertree.session import (
    Down,
    Miswired,
    Released,
    SessionOutput,
    Sessions,
    Up,
)
from pubmesh.proto.brokertree.shared import (
    ClientRestarted,
    DeliverOwn,
    Effect,
    Enqueue,
    Retain,
    SubConfirmed,
    TreeOut,
    TreeState,
    Unsubscribed,
)
from pubmesh.proto.brokertree.state import ACTIVE, IDLE, LEAVING, LEFT, RUNNING
from pubmesh.proto.brokertree.topology import BROKER, CLIENT, wiring
from pubmesh.proto.brokertree.view import View
from pubmesh.proto.brokertree.wire import (
    norm_origin,
    norm_vect,
    predicate,
    valid_node,
    valid_origin,
)
from pubmesh.proto.content import (
    publication_attributes,
)
from pubmesh.proto.core import (
    Disconnect,
    Input,
    Leave,
    Message,
    NodeContext,
    NodeId,
    NodeStatistics,
    Output,
    PeerDown,
    Publish,
    Receive,
    Routed,
    Send,
    SetTimer,
    SnapshotRow,
    StackNode,
    Start,
    Subscribe,
    Timer,
    TimerFired,
    TraceRecord,
    Unsubscribe,
)
from pubmesh.proto.history import Retained, Retention, checked_retained

_FRAMES = (
    Hello,
    HelloAck,
    Reset,
    Heartbeat,
    LSeq,
    Pub,
    Sub,
    Unsub,
    Conf,
    SubSummary,
    Dack,
    TopoSummary,
)


# ------------------------------------------------------------------------------------ timers
@dataclass(frozen=True, slots=True)
class Tick(Timer):
    """Heartbeats and the failure detector (spec §2), every ``hb_period``."""

    life: int


@dataclass(frozen=True, slots=True)
class Probe(Timer):
    """The lead's probe of failed nodes [P §4.1], every ``probe_period``."""

    life: int


@dataclass(frozen=True, slots=True)
class DackTick(Timer):
    """Depth acknowledgements [P §8], every ``dack_period``."""

    life: int


@dataclass(frozen=True, slots=True)
class PurgeTick(Timer):
    """The dack purge [P §8], every ``purge_period``."""

    life: int


class BrokerTreeNode(StackNode):
    """One broker or client of the brokertree stack (module essay)."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: BrokerTreeParams = (
            ctx.params if isinstance(ctx.params, BrokerTreeParams) else BrokerTreeParams()
        )
        self.delta = self.params.delta
        #: what the parts share (pubmesh.proto.brokertree.shared): each is built on it alone
        self.s = TreeState(ctx.node_id, self.params, BROKER if ctx.role == BROKER else CLIENT)
        # the parts (each module's docstring says what it does)
        self.conn = Connections(self.s)
        self.recovery = Recovery(self.s)
        self.flow = Flow(self.s)
        self.acks = Purger(self.s)
        self.client = Client(self.s)
        #: the topic history (spec §14): a client's own publications, its history queries
        self.history = BrokerTreeHistory(self.s)
        self.received: dict[str, int] = {}
        #: the time of the input being handled (the effects routed meanwhile happen then)
        self.now = 0.0

    # ---------------------------------------------------------------------------- effects
    def _route(self, effect: Effect, out: TreeOut) -> None:
        """Hand a part's effect to the part that takes it, at once (shared.py's essay)."""
        now = self.now
        match effect:
            case Enqueue(kind=kind, origin=origin, message=message, rcpt=rcpt):
                self.flow.enqueue(kind, origin, message, (), rcpt, set(), now, lseq=origin[1])
            case Retain(topic=topic, pub_id=pub_id, payload=payload, seq=seq):
                self.history.retain(
                    topic, pub_id, payload, effect.attributes, seq, now, self.retained_journal
                )
            case DeliverOwn(origin=origin, message=message, attributes=attributes):
                self._deliver(origin, message, attributes, out)
            case Unsubscribed(topic=topic):
                self.history.unsubscribe(topic, out)
            case SubConfirmed(topic=topic, origin=origin):
                self.history.confirmed(topic, origin, out)
            case ClientRestarted(client=client, epoch=epoch):
                self._client_restarted(client, epoch, now)

    def _deliver(
        self, origin: OriginT, message: Pub, attributes: Mapping[str, Any], out: TreeOut
    ) -> None:
        """spec §6.5 and §14: a copy the client's subscription matches is delivered once,
        unless the topic history replayed it already or holds the topic's copies until its
        items are in."""
        own = self.client.matching(origin, message, attributes)
        if own is None:
            return
        if self.history.seen(message.topic, message.pub_id):
            # delivered already from the topic's history (spec §14): one delivery
            self.s.count("history_duplicates")
            return
        deliver = self.client.accept(own, origin, message, out)
        if deliver is None:
            return
        if self.history.hold(message.topic, origin[0], origin[1], deliver):
            return  # held until the topic's history is in (spec §14)
        self.s.delivered += 1
        out.append(deliver)

    # ----------------------------------------------------------------------------- handle
    def handle(self, event: Input, now: float) -> list[Output]:
        self.now = now
        out: TreeOut = Routed(self._route)
        match event:
            case Receive(src=src, message=message):
                self._on_frame(src, message, now, out)
            case TimerFired(timer=timer):
                self._on_timer(timer, now, out)
            case PeerDown(peer=peer):
                sessions = self.s.sessions
                if sessions is not None and self.s.phase in (RUNNING, LEAVING):
                    for ev in sessions.peer_down(peer):
                        self._session_event(ev, now, out)
            case Start(contacts=contacts, wall=wall):
                # epochs must grow across incarnations (spec §2, §12.6): the run's clock in
                # the simulator, the wall clock over TCP, where now restarts with the process
                self._start(contacts, now, wall if wall is not None else now, out)
            case Subscribe(topic=topic, filter=filter, history=history):
                before = self.s.own.get(topic)
                self.client.subscribe(topic, filter, now, out)
                own = self.s.own.get(topic)
                if history is not None and own is not None and own is not before:
                    self.history.subscribe(topic, history, own.origin, out)
            case Unsubscribe(topic=topic):
                self.client.unsubscribe(topic, now, out)
            case Publish():
                self.client.publish(event, now, out)
            case Leave():
                self._leave(now, out)
        if self.s.phase in (RUNNING, LEAVING):
            self._settle(now, out)
        return out

    def _session_event(self, ev: Up | Down | Miswired, now: float, out: TreeOut) -> None:
        """A session came up, went down or is miswired (the connections part); a session
        down also restarts the handshake with its peer (the recovery part)."""
        self.conn.session_event(ev, now, out)
        if isinstance(ev, Down):
            self.recovery.forget(ev.peer)

    # ------------------------------------------------------------------------------ start
    def _start(self, contacts: tuple[NodeId, ...], now: float, epoch: float, out: TreeOut) -> None:
        """Start: the brokers are the contacts (spec §2: every node computes the same tree
        from the parameters and them); dial the tree neighbours."""
        s = self.s
        if s.phase != IDLE:
            return
        brokers = tuple(c for c in contacts if valid_node(c))
        try:
            s.view = View(self.params, brokers, self.node_id)
        except ValueError as error:
            out.append(TraceRecord("brokertree.no_tree", {"error": str(error)}))
            return
        s.kind = BROKER if s.view.is_me_broker() else CLIENT
        if s.kind == CLIENT:
            s.recovering = False  # a client holds no table to lose (Kazemzadeh & Jacobsen fn. 7)
        s.epoch = float(epoch)
        s.started = now
        p = self.params
        s.wiring = wiring(self.params, brokers)
        s.sessions = Sessions(
            self.node_id,
            s.epoch,
            s.kind,
            hb=p.hb,
            hb_period=p.hb_period,
            fd_timeout=p.fd_timeout,
            wiring=s.wiring,
        )
        s.phase = RUNNING
        s.life += 1
        out.append(SetTimer(p.hb_period, Tick(s.life)))
        out.append(SetTimer(p.probe_period, Probe(s.life)))
        if p.ack == "dack":
            out.append(SetTimer(p.dack_period * self.rng.uniform(0.5, 1.0), DackTick(s.life)))
            out.append(SetTimer(p.purge_period * self.rng.uniform(0.5, 1.0), PurgeTick(s.life)))
        # at start a broker dials only the brokers before it (in the order of the broker
        # list): those after it may not be up yet, and will dial it when they start (the
        # probe dials whoever has not, after probe_period)
        self.conn.ensure(now, out, probe=True, initial=True)

    # ------------------------------------------------------------------------------ frames
    def _on_frame(self, src: NodeId, message: Message, now: float, out: TreeOut) -> None:
        name = type(message).__name__
        self.received[name] = self.received.get(name, 0) + 1
        s = self.s
        if isinstance(message, HistoryAsk | HistoryPub):
            # the topic history (spec §14) goes outside the sessions, straight between nodes
            if s.phase == RUNNING and src != self.node_id and valid_node(src):
                if isinstance(message, HistoryAsk):
                    self.history.on_ask(src, message, now, out)
                else:
                    self.history.on_item(src, message, now, out)
            return
        sessions = s.sessions
        if not isinstance(message, _FRAMES) or sessions is None:
            return
        if s.phase not in (RUNNING, LEAVING) or src == self.node_id or not valid_node(src):
            return
        sid, n = message.sid, message.n
        if type(sid) is not int or type(n) is not int:
            return
        try:
            items = sessions.receive(src, message, now)
        except ValueError as error:
            # a frame seen twice: a protocol error of that session, which ends (spec §2)
            out.append(TraceRecord("brokertree.bad_frame", {"peer": src, "error": str(error)}))
            if sessions.has(src):
                sessions.close(src)
                self._session_event(Down(src, "protocol"), now, out)
            return
        self._session_outputs(src, items, now, out)

    def _session_outputs(
        self, src: NodeId, items: list[SessionOutput], now: float, out: TreeOut
    ) -> None:
        """What the session layer gave, in its order: frames to send, session events, then
        the frames it released from ``src``."""
        for item in items:
            if isinstance(item, Send):
                out.append(item)
            elif isinstance(item, Released):
                self._on_message(src, item.message, now, out)
            else:
                self._session_event(item, now, out)

    def _on_message(self, src: NodeId, message: Message, now: float, out: TreeOut) -> None:
        match message:
            case LSeq():
                outcome = self.recovery.on_lseq(src, message, now, out)
                if outcome == "stale":
                    return
                if outcome == "activated":
                    # the link just activated gets every depth-ack report (spec §8), and every
                    # entry is checked out through it from the head of the queue [P §4.3]
                    self.acks.send_state(src, now, out)
                    self.s.recheck_all = True
                self._take_released(self.recovery.update(now, out), now, out)
            case Pub() | Sub() | Unsub():
                self.on_data(src, message, now, out)
            case Conf():
                self.flow.on_conf(src, message)
            case SubSummary():
                self._take_released(self.recovery.on_summary(src, message, now, out), now, out)
            case Dack():
                self.acks.on_dack(message)
            case TopoSummary():
                self.client.on_topo(message)

    def _take_released(self, released: HeldBack, now: float, out: TreeOut) -> None:
        """The publications a (re)started broker held until its table was whole, in the
        order they arrived (Kazemzadeh & Jacobsen Lemma 2)."""
        for src, message in released:
            self.on_data(src, message, now, out)

    # --------------------------------------------------------------------- queue and data
    def on_data(self, src: NodeId, message: Pub | Sub | Unsub, now: float, out: TreeOut) -> None:
        """A queued kind of message from ``src`` (spec §6.4 receipt)."""
        s = self.s
        view = s.view
        assert view is not None
        if not valid_origin(message.origin):
            return
        origin = norm_origin(message.origin)
        vin = norm_vect(message.vect)
        if vin is None:
            return
        kind = PUB if isinstance(message, Pub) else SUB if isinstance(message, Sub) else UNSUB
        if kind == PUB and s.is_broker and s.recovering is not False:
            # a (re)started broker routes nothing before every active session has sent its
            # tuples: a publication it matched against a partial table would be dropped for
            # the subscribers it does not know yet (Kazemzadeh & Jacobsen Lemma 2: the recovery
            # transfer comes "before any publication"); it is handled, in order, then
            assert isinstance(message, Pub)
            self.recovery.hold_early(src, message)
            return
        before = {node for node, seq in vin[: 2 * self.delta + 1] if seq is not None}
        duplicate = s.high.is_duplicate(vin)
        for node in before:
            self.acks.arrived_from(node)
        entry = s.queue.get(origin)
        if entry is not None:
            # a copy of a queued message: its sender gets the Conf with the others' [P §5.6 ii]
            entry.senders.add(src)
            self.flow.recheck(entry)
            s.count("duplicates_queued")
            if entry.stalled and bypassed_in(vin, self.delta) < bypassed_in(entry.vin, self.delta):
                # [P §5.5]: a retransmission over a path that skipped fewer nodes makes the
                # propagation legitimate again; the stalled copies go on with its vector
                # (they keep our own number, so a receiver of both still sees one message)
                entry.vin = vin
                s.count("relegitimized")
            return
        if kind == PUB:
            assert isinstance(message, Pub)
            if duplicate:
                s.count("duplicates")
                if self.params.ack == "conf":
                    self.flow.conf(src, origin)  # case iii: Conf at once
                return
            self._on_new_pub(src, origin, message, vin, now, out)
            return
        if not s.is_broker and self.params.client_tables == "broker":
            self.flow.conf(src, origin)  # a client holds no table (Kazemzadeh & Jacobsen fn. 7)
            return
        if kind == SUB:
            assert isinstance(message, Sub)
            if origin in s.tombstones:
                self.flow.conf(src, origin)  # unsubscribed since: nothing to propagate
                return
            # a subscription already in the table is propagated again all the same [P §5.6.1]
            # (spec §5 "Duplicates"): its Conf must mean the nodes beyond have it too, and a
            # summary may have brought the tuple here without them
            pred = predicate(message.topic, message.filter)
            if pred is None:
                out.append(TraceRecord("brokertree.bad_filter", {"origin": repr(origin)}))
                self.flow.conf(src, origin)
                return
        else:
            assert isinstance(message, Unsub)
            if not valid_origin(message.target):
                return
        rcpt = view.frontier_except(self._upstream_branches({src}))
        self.flow.enqueue(kind, origin, message, vin, rcpt, {src}, now)

    def _upstream_branches(self, senders: Iterable[NodeId]) -> set[NodeId]:
        view = self.s.view
        assert view is not None
        return {view.branch(s) for s in senders if s != self.node_id}

    def _on_new_pub(
        self,
        src: NodeId,
        origin: OriginT,
        message: Pub,
        vin: Vect,
        now: float,
        out: TreeOut,
    ) -> None:
        attributes = publication_attributes(_plain(message.attributes), message.topic)
        if not self.s.is_broker:
            self._deliver(origin, message, attributes, out)
            if self.params.ack == "conf":
                self.flow.conf(src, origin)
            return
        rcpt = self._pub_rcpt(message.topic, attributes, {src})
        self.flow.enqueue(PUB, origin, message, vin, rcpt, {src}, now)
        if self.params.ack == "dack":
            # its numbers among the newest 2δ + 1 of its vector are held until it is purged
            # (a publication made here has an empty vector: nothing to hold)
            self.acks.hold(vin)

    def _pub_rcpt(
        self, topic: str, attributes: Mapping[str, Any], senders: set[NodeId]
    ) -> frozenset[NodeId]:
        """RCPT_N^p [P §2.2]: ``from`` of every matching tuple downstream of N, i.e. not in the
        branch of a sender."""
        view = self.s.view
        assert view is not None
        branches = self._upstream_branches(senders)
        out: set[NodeId] = set()
        for t in self.s.table.matching(topic, attributes):
            frm = t.frm
            if frm != self.node_id and frm not in senders and view.branch(frm) not in branches:
                out.add(frm)
        return frozenset(out)

    # ---------------------------------------------------------------------------- settle
    def _settle(self, now: float, out: TreeOut) -> None:
        """After every event: (de)activate links, check out, confirm, send the batched Confs."""
        s = self.s
        if s.sessions is None:
            return
        if s.recovering is None:
            self._take_released(self.recovery.update(now, out), now, out)
        for _ in range(8):
            if s.topology_changed:
                s.topology_changed = False
                self.conn.refresh_links(now, out)
            end = s.queue.end
            pending = [link for link in s.links.values() if link.pointer < end]
            if pending:
                for link in sorted(pending, key=lambda link: link.peer):
                    if link.state == ACTIVE:
                        self.flow.pump(link, now, out)
            if self.flow.dirty or s.recheck_all:
                self.flow.check_confirmations(now, out)
            if not s.topology_changed:
                break
        self.flow.send_confs(now, out)
        if s.announce:
            self._announce_subscribers(now, out)
        if s.phase == LEAVING and not any(e.kind != PUB for e in s.queue.entries()):
            self._finish_leave(out)

    def _announce_subscribers(self, now: float, out: TreeOut) -> None:
        """TopoSummary of new subscribers to the client peers within δ + 1 hops of them."""
        s = self.s
        view = s.view
        assert view is not None
        new = sorted(s.announce)
        s.announce.clear()
        for peer in sorted(s.links):
            if view.is_broker(peer) or s.links[peer].state != ACTIVE:
                continue
            edges = tuple(
                (c, view.attach(c))
                for c in new
                if c != peer and view.distance(peer, c) <= view.reach
            )
            if edges:
                s.send(peer, TopoSummary(sid=0, n=0, edges=edges, last=True), now, out)

    # ------------------------------------------------------------------------ leave, §9
    def _leave(self, now: float, out: TreeOut) -> None:
        """spec §9: a client unsubscribes everything, awaits the Confs, then closes its
        sessions; a broker's leave counts as a crash."""
        if self.s.phase != RUNNING:
            return
        if self.s.is_broker:
            self._finish_leave(out)
            return
        for topic in sorted(self.s.own):
            self.client.unsubscribe(topic, now, out)
        self.s.phase = LEAVING

    def _finish_leave(self, out: TreeOut) -> None:
        sessions = self.s.sessions
        if sessions is not None:
            for peer in sessions.peers():
                out.append(Disconnect(peer))
                sessions.close(peer)
        self.s.links.clear()
        self.s.phase = LEFT
        self.s.life += 1

    def _client_restarted(self, client: NodeId, epoch: float, now: float) -> None:
        """spec §7.5: a client came back as a new incarnation: the old one's tuples go (as
        an Unsub, from here) and nothing queued is delivered to the new one."""
        s = self.s
        if not s.is_broker or s.view is None:
            return
        view = s.view
        for t in list(s.table):
            if t.origin[0] == client and t.origin[1][0] < epoch:
                origin = (self.node_id, s.next_seq())
                message = Unsub(sid=0, n=0, origin=origin, target=t.origin, vect=())
                self.flow.enqueue(
                    UNSUB,
                    origin,
                    message,
                    (),
                    view.frontier_except(()),
                    set(),
                    now,
                    lseq=origin[1],
                )
                s.tombstone(t.origin, now)
        for entry in s.queue.entries():
            if client in entry.rcpt:
                entry.rcpt = entry.rcpt - {client}
                entry.out.discard(client)
                self.flow.recheck(entry)

    # ---------------------------------------------------------------------------- timers
    def _on_timer(self, timer: Timer, now: float, out: TreeOut) -> None:
        s = self.s
        if s.sessions is None or s.phase not in (RUNNING, LEAVING):
            return
        p = self.params
        match timer:
            case Tick(life=life) if life == s.life:
                self._session_outputs(self.node_id, s.sessions.tick(now), now, out)
                for target in [t for t, until in s.tombstones.items() if until <= now]:
                    del s.tombstones[target]
                out.append(SetTimer(p.hb_period, Tick(s.life)))
            case Probe(life=life) if life == s.life:
                self.conn.ensure(now, out, probe=True)
                # π̄ has done its work once every later publication carries it (Lemma 3):
                # kept for tombstone_ttl, then forgotten, like a tombstone
                for key, pi in list(s.pt.items()):
                    if pi[3]:
                        until = s.pt_until.setdefault(key, now + p.tombstone_ttl)
                        if until <= now:
                            del s.pt[key]
                            del s.pt_until[key]
                out.append(SetTimer(p.probe_period, Probe(s.life)))
            case DackTick(life=life) if life == s.life:
                self.acks.send(now, out)
                out.append(SetTimer(p.dack_period, DackTick(s.life)))
            case PurgeTick(life=life) if life == s.life:
                self.acks.purge()
                out.append(SetTimer(p.purge_period, PurgeTick(s.life)))
            case HistoryTick() | HistoryFlush() | HistoryDone():
                self.history.fire(timer, now, out)

    # --------------------------------------------------------------------- queries
    def monitored_peers(self) -> Iterable[NodeId]:
        return self.s.sessions.peers() if self.s.sessions is not None else ()

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.s.own)

    def durable(self) -> dict[str, Any]:
        """A client's per-publisher high-water marks (spec §6.5's safety net), kept across its
        lives: restarted on the same data directory it still drops every copy at or
        below what it delivered, so ``past_stall = "forward"`` keeps exactly-once and each
        publisher's order across a restart. A broker keeps nothing: its tables come back by
        the protocol (Kazemzadeh & Jacobsen §4.2)."""
        last = self.s.last
        if not last:
            return {}
        return {"last": [[p, seq[0], seq[1]] for p, seq in sorted(last.items())]}

    def restore(self, state: Mapping[str, Any]) -> None:
        marks = state.get("last", [])
        if not isinstance(marks, list):
            raise ValueError("'last' must be a list of [publisher, epoch, number]")
        last: dict[NodeId, SeqT] = {}
        for entry in marks:
            if not (
                isinstance(entry, list)
                and len(entry) == 3
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in entry)
                and isinstance(entry[0], int)
                and isinstance(entry[2], int)
                and math.isfinite(entry[1])
            ):
                raise ValueError(f"not a high-water mark [publisher, epoch, number]: {entry!r}")
            last[entry[0]] = (float(entry[1]), entry[2])
        self.s.last = last

    def retentions(self) -> Iterable[Retention]:
        """A client's own publications, retained per topic with their sequence numbers
        (pubmesh.proto.brokertree.history): kept in a data directory across its lives. Their
        numbers stay valid in the next life: its epoch is later, so its new ones are greater."""
        return self.history.retained.values()

    def restore_retained(self, topic: str, item: Retained) -> None:
        checked_retained(item)
        mark = item.mark
        if not (
            isinstance(mark, list)
            and len(mark) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in mark)
            and isinstance(mark[1], int)
            and math.isfinite(mark[0])
        ):
            raise ValueError(f"retained publication {item.pub_id}: no sequence number [epoch, k]")
        seq: SeqT = (float(mark[0]), mark[1])
        attributes = dict(item.attributes or {})
        self.history.retain(
            topic, item.pub_id, item.payload, attributes, seq, item.t, self.retained_journal
        )

    def active_peers(self) -> list[NodeId]:
        return sorted(p for p, link in self.s.links.items() if link.state == ACTIVE)

    def snapshot(self) -> Iterable[SnapshotRow]:
        """spec §12.7: layer "tree", neighbours = active peers, the table and queue sizes."""
        s = self.s
        if s.phase != RUNNING:
            return ()
        state = {
            "kind": s.kind,
            "tuples": len(s.table),
            "pt": len(s.pt),
            "q_len": len(s.queue),
            "fragments": len(s.down),
        }
        return (SnapshotRow("", "tree", tuple(self.active_peers()), state),)

    def statistics(self) -> NodeStatistics:
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(sorted(self.s.own)),
            delivered=self.s.delivered,
            neighbors={"tree": tuple(self.active_peers())},
            received_by_type=dict(self.received),
            counters=dict(self.s.counters),
        )


def _plain(attributes: Any) -> dict[str, Any]:
    try:
        return {str(k): v for k, v in dict(attributes).items()}
    except (TypeError, ValueError):
        return {}


def create(ctx: NodeContext) -> StackNode:
    return BrokerTreeNode(ctx)
