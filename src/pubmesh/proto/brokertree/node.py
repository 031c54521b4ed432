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
(:meth:`BrokerTreeNode._presumed_gone`). An entry is *confirmed* (rule CF) when every peer it was
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

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pubmesh.proto.brokertree.checkout import PUB, SUB, UNSUB, CheckoutQueue, Entry, Kind
from pubmesh.proto.brokertree.dack import DepthAcks
from pubmesh.proto.brokertree.messages import (
    Conf,
    Dack,
    DackEntry,
    Heartbeat,
    Hello,
    HelloAck,
    LSeq,
    OriginT,
    ParInfoT,
    Pub,
    Reset,
    SeqT,
    Sub,
    SubSummary,
    TopoSummary,
    TupleT,
    Unsub,
    Vect,
)
from pubmesh.proto.brokertree.params import BrokerTreeParams
from pubmesh.proto.brokertree.seqvect import HighSeq, legitimate, shifted
from pubmesh.proto.brokertree.session import Down, Miswired, Sessions, Up
from pubmesh.proto.brokertree.table import SubscriptionTable, SubTuple
from pubmesh.proto.brokertree.topology import BROKER, CLIENT, wiring
from pubmesh.proto.brokertree.view import View
from pubmesh.proto.brokertree.wire import (
    norm_origin,
    norm_parinfo,
    norm_seq,
    norm_vect,
    valid_node,
    valid_origin,
    valid_parinfo,
    valid_seq,
)
from pubmesh.proto.content import (
    Conjunction,
    FilterError,
    matches,
    publication_attributes,
    validate,
    with_topic,
)
from pubmesh.proto.core import (
    Deliver,
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


class Life(enum.StrEnum):
    """Where a node is in its life (its ``state``)."""

    IDLE = "idle"
    RUNNING = "running"
    LEAVING = "leaving"
    LEFT = "left"


class LinkState(enum.StrEnum):
    """A link's state (spec §4): inactive (a closer node on the path is up), activating (LSeq
    asked), active (its pointer checks out)."""

    INACTIVE = "inactive"
    ACTIVATING = "activating"
    ACTIVE = "active"


IDLE, RUNNING, LEAVING, LEFT = Life  # by their short names, in order
INACTIVE, ACTIVATING, ACTIVE = LinkState
#: route states of a recipient's path
PENDING, LARGE = "pending", "large"

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
#: session ends that may be the detector's mistake (silence, a late frame, the peer's own
#: mistake): the peer is re-probed at once; a runtime PeerDown is taken at its word
_MISTAKABLE = frozenset({"silent", "gap", "reset", "redialed", "handshake"})
#: tuples per SubSummary frame
_CHUNK = 256


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


@dataclass(slots=True)
class Link:
    """Check-out state of the session with one peer (spec §4)."""

    peer: NodeId
    state: LinkState = INACTIVE
    pointer: int = -1
    gen: int = 0
    #: since when the session has been stalled (spec §4 head of line; -1: not since its
    #: activation): past ``stall_timeout`` the nodes it bypasses are presumed gone and it
    #: stops holding copies that would break legitimacy (``past_stall``)
    stalled_since: float = -1.0


@dataclass(slots=True)
class OwnSub:
    """A subscription this client issued: its origin, topic, filter and predicate."""

    origin: OriginT
    topic: str
    filter: dict[str, Any]
    pred: Conjunction
    confirmed: bool = False
    parinfo: frozenset[ParInfoT] = frozenset()


@dataclass(slots=True)
class _Held:
    """Per source X, the X-seqs of held publications and of purged ones not yet reported
    (spec §8 'discarded')."""

    held: dict[SeqT, int] = field(default_factory=dict)
    purged: list[SeqT] = field(default_factory=list)


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
        #: last incarnation epoch seen of each peer (spec §7.5 client restart), and whether
        #: the current one is a restart of one we knew
        self.peer_epochs: dict[NodeId, float] = {}
        self._knew: dict[NodeId, bool] = {}
        self.queue = CheckoutQueue()
        self.high = HighSeq(self.delta)
        self.table = SubscriptionTable()
        #: unsubscribed origins and when their tombstones expire (spec §9)
        self.tombstones: dict[OriginT, float] = {}
        #: highest seq of each node found in our tuples' vects (lseq_sub, spec §7.1)
        self.sub_high: dict[NodeId, SeqT] = {}
        #: a client's own subscriptions by topic
        self.own: dict[str, OwnSub] = {}
        #: a client's subscriber clients within δ + 1 hops (TopoSummary), recipients of its
        #: publications beside the broker frontier
        self.targets: set[NodeId] = set()
        #: a broker's subscriber clients, and those not yet announced to its client peers
        self._subscribers: set[NodeId] = set()
        self._announce: set[NodeId] = set()
        #: safety net (spec §6.5): highest pseq delivered per publisher
        self.last: dict[NodeId, SeqT] = {}
        #: partition table (Kazemzadeh & Jacobsen §3.5): π key (lead, seq) -> π, and when each π̄
        #: goes
        self.pt: dict[tuple[NodeId, SeqT], ParInfoT] = {}
        self._pt_until: dict[tuple[NodeId, SeqT], float] = {}
        #: dack state (spec §8): the reports kept and traded (pubmesh.proto.brokertree.dack)
        self.dacks = DepthAcks(self.node_id)
        self._held: dict[NodeId, _Held] = {}
        #: Confs to batch per peer this event (spec §12.5)
        self._confs: dict[NodeId, list[OriginT]] = {}
        self._dirty: set[Entry] = set()
        self._all_dirty = False
        self._routes: dict[NodeId, tuple[NodeId | None, str]] = {}
        self._topology_changed = True
        #: recovery (spec §7): None until the node knows whether it lost a table (a peer
        #: knew an older incarnation of it: True, recovering), False once its table is whole
        #: (it never had one to lose, or a complete peer sent it a whole one)
        self.recovering: bool | None = None
        #: peers that answered the activation handshake, and whether each knew us before
        self._answered: dict[NodeId, bool] = {}
        #: recovering peers that asked for a whole table, owed once ours is whole
        self._owed: set[NodeId] = set()
        self._peer_recovering: set[NodeId] = set()
        #: publications received before the table was whole, in arrival order
        self._early: list[tuple[NodeId, Pub]] = []
        self.delivered = 0
        self.counters: dict[str, int] = {}
        self.received: dict[str, int] = {}

    # ---------------------------------------------------------------------------- helpers
    def _count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def _next_seq(self) -> SeqT:
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
                        self._session_event(ev, now, out)
            case Start(contacts=contacts, wall=wall):
                # epochs must grow across incarnations (spec §2, §12.6): the run's clock in
                # the simulator, the wall clock over TCP, where now restarts with the process
                self._start(contacts, now, wall if wall is not None else now, out)
            case Subscribe(topic=topic, filter=filter):
                self._subscribe(topic, filter, now, out)
            case Unsubscribe(topic=topic):
                self._unsubscribe(topic, now, out)
            case Publish():
                self._publish(event, now, out)
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
            self.recovering = False  # a client holds no table to lose (Kazemzadeh & Jacobsen fn. 7)
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
        self._ensure(now, out, probe=True, initial=True)

    # ----------------------------------------------------------------------- connections
    def _wanted(self) -> set[NodeId]:
        """The nodes this node keeps sessions with (spec §4): its tree neighbours and, for each
        failed one, its neighbours on the far side within δ + 1 hops, recursively. A broker
        does not dial its own clients: they dial it."""
        view = self.view
        assert view is not None
        result: set[NodeId] = set()
        todo = [y for y in view.neighbours(self.node_id) if view.is_broker(y) or not self.is_broker]
        while todo:
            y = todo.pop()
            if y in result:
                continue
            result.add(y)
            if y in self.down:
                todo.extend(view.far_side(y))
        result.discard(self.node_id)
        return result

    def _ensure(
        self, now: float, out: list[Output], *, probe: bool = False, initial: bool = False
    ) -> None:
        """Dial every wanted node without a session; failed ones only when probing [P §4.1]."""
        sessions, view = self.sessions, self.view
        assert sessions is not None and view is not None
        mine = view.ordinal.get(self.node_id, -1)
        for node in sorted(self._wanted()):
            if sessions.has(node) or (node in self.down and not probe):
                continue
            if initial and view.ordinal.get(node, -1) > mine >= 0:
                continue
            if node in self.down:
                self._count("probes")
            out.extend(sessions.connect(node, now))

    def _candidate(self, target: NodeId) -> tuple[NodeId | None, str]:
        """The active connection on the path to ``target`` (Kazemzadeh & Jacobsen §3.2): the first
        node of the path's first δ + 1 that is up and has an open session, all before it failed.
        (None, PENDING) if the first live node has no open session yet; (None, LARGE) if the δ + 1
        first nodes, or all nodes, of the path failed: a large fragment."""
        cached = self._routes.get(target)
        if cached is not None:
            return cached
        view, sessions = self.view, self.sessions
        assert view is not None and sessions is not None
        result: tuple[NodeId | None, str] = (None, LARGE)
        for hop in view.path(target)[: view.reach]:
            if hop in self.down:
                continue
            result = (hop, ACTIVE) if sessions.is_open(hop) else (None, PENDING)
            break
        self._routes[target] = result
        return result

    def _changed(self) -> None:
        self._routes.clear()
        self._topology_changed = True
        self._all_dirty = True

    def _session_event(self, ev: Up | Down | Miswired, now: float, out: list[Output]) -> None:
        view = self.view
        assert view is not None
        match ev:
            case Miswired(peer=peer, wiring=theirs):
                # said once per peer, for the operator of either side (the runtime shows a
                # "miswired" record as one line; pubmesh.net.node_cli)
                role = "broker" if view.is_broker(peer) else "client"
                out.append(
                    TraceRecord(
                        "miswired",
                        {
                            "peer": peer,
                            "problem": (
                                f"a {role} with a broker list or tree other than this "
                                f"node's (its wiring {theirs:016x}, ours "
                                f"{self.wiring:016x}): every broker and client must list the "
                                "same brokers in the same order, with the same "
                                "[stack.brokertree] delta, layout and topology parameters"
                            ),
                        },
                    )
                )
            case Up(peer=peer, epoch=epoch):
                self.down.discard(peer)
                known = self.peer_epochs.get(peer)
                self.peer_epochs[peer] = epoch
                self._knew[peer] = known is not None and epoch > known
                if not view.is_broker(peer):
                    view.learn_client(peer)
                    if known is not None and epoch > known:
                        self._client_restarted(peer, epoch, now, out)
                self.links[peer] = Link(peer)
                self._changed()
            case Down(peer=peer, reason=reason):
                self.links.pop(peer, None)
                self._answered.pop(peer, None)
                self._peer_recovering.discard(peer)
                for entry in self.queue.entries():
                    entry.out.discard(peer)
                if peer not in self.down:  # a failed probe of a failed node says nothing new
                    self._count(f"down_{reason}")
                    out.append(TraceRecord("brokertree.suspect", {"peer": peer, "reason": reason}))
                fresh = peer not in self.down
                self.down.add(peer)
                self._changed()
                self._ensure(now, out)
                if fresh and reason in _MISTAKABLE and peer in self._wanted():
                    # re-probe at once (Kazemzadeh & Jacobsen, Highly Available Distributed
                    # Publish/Subscribe Systems §4.1: the lead probes every probe_period): a
                    # node suspected by mistake (fn. 2: the detector "may err") answers within
                    # a round trip, before its bypass can add up with others' to more than δ ⊥
                    # in a 2δ + 1 window (§5.3) and stall copies behind it
                    self._count("reprobes")
                    out.extend(self.sessions.connect(peer, now) if self.sessions else ())

    def _refresh_links(self, now: float, out: list[Output]) -> None:
        """Activate the sessions that became active and deactivate the others (spec §4)."""
        sessions = self.sessions
        assert sessions is not None
        for peer in sorted(self.links):
            link = self.links[peer]
            hop, _ = self._candidate(peer)
            should = hop == peer
            if should and link.state == INACTIVE:
                link.state = ACTIVATING
                link.gen += 1
                self._count("activations")
                self._send(peer, now, out, self._lseq_message(peer, request=True, gen=link.gen))
            elif not should and link.state != INACTIVE:
                link.state = INACTIVE
                link.pointer = -1
                self._all_dirty = True

    def _lseq_message(self, peer: NodeId, *, request: bool, gen: int) -> LSeq:
        return LSeq(
            sid=0,
            n=0,
            request=request,
            gen=gen,
            lseq_sub=self.sub_high.get(peer),
            lseq_msg=self.high.get(peer),
            knew=self._knew.get(peer, False),
            recovering=self.recovering is not False,
        )

    def _send(self, peer: NodeId, now: float, out: list[Output], message: Message) -> bool:
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
        if not isinstance(message, _FRAMES) or self.sessions is None:
            return
        if self.state not in (RUNNING, LEAVING) or src == self.node_id or not valid_node(src):
            return
        sid, n = message.sid, message.n
        if type(sid) is not int or type(n) is not int:
            return
        try:
            released, events, sends = self.sessions.receive(src, message, now)
        except ValueError as error:
            # a frame seen twice: a protocol error of that session, which ends (spec §2)
            out.append(TraceRecord("brokertree.bad_frame", {"peer": src, "error": str(error)}))
            if self.sessions.has(src):
                self.sessions.close(src)
                self._session_event(Down(src, "protocol"), now, out)
            return
        out.extend(sends)
        for ev in events:
            self._session_event(ev, now, out)
        for item in released:
            self._on_message(src, item, now, out)

    def _on_message(self, src: NodeId, message: Message, now: float, out: list[Output]) -> None:
        match message:
            case LSeq():
                self._on_lseq(src, message, now, out)
            case Pub() | Sub() | Unsub():
                self._on_data(src, message, now, out)
            case Conf():
                self._on_conf(src, message)
            case SubSummary():
                self._on_summary(src, message, now, out)
            case Dack():
                self.dacks.receive(message)
            case TopoSummary():
                self._on_topo(message)

    # ----------------------------------------------------------------- handshake, §7.1–7.2
    def _on_lseq(self, src: NodeId, message: LSeq, now: float, out: list[Output]) -> None:
        """[P §4.2.1]: the activating side asks; the other answers with what it holds of the
        asker, and each sends the other the tuples it may lack (spec §7.2: "either side may
        lack"). A restarted node asks for, and gets, a whole table (ours: the share of
        [P §4.2.1] assumes the receiver kept what it had)."""
        self._answered[src] = bool(message.knew)
        if message.recovering:
            self._peer_recovering.add(src)
        else:
            self._peer_recovering.discard(src)
        if message.request:
            reply = self._lseq_message(src, request=False, gen=message.gen)
            if self._send(src, now, out, reply):
                self._send_summary(src, now, out)
        else:
            link = self.links.get(src)
            if link is None or link.state != ACTIVATING or message.gen != link.gen:
                return  # an answer to an activation since replaced
            link.state = ACTIVE
            link.pointer = self.queue.head
            link.stalled_since = -1.0
            self._send_summary(src, now, out)
            self._send_dack_state(src, now, out)
            self._all_dirty = True
        self._update_recovering(now, out)

    def _update_recovering(self, now: float, out: list[Output]) -> None:
        """None → True when a peer knew an older us (we lost a table). None → False after a
        probe period with nobody who did and no whole table offered: a first start, when
        every broker starts empty at once (ours [R]: a restarted node does not know it is
        one until someone tells it, and its own neighbours may have restarted with it)."""
        if self.recovering is not None or not self.is_broker:
            return
        if any(self._answered.values()):
            self.recovering = True
            self._count("restarts")
        elif now - self.started >= self.params.probe_period:
            self._set_whole(now, out, transfer=False)

    def _set_whole(self, now: float, out: list[Output], *, transfer: bool) -> None:
        """The table is whole (a complete peer's ``transfer``, or a first start): pay the
        whole tables owed, handle the publications held (spec §7.4 ``recovered``)."""
        restarted = self.recovering is True
        self.recovering = False
        if transfer:
            detail = {"tuples": len(self.table), "held": len(self._early), "restart": restarted}
            out.append(TraceRecord("brokertree.recovered", detail))
        for peer in sorted(self._owed):
            if self.sessions is not None and self.sessions.is_open(peer):
                self._send_summary(peer, now, out)
        self._owed.clear()
        early, self._early = self._early, []
        for src, message in early:
            self._on_data(src, message, now, out)

    def _summary_tuples(self, peer: NodeId, whole: bool) -> list[TupleT]:
        """bypassedSubSet [P §4.2.1]: the tuples whose subscriber is not beyond ``peer``, or
        every tuple for a ``whole`` transfer (a client's: its own confirmed subscriptions).
        Not only those numbered after the peer's lSeq: that filter is sound only if every
        tuple reached the peer in the order we numbered them, and a summary forwarded while a
        session was down, or a false suspicion, breaks that order (module essay)."""
        view = self.view
        assert view is not None
        rows: list[TupleT] = []
        if not self.is_broker:
            # confirmed ones only: an unconfirmed Sub is still queued and is resent in order
            for own in sorted(self.own.values(), key=lambda o: o.origin):
                if own.confirmed:
                    rows.append((own.origin, own.topic, own.pred.text, (), own.origin[1]))
            return rows
        for t in self.table:
            if whole or peer not in view.path(t.origin[0]):
                rows.append((t.origin, t.topic, t.pred.text, t.vect, t.lseq))
        return rows

    def _send_summary(self, peer: NodeId, now: float, out: list[Output]) -> None:
        view = self.view
        assert view is not None
        if self.is_broker and not view.is_broker(peer):
            edges = tuple(
                (c, view.attach(c))
                for c in sorted(self._subscribers)
                if c != peer and view.distance(peer, c) <= view.reach
            )
            self._send(peer, now, out, TopoSummary(sid=0, n=0, edges=edges, last=True))
        whole = peer in self._peer_recovering
        if whole and self.recovering is not False:
            self._owed.add(peer)  # a whole table once ours is whole
        rows = self._summary_tuples(peer, whole)
        tombstones = tuple(sorted(self.tombstones))
        complete = whole and self.recovering is False
        self._count("summaries")
        parinfo = tuple(
            sorted(
                pi for pi in self.pt.values() if view.distance(pi[0], peer) <= 2 * self.delta + 1
            )
        )
        self._send_rows(
            peer, rows, tombstones, now, out, last=True, complete=complete, parinfo=parinfo
        )
        self._fragment_recovered(peer, now, out)

    def _fragment_recovered(self, peer: NodeId, now: float, out: list[Output]) -> None:
        """[P §4.2.2]: the lead of a large fragment reached a node of it, which now has the
        partially confirmed subscriptions (the summary just sent): π becomes π̄, and goes to
        the active peers within 2δ + 1 of the lead, so that later publications carry π̄."""
        view = self.view
        assert view is not None
        done = [
            pi for pi in self.pt.values() if pi[0] == self.node_id and not pi[3] and peer in pi[2]
        ]
        if not done:
            return
        recovered = tuple((pi[0], pi[1], pi[2], True) for pi in done)
        for pi in recovered:
            self.pt[(pi[0], pi[1])] = pi
        self._count("fragments_recovered", len(recovered))
        for other in sorted(self.links):
            if self.links[other].state == ACTIVE and view.dist(other) <= 2 * self.delta + 1:
                self._send_rows(other, [], (), now, out, last=False, parinfo=recovered)

    def _send_rows(
        self,
        peer: NodeId,
        rows: list[TupleT],
        tombstones: tuple[OriginT, ...],
        now: float,
        out: list[Output],
        *,
        last: bool,
        complete: bool = False,
        parinfo: tuple[ParInfoT, ...] = (),
    ) -> None:
        """``rows`` in SubSummary chunks; the tombstones, partition entries, ``last`` and
        ``complete`` ride on the final one."""
        for start in range(0, max(len(rows), 1), _CHUNK):
            final = start + _CHUNK >= len(rows)
            message = SubSummary(
                sid=0,
                n=0,
                tuples=tuple(rows[start : start + _CHUNK]),
                tombstones=tombstones if final else (),
                parinfo=parinfo if final else (),
                last=last and final,
                complete=complete and final,
            )
            self._send(peer, now, out, message)

    def _on_summary(self, src: NodeId, message: SubSummary, now: float, out: list[Output]) -> None:
        """Merge tuples the node lacks and pass them on [P §4.2.1] (spec §7.2)."""
        view = self.view
        assert view is not None
        if not self.is_broker:
            return
        self._merge_parinfo(src, message.parinfo, now, out)
        added: list[SubTuple] = []
        bypassed = tuple(reversed(view.between(src)))
        for row in message.tuples:
            entry = self._tuple_from_row(src, row, bypassed)
            if entry is not None and self._add_tuple(entry):
                added.append(entry)
        gone: list[OriginT] = []
        for target in message.tombstones:
            if valid_origin(target):
                target = norm_origin(target)
                if target not in self.tombstones:
                    self._tombstone(target, now)
                    gone.append(target)
        if added or gone:
            self._count("summary_tuples", len(added))
            for peer in sorted(self.links):
                link = self.links[peer]
                if peer == src or link.state != ACTIVE:
                    continue
                # onwards only, away from the subscriber: around a failed node the peers
                # beside it are on the subscriber's side too
                branch = view.branch(peer)
                rows = [
                    (t.origin, t.topic, t.pred.text, t.vect, t.lseq)
                    for t in added
                    if branch != view.branch(t.origin[0])
                ]
                if rows or gone:
                    self._send_rows(peer, rows, tuple(gone), now, out, last=False)
        if message.last and message.complete and self.recovering is not False:
            self._set_whole(now, out, transfer=True)

    def _merge_parinfo(
        self, src: NodeId, parinfo: tuple[ParInfoT, ...], now: float, out: list[Output]
    ) -> None:
        """[P §4.2]: partition entries whose lead is within 2δ + 1 are added if unknown (by
        seq) and passed on; π̄ replaces π (spec §7.2, §7.3)."""
        view = self.view
        assert view is not None
        changed: list[ParInfoT] = []
        pt = self.pt
        for raw in parinfo:
            try:
                if pt.get((raw[0], raw[1])) == raw:
                    continue  # the common case: an entry we hold as it is
            except (TypeError, IndexError):
                continue
            if not valid_parinfo(raw):
                continue
            pi = norm_parinfo(raw)
            lead = pi[0]
            if lead != self.node_id and view.dist(lead) > 2 * self.delta + 1:
                continue
            key = (lead, pi[1])
            known = self.pt.get(key)
            if known is None or (pi[3] and not known[3]):
                self.pt[key] = pi
                changed.append(pi)
        if not changed:
            return
        for other in sorted(self.links):
            link = self.links[other]
            if other == src or link.state != ACTIVE:
                continue
            onward = tuple(
                pi for pi in changed if view.distance(pi[0], other) <= 2 * self.delta + 1
            )
            if onward:
                self._send_rows(other, [], (), now, out, last=False, parinfo=onward)

    def _tuple_from_row(
        self, src: NodeId, row: Any, bypassed: tuple[NodeId, ...]
    ) -> SubTuple | None:
        """A summary row as a tuple of ours: the vect shifted as if the tuple had crossed the
        link from ``src`` (spec §7.2), ``from`` recomputed; None if malformed or known."""
        view = self.view
        assert view is not None
        if type(row) is not tuple or len(row) != 5:
            return None
        origin, topic, text, vect, lseq = row
        try:
            if origin in self.table or origin in self.tombstones:
                return None  # the common case: a summary repeats what we have
        except TypeError:  # an unhashable origin: malformed
            return None
        if not valid_origin(origin) or type(topic) is not str or not valid_seq(lseq):
            return None
        origin = norm_origin(origin)
        if origin in self.table or origin in self.tombstones or topic.startswith("$"):
            return None
        vin = norm_vect(vect)
        if vin is None or type(text) is not str:
            return None
        pred = _predicate_text(text, topic)
        if pred is None:
            return None
        vect_here = shifted(vin, src, norm_seq(lseq), bypassed, self.delta)
        if origin[0] == self.node_id:
            return None
        frm = view.from_of(origin[0])
        return SubTuple(origin, topic, pred, frm, vect_here, self._next_seq())

    def _add_tuple(self, entry: SubTuple) -> bool:
        """STEP-II [P §3.5]: the tuple enters the table once (keyed by origin)."""
        if entry.origin in self.tombstones or not self.table.add(entry):
            return False
        view = self.view
        assert view is not None
        subscriber = entry.origin[0]
        view.learn_client(subscriber)
        if not view.is_broker(subscriber) and subscriber not in self._subscribers:
            self._subscribers.add(subscriber)
            self._announce.add(subscriber)
        for node, seq in entry.vect:
            if seq is not None and (self.sub_high.get(node) is None or seq > self.sub_high[node]):
                self.sub_high[node] = seq
        return True

    def _tombstone(self, target: OriginT, now: float) -> None:
        self.tombstones[target] = now + self.params.tombstone_ttl
        self.table.remove(target)

    # --------------------------------------------------------------------- queue and data
    def _on_data(
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
        if kind == PUB and self.is_broker and self.recovering is not False:
            # a (re)started broker routes nothing before every active session has sent its
            # tuples: a publication it matched against a partial table would be dropped for
            # the subscribers it does not know yet (Kazemzadeh & Jacobsen Lemma 2: the recovery
            # transfer comes "before any publication"); it is handled, in order, then
            assert isinstance(message, Pub)
            self._early.append((src, message))
            return
        before = {node for node, seq in vin[: 2 * self.delta + 1] if seq is not None}
        duplicate = self.high.is_duplicate(vin)
        for node in before:
            self.dacks.arrived_from(node)
        entry = self.queue.get(origin)
        if entry is not None:
            # a copy of a queued message: its sender gets the Conf with the others' [P §5.6 ii]
            entry.senders.add(src)
            self._dirty.add(entry)
            self._count("duplicates_queued")
            if entry.stalled and _bypassed(vin, self.delta) < _bypassed(entry.vin, self.delta):
                # [P §5.5]: a retransmission over a path that skipped fewer nodes makes the
                # propagation legitimate again; the stalled copies go on with its vector
                # (they keep our own number, so a receiver of both still sees one message)
                entry.vin = vin
                self._count("relegitimized")
            return
        if kind == PUB:
            assert isinstance(message, Pub)
            if duplicate:
                self._count("duplicates")
                if self.params.ack == "conf":
                    self._conf(src, origin)  # case iii: Conf at once
                return
            self._on_new_pub(src, origin, message, vin, now, out)
            return
        if not self.is_broker and self.params.client_tables == "broker":
            self._conf(src, origin)  # a client holds no table (Kazemzadeh & Jacobsen fn. 7)
            return
        if kind == SUB:
            assert isinstance(message, Sub)
            if origin in self.tombstones:
                self._conf(src, origin)  # unsubscribed since: nothing to propagate
                return
            # a subscription already in the table is propagated again all the same [P §5.6.1]
            # (spec §5 "Duplicates"): its Conf must mean the nodes beyond have it too, and a
            # summary may have brought the tuple here without them
            pred = _predicate(message.topic, message.filter)
            if pred is None:
                out.append(TraceRecord("brokertree.bad_filter", {"origin": repr(origin)}))
                self._conf(src, origin)
                return
        else:
            assert isinstance(message, Unsub)
            if not valid_origin(message.target):
                return
        rcpt = view.frontier_except(self._upstream_branches({src}))
        self._enqueue(kind, origin, message, vin, rcpt, {src}, now)

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
            self._deliver(origin, message, attributes, out)
            if self.params.ack == "conf":
                self._conf(src, origin)
            return
        rcpt = self._pub_rcpt(message.topic, attributes, {src})
        self._enqueue(PUB, origin, message, vin, rcpt, {src}, now)

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

    def _enqueue(
        self,
        kind: Kind,
        origin: OriginT,
        message: Pub | Sub | Unsub,
        vin: Vect,
        rcpt: frozenset[NodeId],
        senders: set[NodeId],
        now: float,
        lseq: SeqT | None = None,
    ) -> Entry:
        entry = Entry(
            kind=kind,
            origin=origin,
            message=message,
            lseq=lseq if lseq is not None else self._next_seq(),
            vin=vin,
            rcpt=rcpt,
            senders=set(senders),
            t=now,
        )
        self.queue.append(entry)
        self._dirty.add(entry)
        if kind == PUB and self.params.ack == "dack":
            for node, seq in vin[: 2 * self.delta + 1]:
                if seq is not None:
                    held = self._held.setdefault(node, _Held())
                    held.held[seq] = held.held.get(seq, 0) + 1
        return entry

    def _conf(self, peer: NodeId, key: OriginT) -> None:
        self._confs.setdefault(peer, []).append(key)

    def _on_conf(self, src: NodeId, message: Conf) -> None:
        """Rule CF: a Conf from Y removes Y from the entry's out (spec §4)."""
        parinfo = tuple(p for p in message.parinfo if valid_parinfo(p))
        for key in message.keys:
            if not valid_origin(key):
                continue
            entry = self.queue.get(norm_origin(key))
            if entry is None:
                continue
            entry.out.discard(src)
            entry.parinfo.update(norm_parinfo(p) for p in parinfo)
            self._dirty.add(entry)

    # ------------------------------------------------------------------- check-out (CO)
    def _relevant(self, entry: Entry, peer: NodeId) -> bool:
        """CO: the peer is the active connection on the path to a recipient, and its path
        does not lead towards a sender (spec §4)."""
        view = self.view
        assert view is not None
        if not any(self._candidate(r)[0] == peer for r in entry.rcpt):
            return False
        path = view.path(peer)
        return not any(s == peer or s in path or peer in view.path(s) for s in entry.senders)

    def _presumed_gone(self, link: Link, now: float) -> bool:
        """Are the nodes ``link`` bypasses presumed gone for good? Kazemzadeh & Jacobsen, *Highly
        Available Distributed Publish/Subscribe Systems* (Kazemzadeh & Jacobsen) §5.5 holds an
        illegitimate copy "until node or link recoveries trigger retransmission of the message on
        legitimate propagation paths", and spec §4 blocks the session behind it (head of line) until
        it is re-activated. The session is active only while every node it bypasses is down
        (Kazemzadeh & Jacobsen §3.2: the active connection is the closest live node), so once it has
        been stalled ``stall_timeout`` seconds since its activation those nodes have been down that
        long: longer than a falsely suspected node takes to answer the lead's next probe (Kazemzadeh
        & Jacobsen §4.1, every ``probe_period``), so they are taken for crashed, and waiting for
        their recovery would block every later copy on the session, including the ones the δ
        guarantee covers. 0: never (the spec's rule)."""
        timeout = self.params.stall_timeout
        return timeout > 0 and link.stalled_since >= 0 and now - link.stalled_since >= timeout

    def _inherited(self, entry: Entry, bypassed: tuple[NodeId, ...]) -> bool:
        """With ``past_stall = "forward"`` only: the copy is illegitimate whatever this hop
        bypasses (a node upstream forwarded it past its stall), so no recovery of a node this
        session bypasses would make it legitimate; holding it would only delay it."""
        if self.params.past_stall != "forward":
            return False
        if not bypassed:
            return True
        direct = shifted(entry.vin, self.node_id, entry.lseq, (), self.delta)
        return not legitimate(direct, self.delta)

    def _pump(self, link: Link, now: float, out: list[Output]) -> None:
        """Move ``link``'s pointer along the queue, checking out relevant entries (CO)."""
        view = self.view
        assert view is not None
        queue = self.queue
        peer = link.peer
        bypassed = view.between(peer)
        end = queue.end
        while link.pointer < end:
            entry = queue.at(link.pointer)
            if entry is None or entry.confirmed or not self._relevant(entry, peer):
                link.pointer += 1
                if entry is not None:
                    self._dirty.add(entry)
                continue
            vect = shifted(entry.vin, self.node_id, entry.lseq, bypassed, self.delta)
            if not legitimate(vect, self.delta) and not self._inherited(entry, bypassed):
                if link.stalled_since < 0:
                    link.stalled_since = now
                if not self._presumed_gone(link, now):
                    if peer not in entry.stalled:
                        entry.stalled.add(peer)
                        self._count("stalls")
                        out.append(
                            TraceRecord(
                                "brokertree.stalled",
                                {"peer": peer, "kind": entry.kind, "origin": repr(entry.origin)},
                            )
                        )
                    return  # head of line (spec §4) until re-activated or stall_timeout
                detail = {"peer": peer, "kind": entry.kind, "origin": repr(entry.origin)}
                if self.params.past_stall == "skip":
                    # [P §5.5]: an illegitimate copy is never sent; this session gives it up
                    self._count("stall_skips")
                    out.append(TraceRecord("brokertree.stall_skipped", detail))
                    link.pointer += 1
                    self._dirty.add(entry)
                    continue
                # past_stall = "forward" (ours, beyond Kazemzadeh & Jacobsen): sent all the same
                self._count("stall_forwards")
                out.append(TraceRecord("brokertree.stall_forwarded", detail))
            message = entry.message
            copy: Message
            if isinstance(message, Pub):
                copy = Pub(
                    sid=0,
                    n=0,
                    origin=entry.origin,
                    pub_id=message.pub_id,
                    topic=message.topic,
                    attributes=message.attributes,
                    payload=message.payload,
                    vect=vect,
                    hops=message.hops + 1,
                    tags=self._tags(entry, message.tags),
                )
                if self.params.ack == "conf":
                    entry.out.add(peer)
            elif isinstance(message, Sub):
                copy = Sub(
                    sid=0,
                    n=0,
                    origin=entry.origin,
                    topic=message.topic,
                    filter=message.filter,
                    vect=vect,
                )
                entry.out.add(peer)
            else:
                copy = Unsub(sid=0, n=0, origin=entry.origin, target=message.target, vect=vect)
                entry.out.add(peer)
            self._send(peer, now, out, copy)
            link.pointer += 1
            self._dirty.add(entry)

    # ------------------------------------------------------------------- confirmation (CF)
    def _confirmable(self, entry: Entry) -> tuple[bool, list[tuple[NodeId, ...]]]:
        """CF (spec §4): out = ∅, every active session passed it, every recipient has an
        active connection on its path; the paths without one (large fragments) are returned
        (a subscription is confirmed partially over them, Kazemzadeh & Jacobsen §3.5 case 2)."""
        if entry.out:
            return False, []
        view = self.view
        assert view is not None
        large: list[tuple[NodeId, ...]] = []
        for r in sorted(entry.rcpt):
            hop, status = self._candidate(r)
            if hop is None:
                if status == PENDING:
                    return False, []
                large.append(tuple(view.path(r)[: view.reach]))
                continue
            link = self.links.get(hop)
            if link is None or link.state != ACTIVE or link.pointer <= entry.index:
                return False, []
        for link in self.links.values():
            if link.state == ACTIVATING:
                return False, []
            if link.state == ACTIVE and link.pointer <= entry.index:
                return False, []
        return True, large

    def _check_confirmations(self, now: float, out: list[Output]) -> None:
        if self._all_dirty:
            candidates = list(self.queue.entries())
            self._all_dirty = False
        else:
            candidates = sorted(
                (e for e in self._dirty if self.queue.get(e.origin) is e), key=lambda e: e.index
            )
        self._dirty.clear()
        dack = self.params.ack == "dack"
        for entry in candidates:
            if entry.confirmed or (dack and entry.kind == PUB):
                continue
            ok, large = self._confirmable(entry)
            if not ok:
                continue
            if large and entry.kind == PUB:
                continue  # a publication waits in a large fragment [P §7]
            self._confirm(entry, large, now, out)

    def _confirm(
        self, entry: Entry, large: list[tuple[NodeId, ...]], now: float, out: list[Output]
    ) -> None:
        """STEP-I…III [P §3.5]: Conf to the senders, the tuple into the table, the tuple to a
        closer inward node the senders bypassed."""
        view = self.view
        assert view is not None
        parinfo = set(entry.parinfo)
        for lfrag in sorted(set(large)):
            pi: ParInfoT = (self.node_id, entry.lseq, lfrag, False)
            parinfo.add(pi)
            self.pt[(self.node_id, entry.lseq)] = pi
        partial = tuple(sorted(parinfo))
        for sender in sorted(entry.senders):
            if partial:
                self._send(
                    sender, now, out, Conf(sid=0, n=0, keys=(entry.origin,), parinfo=partial)
                )
            else:
                self._conf(sender, entry.origin)
        entry.confirmed = True
        self.queue.remove(entry)
        message = entry.message
        if entry.kind == SUB and isinstance(message, Sub):
            self._keep_parinfo(parinfo)
            if entry.origin[0] == self.node_id:
                own = self.own.get(message.topic)
                if own is not None and own.origin == entry.origin:
                    own.confirmed = True
                    own.parinfo = frozenset(parinfo)
                out.append(
                    TraceRecord(
                        "brokertree.sub_confirmed",
                        {"topic": message.topic, "partial": bool(parinfo)},
                    )
                )
                return
            if not self.is_broker:
                return
            pred = _predicate(message.topic, message.filter)
            if pred is None:
                return
            frm = view.from_of(entry.origin[0])
            tuple_ = SubTuple(entry.origin, message.topic, pred, frm, entry.vin, entry.lseq)
            if self._add_tuple(tuple_):
                self._step_three(tuple_, entry.senders, now, out)
        elif entry.kind == UNSUB and isinstance(message, Unsub):
            self._tombstone(norm_origin(message.target), now)

    def _step_three(
        self, tuple_: SubTuple, senders: set[NodeId], now: float, out: list[Output]
    ) -> None:
        """STEP-III [P §3.5]: if the node has a connection to an inward node other than the
        senders, the tuple goes to the closest such node."""
        view = self.view
        assert view is not None
        for hop in view.path(tuple_.origin[0])[: view.reach]:
            if hop in senders:
                return
            link = self.links.get(hop)
            if link is not None and link.state == ACTIVE:
                row = (tuple_.origin, tuple_.topic, tuple_.pred.text, tuple_.vect, tuple_.lseq)
                self._send(
                    hop,
                    now,
                    out,
                    SubSummary(
                        sid=0,
                        n=0,
                        tuples=(row,),
                        tombstones=(),
                        parinfo=(),
                        last=False,
                        complete=False,
                    ),
                )
                return

    def _tags(self, entry: Entry, tags: tuple[ParInfoT, ...]) -> tuple[ParInfoT, ...]:
        """Tagging (Kazemzadeh & Jacobsen §3.5 "Publication Tagging", §7; spec §6.6): a node holding
        π tags π on a publication that comes from the fragment's side (a node of its vector, visited
        or ⊥, lies in π.lFrag), or π̄ once the fragment recovered."""
        if not self.pt:
            return tags
        nodes = {node for node, _ in entry.vin}
        merged = {(pi[0], pi[1]): pi for pi in tags}
        for key, pi in self.pt.items():
            if nodes.intersection(pi[2]):
                known = merged.get(key)
                if known is None or (pi[3] and not known[3]):
                    merged[key] = pi
        if len(merged) == len(tags) and all(merged[(t[0], t[1])] == t for t in tags):
            return tags
        return tuple(sorted(merged.values()))

    def _keep_parinfo(self, parinfo: Iterable[ParInfoT]) -> None:
        """Keep π if its lead is within 2δ + 1 hops [P §3.5]."""
        view = self.view
        assert view is not None
        for pi in parinfo:
            lead = pi[0]
            if lead == self.node_id or view.dist(lead) <= 2 * self.delta + 1:
                self.pt[(lead, pi[1])] = pi

    # ---------------------------------------------------------------------------- settle
    def _settle(self, now: float, out: list[Output]) -> None:
        """After every event: (de)activate links, check out, confirm, send the batched Confs."""
        if self.sessions is None:
            return
        if self.recovering is None:
            self._update_recovering(now, out)
        for _ in range(8):
            if self._topology_changed:
                self._topology_changed = False
                self._refresh_links(now, out)
            end = self.queue.end
            pending = [link for link in self.links.values() if link.pointer < end]
            if pending:
                for link in sorted(pending, key=lambda link: link.peer):
                    if link.state == ACTIVE:
                        self._pump(link, now, out)
            if self._dirty or self._all_dirty:
                self._check_confirmations(now, out)
            if not self._topology_changed:
                break
        for peer in sorted(self._confs):
            keys = tuple(self._confs[peer])
            self._send(peer, now, out, Conf(sid=0, n=0, keys=keys, parinfo=()))
        self._confs.clear()
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
                self._send(peer, now, out, TopoSummary(sid=0, n=0, edges=edges, last=True))

    def _on_topo(self, message: TopoSummary) -> None:
        """A client learns the subscribers around it (spec §3)."""
        view = self.view
        if view is None or self.is_broker:
            return
        for edge in message.edges:
            if type(edge) is not tuple or len(edge) != 2:
                continue
            client, broker = edge
            if not (valid_node(client) and valid_node(broker)) or view.is_broker(client):
                continue
            if client == self.node_id or view.attach(client) != broker:
                continue
            if view.dist(client) <= view.reach:
                view.learn_client(client)
                self.targets.add(client)

    # ------------------------------------------------------------------------ commands
    def _subscribe(
        self, topic: str, filter: Mapping[str, Any] | None, now: float, out: list[Output]
    ) -> None:
        """A client subscribes (Kazemzadeh & Jacobsen §3.1): a Sub with its own number as origin."""
        if self.state != RUNNING or self.is_broker:
            return
        if topic.startswith("$"):
            out.append(TraceRecord("brokertree.bad_topic", {"topic": topic}))
            return
        try:
            plain = dict(filter or {})
            pred = with_topic(validate(plain), topic)
        except (FilterError, TypeError, ValueError) as error:
            out.append(TraceRecord("brokertree.bad_filter", {"topic": topic, "error": str(error)}))
            return
        old = self.own.get(topic)
        if old is not None:
            if old.pred == pred:
                return
            self._unsubscribe(topic, now, out)
        origin = (self.node_id, self._next_seq())
        self.own[topic] = OwnSub(origin, topic, plain, pred)
        message = Sub(sid=0, n=0, origin=origin, topic=topic, filter=plain, vect=())
        rcpt = self.view.frontier_except(()) if self.view is not None else frozenset()
        self._enqueue(SUB, origin, message, (), rcpt, set(), now, lseq=origin[1])

    def _unsubscribe(self, topic: str, now: float, out: list[Output]) -> None:
        """spec §9: an Unsub travels like a Sub and removes the tuple where confirmed."""
        if self.state not in (RUNNING, LEAVING) or self.is_broker:
            return
        own = self.own.pop(topic, None)
        if own is None or self.view is None:
            return
        origin = (self.node_id, self._next_seq())
        message = Unsub(sid=0, n=0, origin=origin, target=own.origin, vect=())
        self._enqueue(
            UNSUB, origin, message, (), self.view.frontier_except(()), set(), now, lseq=origin[1]
        )
        self.tombstones[own.origin] = now + self.params.tombstone_ttl

    def _publish(self, command: Publish, now: float, out: list[Output]) -> None:
        """A client publishes (spec §6.2): its recipients are the brokers at the edge of its
        map, which filter (``client_tables = "broker"``, Kazemzadeh & Jacobsen fn. 7)."""
        if self.state != RUNNING or self.is_broker or self.view is None:
            return
        if command.topic.startswith("$"):
            out.append(TraceRecord("brokertree.bad_topic", {"topic": command.topic}))
            return
        attributes = dict(command.attributes or {})
        origin = (self.node_id, self._next_seq())
        message = Pub(
            sid=0,
            n=0,
            origin=origin,
            pub_id=command.pub_id,
            topic=command.topic,
            attributes=attributes,
            payload=command.payload,
            vect=(),
            hops=0,
            tags=(),
        )
        self._deliver(origin, message, publication_attributes(attributes, command.topic), out)
        # the broker frontier filters for everyone beyond; the subscriber clients around us go
        # through our broker too while it is up, and straight to them while it is down
        rcpt = self.view.frontier_except(()) | frozenset(self.targets)
        self._enqueue(PUB, origin, message, (), rcpt, set(), now, lseq=origin[1])

    def _deliver(
        self, origin: OriginT, message: Pub, attributes: Mapping[str, Any], out: list[Output]
    ) -> None:
        """spec §6.5: a subscriber delivers the first copy that matches its subscription; the
        per-publisher high-water mark drops anything at or below what it delivered (``late``,
        which must never fire under ≤ δ failures)."""
        own = self.own.get(message.topic)
        if own is None or not matches(own.pred, attributes):
            if origin[0] != self.node_id:
                self._count("unmatched")
            return
        publisher, pseq = origin
        tagged = self._read_tags(own, message)
        last = self.last.get(publisher)
        if last is not None and pseq <= last:
            self._count("late")
            out.append(
                TraceRecord("brokertree.late", {"pub_id": message.pub_id, "publisher": publisher})
            )
            return
        self.last[publisher] = pseq
        self.delivered += 1
        if tagged:
            # delivered through an overlap with other subscriptions while this one is
            # partial: earlier matching publications may be missing (Kazemzadeh & Jacobsen §7)
            self._count("tagged")
            detail = {"pub_id": message.pub_id, "parinfo": [repr(pi) for pi in tagged]}
            out.append(TraceRecord("brokertree.tagged", detail))
        out.append(
            Deliver(
                message.topic,
                message.pub_id,
                message.payload,
                message.hops,
                dict(message.attributes),
            )
        )

    def _read_tags(self, own: OwnSub, message: Pub) -> list[ParInfoT]:
        """Lemma 3: a tag π matching a partial subscription's π marks the publication; the
        first π̄ clears π for good."""
        if not own.parinfo or not message.tags:
            return []
        pending = {(pi[0], pi[1]): pi for pi in own.parinfo}
        tagged: list[ParInfoT] = []
        for tag in message.tags:
            if not valid_parinfo(tag):
                continue
            key = (tag[0], norm_seq(tag[1]))
            if key not in pending:
                continue
            if tag[3]:
                del pending[key]
            else:
                tagged.append(pending[key])
        own.parinfo = frozenset(pending.values())
        return tagged

    def _leave(self, now: float, out: list[Output]) -> None:
        """spec §9: a client unsubscribes everything, awaits the Confs, then closes its
        sessions; a broker's leave counts as a crash."""
        if self.state != RUNNING:
            return
        if self.is_broker:
            self._finish_leave(out)
            return
        for topic in sorted(self.own):
            self._unsubscribe(topic, now, out)
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

    def _client_restarted(
        self, client: NodeId, epoch: float, now: float, out: list[Output]
    ) -> None:
        """spec §7.5: a client came back as a new incarnation: the old one's tuples go (as
        an Unsub, from here) and nothing queued is delivered to the new one."""
        if not self.is_broker or self.view is None:
            return
        view = self.view
        for t in list(self.table):
            if t.origin[0] == client and t.origin[1][0] < epoch:
                origin = (self.node_id, self._next_seq())
                message = Unsub(sid=0, n=0, origin=origin, target=t.origin, vect=())
                self._enqueue(
                    UNSUB,
                    origin,
                    message,
                    (),
                    view.frontier_except(()),
                    set(),
                    now,
                    lseq=origin[1],
                )
                self._tombstone(t.origin, now)
        for entry in self.queue.entries():
            if client in entry.rcpt:
                entry.rcpt = entry.rcpt - {client}
                entry.out.discard(client)
                self._dirty.add(entry)

    # ---------------------------------------------------------------------------- timers
    def _on_timer(self, timer: Timer, now: float, out: list[Output]) -> None:
        if self.sessions is None or self.state not in (RUNNING, LEAVING):
            return
        p = self.params
        match timer:
            case Tick(life=life) if life == self.life:
                events, sends = self.sessions.tick(now)
                out.extend(sends)
                for ev in events:
                    self._session_event(ev, now, out)
                for target in [t for t, until in self.tombstones.items() if until <= now]:
                    del self.tombstones[target]
                out.append(SetTimer(p.hb_period, Tick(self.life)))
            case Probe(life=life) if life == self.life:
                self._ensure(now, out, probe=True)
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
                self._send_dacks(now, out)
                out.append(SetTimer(p.dack_period, DackTick(self.life)))
            case PurgeTick(life=life) if life == self.life:
                self._purge()
                out.append(SetTimer(p.purge_period, PurgeTick(self.life)))

    # ------------------------------------------------------------------------ dack, §8
    def _reports_for(
        self, peer: NodeId, pairs: set[tuple[NodeId, NodeId]]
    ) -> tuple[list[DackEntry], list[DackEntry]]:
        """What a Dack to ``peer`` carries about ``pairs`` (pubmesh.proto.brokertree.dack)."""
        if not pairs:
            return [], []
        assert self.view is not None
        return self.dacks.reports_for(self.view, self.high, peer, pairs)

    def _send_dack_state(self, peer: NodeId, now: float, out: list[Output]) -> None:
        """A newly active session gets every report that applies to it."""
        if self.params.ack != "dack":
            return
        arrived, discarded = self._reports_for(peer, self.dacks.all_pairs(self.high))
        if arrived or discarded:
            self._send(
                peer, now, out, Dack(sid=0, n=0, arrived=tuple(arrived), discarded=tuple(discarded))
            )

    def _send_dacks(self, now: float, out: list[Output]) -> None:
        """Every dack_period: the reports that changed, to each session peer they apply to."""
        pairs = self.dacks.take_changed()
        if not pairs or self.sessions is None:
            return
        for peer in self.sessions.open_peers():
            arrived, discarded = self._reports_for(peer, pairs)
            if arrived or discarded:
                self._count("dacks")
                self._send(
                    peer,
                    now,
                    out,
                    Dack(sid=0, n=0, arrived=tuple(arrived), discarded=tuple(discarded)),
                )

    def _purge(self) -> None:
        """[P §8]: drop a publication once safeSeq(r) ≥ its number for every recipient and
        every active session has passed it."""
        if self.params.ack != "dack":
            return
        active = [link for link in self.links.values() if link.state == ACTIVE]
        if any(link.state == ACTIVATING for link in self.links.values()):
            return
        purged: list[Entry] = []
        for entry in list(self.queue.entries()):
            if entry.kind != PUB:
                continue
            if any(link.pointer <= entry.index for link in active):
                continue
            ok = True
            for r in entry.rcpt:
                assert self.view is not None
                safe = self.dacks.safe_seq(self.view, r)
                if safe is None or safe < entry.lseq:
                    ok = False
                    break
            if ok:
                purged.append(entry)
        for entry in purged:
            self.queue.remove(entry)
            for node, seq in entry.vin[: 2 * self.delta + 1]:
                if seq is None:
                    continue
                held = self._held.get(node)
                if held is None:
                    continue
                count = held.held.get(seq, 0) - 1
                if count > 0:
                    held.held[seq] = count
                else:
                    held.held.pop(seq, None)
                held.purged.append(seq)
        if purged:
            self._count("purged", len(purged))
        self._update_discarded()

    def _update_discarded(self) -> None:
        """discarded[X] (spec §8): the largest X-seq received such that every held message
        with an X entry at or below it has been purged."""
        for node in self.high.high:
            held = self._held.get(node)
            if held is None or not held.held:
                value = self.high.get(node)
                if held is not None:
                    held.purged.clear()
            else:
                lowest = min(held.held)
                below = [s for s in held.purged if s < lowest]
                held.purged = [s for s in held.purged if s >= lowest]
                value = max(below) if below else self.dacks.discarded.get(node)
                known = self.dacks.discarded.get(node)
                if value is not None and known is not None and value < known:
                    value = known
            if value is not None and value != self.dacks.discarded.get(node):
                self.dacks.set_discarded(node, value)

    # --------------------------------------------------------------------- queries
    def monitored_peers(self) -> Iterable[NodeId]:
        return self.sessions.peers() if self.sessions is not None else ()

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.own)

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
            topics=tuple(sorted(self.own)),
            delivered=self.delivered,
            neighbors={"tree": tuple(self.active_peers())},
            received_by_type=dict(self.received),
            counters=dict(self.counters),
        )


