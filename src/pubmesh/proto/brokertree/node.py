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
The node holds the state every part reads (the view, the sessions, the queue, the table,
``down``, ``links``, the partition table), takes every input and settles after each; it
composes six parts, each with the fields it alone uses: :class:`.connections.Connections`
(sessions, routes, link activation), :class:`.recovery.Recovery` (handshake, summaries, whole
tables), :class:`.flow.Flow` (check-out and confirmation), :class:`.purge.Purger` (depth acks
and the purge), :class:`.client.Client` (a client's subscriptions, publications and
deliveries) and :class:`.history.BrokerTreeHistory` (the topic history of spec §14: a client's
own publications retained for late subscribers, their queries and the replayed deliveries).
A part reaches the shared state through its node (``self.n``, a weak proxy:
:class:`pubmesh.proto.core.Part`); the order in which the node calls them is the order of the
rules below, so splitting them into parts changes no trace: the traces are byte-identical to
those of the same rules in one class (the history part sends nothing unless asked).

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

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB, CheckoutQueue
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
    ParInfoT,
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
from pubmesh.proto.brokertree.seqvect import HighSeq, bypassed_in
from pubmesh.proto.brokertree.session import Down, Released, SessionOutput, Sessions
from pubmesh.proto.brokertree.state import ACTIVE, IDLE, LEAVING, LEFT, RUNNING, Life, Link
from pubmesh.proto.brokertree.table import SubscriptionTable, SubTuple
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
        self.state: Life = IDLE
        self.kind = BROKER if ctx.role == BROKER else CLIENT
        self.view: View | None = None
        self.sessions: Sessions | None = None
        #: the digest of the broker list and tree parameters (topology.wiring), set at Start
        self.wiring = 0
        self.epoch = 0.0
        self.started = 0.0
        self.k = 0
        self.life = 0
        #: nodes suspected or failed: beingReplaced (spec §4)
        self.down: set[NodeId] = set()
        self.links: dict[NodeId, Link] = {}
        self.queue = CheckoutQueue()
        self.high = HighSeq(self.delta)
        self.table = SubscriptionTable()
        #: unsubscribed origins and when their tombstones expire (spec §9)
        self.tombstones: dict[OriginT, float] = {}
        #: highest seq of each node found in our tuples' vects (lseq_sub, spec §7.1)
        self.sub_high: dict[NodeId, SeqT] = {}
        #: a broker's subscriber clients, and those not yet announced to its client peers
        self.subscribers: set[NodeId] = set()
        self._announce: set[NodeId] = set()
        #: partition table (Kazemzadeh & Jacobsen §3.5): π key (lead, seq) -> π, and when each π̄
        #: goes
        self.pt: dict[tuple[NodeId, SeqT], ParInfoT] = {}
        self._pt_until: dict[tuple[NodeId, SeqT], float] = {}
        # the parts (each module's docstring says what it does)
        self.conn = Connections(self)
        self.recovery = Recovery(self)
        self.flow = Flow(self)
        self.acks = Purger(self)
        self.client = Client(self)
        #: the topic history (spec §14): a client's own publications, its history queries
        self.history = BrokerTreeHistory(self)
        self.counters: dict[str, int] = {}
        self.received: dict[str, int] = {}

    # ---------------------------------------------------------------------------- helpers
    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def next_seq(self) -> SeqT:
        self.k += 1
        return (self.epoch, self.k)

    @property
    def is_broker(self) -> bool:
        return self.kind == BROKER

    # ----------------------------------------------------------------------------- handle
    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Receive(src=src, message=message):
                self._on_frame(src, message, now, out)
            case TimerFired(timer=timer):
                self._on_timer(timer, now, out)
            case PeerDown(peer=peer):
                if self.sessions is not None and self.state in (RUNNING, LEAVING):
                    for ev in self.sessions.peer_down(peer):
                        self.conn.session_event(ev, now, out)
            case Start(contacts=contacts, wall=wall):
                # epochs must grow across incarnations (spec §2, §12.6): the run's clock in
                # the simulator, the wall clock over TCP, where now restarts with the process
                self._start(contacts, now, wall if wall is not None else now, out)
            case Subscribe(topic=topic, filter=filter, history=history):
                before = self.client.own.get(topic)
                self.client.subscribe(topic, filter, now, out)
                own = self.client.own.get(topic)
                if history is not None and own is not None and own is not before:
                    self.history.subscribe(topic, history, own.origin, out)
            case Unsubscribe(topic=topic):
                self.client.unsubscribe(topic, now, out)
            case Publish():
                self.client.publish(event, now, out)
            case Leave():
                self._leave(now, out)
        if self.state in (RUNNING, LEAVING):
            self._settle(now, out)
        return out

    # ------------------------------------------------------------------------------ start
    def _start(
        self, contacts: tuple[NodeId, ...], now: float, epoch: float, out: list[Output]
    ) -> None:
        """Start: the brokers are the contacts (spec §2: every node computes the same tree
        from the parameters and them); dial the tree neighbours."""
        if self.state != IDLE:
            return
        brokers = tuple(c for c in contacts if valid_node(c))
        try:
            self.view = View(self.params, brokers, self.node_id)
        except ValueError as error:
            out.append(TraceRecord("brokertree.no_tree", {"error": str(error)}))
            return
        self.kind = BROKER if self.view.is_me_broker() else CLIENT
        if self.kind == CLIENT:
            self.recovery.recovering = (
                False  # a client holds no table to lose (Kazemzadeh & Jacobsen fn. 7)
            )
        self.epoch = float(epoch)
        self.started = now
        p = self.params
        self.wiring = wiring(self.params, brokers)
        self.sessions = Sessions(
            self.node_id,
            self.epoch,
            self.kind,
            hb=p.hb,
            hb_period=p.hb_period,
            fd_timeout=p.fd_timeout,
            wiring=self.wiring,
        )
        self.state = RUNNING
        self.life += 1
        out.append(SetTimer(p.hb_period, Tick(self.life)))
        out.append(SetTimer(p.probe_period, Probe(self.life)))
        if p.ack == "dack":
            out.append(SetTimer(p.dack_period * self.rng.uniform(0.5, 1.0), DackTick(self.life)))
            out.append(SetTimer(p.purge_period * self.rng.uniform(0.5, 1.0), PurgeTick(self.life)))
        # at start a broker dials only the brokers before it (in the order of the broker
        # list): those after it may not be up yet, and will dial it when they start (the
        # probe dials whoever has not, after probe_period)
        self.conn.ensure(now, out, probe=True, initial=True)

    # ------------------------------------------------------------------------- sending
    def send(self, peer: NodeId, message: Message, now: float, out: list[Output]) -> bool:
        """Send ``message`` on the open session with ``peer`` (its sid and n filled in)."""
        sessions = self.sessions
        assert sessions is not None
        if not sessions.is_open(peer):
            return False
        out.append(
            sessions.send(
                peer,
                lambda sid, n: _renumber(message, sid, n),
                now,
            )
        )
        return True

    # ------------------------------------------------------------------------------ frames
    def _on_frame(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        name = type(message).__name__
        self.received[name] = self.received.get(name, 0) + 1
        if isinstance(message, HistoryAsk | HistoryPub):
            # the topic history (spec §14) goes outside the sessions, straight between nodes
            if self.state == RUNNING and src != self.node_id and valid_node(src):
                if isinstance(message, HistoryAsk):
                    self.history.on_ask(src, message, now, out)
                else:
                    self.history.on_item(src, message, now, out)
            return
        if not isinstance(message, _FRAMES) or self.sessions is None:
            return
        if self.state not in (RUNNING, LEAVING) or src == self.node_id or not valid_node(src):
            return
        sid, n = message.sid, message.n
        if type(sid) is not int or type(n) is not int:
            return
        try:
            items = self.sessions.receive(src, message, now)
        except ValueError as error:
            # a frame seen twice: a protocol error of that session, which ends (spec §2)
            out.append(TraceRecord("brokertree.bad_frame", {"peer": src, "error": str(error)}))
            if self.sessions.has(src):
                self.sessions.close(src)
                self.conn.session_event(Down(src, "protocol"), now, out)
            return
        self._session_outputs(src, items, now, out)

    def _session_outputs(
        self, src: NodeId, items: list[SessionOutput], now: float, out: list[Output]
    ) -> None:
        """What the session layer gave, in its order: frames to send, session events, then
        the frames it released from ``src``."""
        for item in items:
            if isinstance(item, Send):
                out.append(item)
            elif isinstance(item, Released):
                self._on_message(src, item.message, now, out)
            else:
                self.conn.session_event(item, now, out)

    def _on_message(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        match message:
            case LSeq():
                self.recovery.on_lseq(src, message, now, out)
            case Pub() | Sub() | Unsub():
                self.on_data(src, message, now, out)
            case Conf():
                self.flow.on_conf(src, message)
            case SubSummary():
                self.recovery.on_summary(src, message, now, out)
            case Dack():
                self.acks.reports.receive(message)
            case TopoSummary():
                self.client.on_topo(message)

    # -------------------------------------------------------------------- the table, §5
    def add_tuple(self, entry: SubTuple) -> bool:
        """STEP-II [P §3.5]: the tuple enters the table once (keyed by origin)."""
        if entry.origin in self.tombstones or not self.table.add(entry):
            return False
        view = self.view
        assert view is not None
        subscriber = entry.origin[0]
        view.learn_client(subscriber)
        if not view.is_broker(subscriber) and subscriber not in self.subscribers:
            self.subscribers.add(subscriber)
            self._announce.add(subscriber)
        for node, seq in entry.vect:
            if seq is not None and (self.sub_high.get(node) is None or seq > self.sub_high[node]):
                self.sub_high[node] = seq
        return True

    def tombstone(self, target: OriginT, now: float) -> None:
        self.tombstones[target] = now + self.params.tombstone_ttl
        self.table.remove(target)

    # --------------------------------------------------------------------- queue and data
    def on_data(
        self, src: NodeId, message: Pub | Sub | Unsub, now: float, out: list[Output]
    ) -> None:
        """A queued kind of message from ``src`` (spec §6.4 receipt)."""
        view = self.view
        assert view is not None
        if not valid_origin(message.origin):
            return
        origin = norm_origin(message.origin)
        vin = norm_vect(message.vect)
        if vin is None:
            return
        kind = PUB if isinstance(message, Pub) else SUB if isinstance(message, Sub) else UNSUB
        if kind == PUB and self.is_broker and self.recovery.recovering is not False:
            # a (re)started broker routes nothing before every active session has sent its
            # tuples: a publication it matched against a partial table would be dropped for
            # the subscribers it does not know yet (Kazemzadeh & Jacobsen Lemma 2: the recovery
            # transfer comes "before any publication"); it is handled, in order, then
            assert isinstance(message, Pub)
            self.recovery.early.append((src, message))
            return
        before = {node for node, seq in vin[: 2 * self.delta + 1] if seq is not None}
        duplicate = self.high.is_duplicate(vin)
        for node in before:
            self.acks.reports.arrived_from(node)
        entry = self.queue.get(origin)
        if entry is not None:
            # a copy of a queued message: its sender gets the Conf with the others' [P §5.6 ii]
            entry.senders.add(src)
            self.flow.dirty.add(entry)
            self.count("duplicates_queued")
            if entry.stalled and bypassed_in(vin, self.delta) < bypassed_in(entry.vin, self.delta):
                # [P §5.5]: a retransmission over a path that skipped fewer nodes makes the
                # propagation legitimate again; the stalled copies go on with its vector
                # (they keep our own number, so a receiver of both still sees one message)
                entry.vin = vin
                self.count("relegitimized")
            return
        if kind == PUB:
            assert isinstance(message, Pub)
            if duplicate:
                self.count("duplicates")
                if self.params.ack == "conf":
                    self.flow.conf(src, origin)  # case iii: Conf at once
                return
            self._on_new_pub(src, origin, message, vin, now, out)
            return
        if not self.is_broker and self.params.client_tables == "broker":
            self.flow.conf(src, origin)  # a client holds no table (Kazemzadeh & Jacobsen fn. 7)
            return
        if kind == SUB:
            assert isinstance(message, Sub)
            if origin in self.tombstones:
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
        view = self.view
        assert view is not None
        return {view.branch(s) for s in senders if s != self.node_id}

    def _on_new_pub(
        self,
        src: NodeId,
        origin: OriginT,
        message: Pub,
        vin: Vect,
        now: float,
        out: list[Output],
    ) -> None:
        attributes = publication_attributes(_plain(message.attributes), message.topic)
        if not self.is_broker:
            self.client.deliver(origin, message, attributes, out)
            if self.params.ack == "conf":
                self.flow.conf(src, origin)
            return
        rcpt = self._pub_rcpt(message.topic, attributes, {src})
        self.flow.enqueue(PUB, origin, message, vin, rcpt, {src}, now)

    def _pub_rcpt(
        self, topic: str, attributes: Mapping[str, Any], senders: set[NodeId]
    ) -> frozenset[NodeId]:
        """RCPT_N^p [P §2.2]: ``from`` of every matching tuple downstream of N, i.e. not in the
        branch of a sender."""
        view = self.view
        assert view is not None
        branches = self._upstream_branches(senders)
        out: set[NodeId] = set()
        for t in self.table.matching(topic, attributes):
            frm = t.frm
            if frm != self.node_id and frm not in senders and view.branch(frm) not in branches:
                out.add(frm)
        return frozenset(out)

    # ---------------------------------------------------------------------------- settle
    def _settle(self, now: float, out: list[Output]) -> None:
        """After every event: (de)activate links, check out, confirm, send the batched Confs."""
        if self.sessions is None:
            return
        if self.recovery.recovering is None:
            self.recovery.update(now, out)
        for _ in range(8):
            if self.conn.topology_changed:
                self.conn.topology_changed = False
                self.conn.refresh_links(now, out)
            end = self.queue.end
            pending = [link for link in self.links.values() if link.pointer < end]
            if pending:
                for link in sorted(pending, key=lambda link: link.peer):
                    if link.state == ACTIVE:
                        self.flow.pump(link, now, out)
            if self.flow.dirty or self.flow.all_dirty:
                self.flow.check_confirmations(now, out)
            if not self.conn.topology_changed:
                break
        for peer in sorted(self.flow.confs):
            keys = tuple(self.flow.confs[peer])
            self.send(peer, Conf(sid=0, n=0, keys=keys, parinfo=()), now, out)
        self.flow.confs.clear()
        if self._announce:
            self._announce_subscribers(now, out)
        if self.state == LEAVING and not any(e.kind != PUB for e in self.queue.entries()):
            self._finish_leave(out)

    def _announce_subscribers(self, now: float, out: list[Output]) -> None:
        """TopoSummary of new subscribers to the client peers within δ + 1 hops of them."""
        view = self.view
        assert view is not None
        new = sorted(self._announce)
        self._announce.clear()
        for peer in sorted(self.links):
            if view.is_broker(peer) or self.links[peer].state != ACTIVE:
                continue
            edges = tuple(
                (c, view.attach(c))
                for c in new
                if c != peer and view.distance(peer, c) <= view.reach
            )
            if edges:
                self.send(peer, TopoSummary(sid=0, n=0, edges=edges, last=True), now, out)

    # ------------------------------------------------------------------------ leave, §9
    def _leave(self, now: float, out: list[Output]) -> None:
        """spec §9: a client unsubscribes everything, awaits the Confs, then closes its
        sessions; a broker's leave counts as a crash."""
        if self.state != RUNNING:
            return
        if self.is_broker:
            self._finish_leave(out)
            return
        for topic in sorted(self.client.own):
            self.client.unsubscribe(topic, now, out)
        self.state = LEAVING

    def _finish_leave(self, out: list[Output]) -> None:
        sessions = self.sessions
        if sessions is not None:
            for peer in sessions.peers():
                out.append(Disconnect(peer))
                sessions.close(peer)
        self.links.clear()
        self.state = LEFT
        self.life += 1

    def client_restarted(self, client: NodeId, epoch: float, now: float, out: list[Output]) -> None:
        """spec §7.5: a client came back as a new incarnation: the old one's tuples go (as
        an Unsub, from here) and nothing queued is delivered to the new one."""
        if not self.is_broker or self.view is None:
            return
        view = self.view
        for t in list(self.table):
            if t.origin[0] == client and t.origin[1][0] < epoch:
                origin = (self.node_id, self.next_seq())
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
                self.tombstone(t.origin, now)
        for entry in self.queue.entries():
            if client in entry.rcpt:
                entry.rcpt = entry.rcpt - {client}
                entry.out.discard(client)
                self.flow.dirty.add(entry)

    # ---------------------------------------------------------------------------- timers
    def _on_timer(self, timer: Timer, now: float, out: list[Output]) -> None:
        if self.sessions is None or self.state not in (RUNNING, LEAVING):
            return
        p = self.params
        match timer:
            case Tick(life=life) if life == self.life:
                self._session_outputs(self.node_id, self.sessions.tick(now), now, out)
                for target in [t for t, until in self.tombstones.items() if until <= now]:
                    del self.tombstones[target]
                out.append(SetTimer(p.hb_period, Tick(self.life)))
            case Probe(life=life) if life == self.life:
                self.conn.ensure(now, out, probe=True)
                # π̄ has done its work once every later publication carries it (Lemma 3):
                # kept for tombstone_ttl, then forgotten, like a tombstone
                for key, pi in list(self.pt.items()):
                    if pi[3]:
                        until = self._pt_until.setdefault(key, now + p.tombstone_ttl)
                        if until <= now:
                            del self.pt[key]
                            del self._pt_until[key]
                out.append(SetTimer(p.probe_period, Probe(self.life)))
            case DackTick(life=life) if life == self.life:
                self.acks.send(now, out)
                out.append(SetTimer(p.dack_period, DackTick(self.life)))
            case PurgeTick(life=life) if life == self.life:
                self.acks.purge()
                out.append(SetTimer(p.purge_period, PurgeTick(self.life)))
            case HistoryTick() | HistoryFlush() | HistoryDone():
                self.history.fire(timer, now, out)

    # --------------------------------------------------------------------- queries
    def monitored_peers(self) -> Iterable[NodeId]:
        return self.sessions.peers() if self.sessions is not None else ()

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.client.own)

    def durable(self) -> dict[str, Any]:
        """A client's per-publisher high-water marks (spec §6.5's safety net), kept across its
        lives: restarted on the same data directory it still drops every copy at or
        below what it delivered, so ``past_stall = "forward"`` keeps exactly-once and each
        publisher's order across a restart. A broker keeps nothing: its tables come back by
        the protocol (Kazemzadeh & Jacobsen §4.2)."""
        last = self.client.last
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
        self.client.last = last

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
        self.history.retain(topic, item.pub_id, item.payload, attributes, seq, item.t)

    def active_peers(self) -> list[NodeId]:
        return sorted(p for p, link in self.links.items() if link.state == ACTIVE)

    def snapshot(self) -> Iterable[SnapshotRow]:
        """spec §12.7: layer "tree", neighbours = active peers, the table and queue sizes."""
        if self.state != RUNNING:
            return ()
        state = {
            "kind": self.kind,
            "tuples": len(self.table),
            "pt": len(self.pt),
            "q_len": len(self.queue),
            "fragments": len(self.down),
        }
        return (SnapshotRow("", "tree", tuple(self.active_peers()), state),)

    def statistics(self) -> NodeStatistics:
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(sorted(self.client.own)),
            delivered=self.client.delivered,
            neighbors={"tree": tuple(self.active_peers())},
            received_by_type=dict(self.received),
            counters=dict(self.counters),
        )


def _plain(attributes: Any) -> dict[str, Any]:
    try:
        return {str(k): v for k, v in dict(attributes).items()}
    except (TypeError, ValueError):
        return {}


def _renumber(message: Message, sid: int, n: int) -> Message:
    """``message`` with the session's sid and frame number."""
    import dataclasses

    changed: Message = dataclasses.replace(message, sid=sid, n=n)  # type: ignore[call-arg]
    return changed


def create(ctx: NodeContext) -> StackNode:
    return BrokerTreeNode(ctx)