_PREDICATES: dict[tuple[str, str], Conjunction | None] = {}
#: the last filter objects seen, by id (the simulator hands one object along every hop)
_BY_OBJECT: dict[int, tuple[Any, str, Conjunction | None]] = {}


def _predicate(topic: str, filter: Any) -> Conjunction | None:
    """A subscription's predicate: its filter with the topic as ``$topic`` (spec §6.1); None
    for a topic or filter that is not valid. Cached by (topic, filter text): every broker
    reads every subscription, most of them several times."""
    if type(topic) is not str or topic.startswith("$"):
        return None
    seen = _BY_OBJECT.get(id(filter))
    if seen is not None and seen[0] is filter and seen[1] == topic:
        return seen[2]
    try:
        key = (topic, json.dumps(filter, sort_keys=True, allow_nan=True))
    except (TypeError, ValueError, RecursionError):
        return None
    if key in _PREDICATES:
        pred = _PREDICATES[key]
    else:
        try:
            pred = with_topic(validate(dict(filter)), topic)
        except (FilterError, TypeError, ValueError, RecursionError):
            pred = None
        if len(_PREDICATES) > 65536:
            _PREDICATES.clear()
        _PREDICATES[key] = pred
    if len(_BY_OBJECT) > 65536:
        _BY_OBJECT.clear()
    _BY_OBJECT[id(filter)] = (filter, topic, pred)
    return pred


_BY_TEXT: dict[tuple[str, str], Conjunction | None] = {}


def _predicate_text(text: str, topic: str) -> Conjunction | None:
    """A summary row's predicate (the canonical JSON text of a tuple's conjunction), held to
    the row's topic; None if it does not parse. Cached: a whole table crosses every link of a
    restarted broker."""
    key = (text, topic)
    if key in _BY_TEXT:
        return _BY_TEXT[key]
    try:
        pred: Conjunction | None = with_topic(
            validate(json.loads(text), allow_reserved=True), topic
        )
    except (FilterError, ValueError, TypeError, RecursionError):
        pred = None
    if len(_BY_TEXT) > 65536:
        _BY_TEXT.clear()
    _BY_TEXT[key] = pred
    return pred


def _bypassed(vin: Vect, delta: int) -> int:
    """⊥ entries among the newest 2δ + 1 of a received vector."""
    return sum(1 for _, seq in vin[: 2 * delta + 1] if seq is None)


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
