"""The node runtime: one protocol node driven by asyncio, sockets and the wall clock.

How it works
============
A :class:`NodeRuntime` holds one stack node (:class:`pubmesh.stacks.base.StackNode`), the very
object the simulator drives, and feeds it the same closed set of inputs through the same entry
points: ``node.handle(event, now)``, and for messages and timers ``node.receive`` and
``node.fire``, the wrapper-free routes the simulator takes too (a stack that overrides them
must behave exactly as ``handle`` does). What the simulator does with a heap, this does with
the event loop:

===================  ===========================================================================
protocol output      what the runtime does
===================  ===========================================================================
``Send(dst, m)``     encode, seal and queue on a connection to ``dst`` (:mod:`.transport`);
                     ``dst`` is ``ip << 16 | port`` (:mod:`.address`); to itself: loop back
``SetTimer(a, t)``   ``loop.call_later(a, ...)`` hands ``TimerFired(t)`` back (no cancel:
                     protocols ignore stale timers, exactly as under the simulator)
``Deliver(...)``     to the application's subscriptions and callbacks, and the trace
``Disconnect(p)``    close the connections to ``p`` gracefully unless the protocol still
                     monitors ``p`` (another topic's swarm may still need it)
``TraceRecord``      a row of the trace's ``events`` table
===================  ===========================================================================

and the inputs come from the network (``Receive``), the timers (``TimerFired``), the
transport's failure detector (``PeerDown``: the last connection to a monitored peer was lost,
or a peer could not be reached at all) and the application (commands).

``now`` is the event loop's monotonic clock since the node started; the trace gets wall-clock
time (``epoch at start + now``), so the partial traces of nodes on one machine line up.

The rule that keeps it correct: **the runtime adds sockets, clocks, timers and the checks a
network needs, and decides nothing the protocol decides.** It never looks inside a protocol's
state. It reads a message only through the typed contracts of :mod:`pubmesh.proto.core`: a
payload message is a :class:`~pubmesh.proto.core.Carrier` (topic, publication id, payload,
and the publisher where it names one), read by admission (:mod:`.admission`: room, the ACL),
signing (:mod:`.signing`) and the trace; a message that names a topic says so in its
registration (:func:`~pubmesh.proto.core.topic_of`), read by the ACL's topic check and the
transport's bound on topic length. Nothing reads a field by name. A handler that raises is a
bug, which the runtime logs and traces (``handler-error``) so that one bad input cannot take
the node down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubmesh.durable import DELIVERED_SECONDS
from pubmesh.errors import UserError
from pubmesh.net.acl import Acl
from pubmesh.net.address import format_id
from pubmesh.net.admission import Admission, InvalidCommand
from pubmesh.net.events import EVENT_LOGGED, NodeEvents
from pubmesh.net.identity import Identity, bound_listen, signing_key
from pubmesh.net.runtime_stats import RuntimeStatistics, collect
from pubmesh.net.security import ClusterKey
from pubmesh.net.signing import Signed, Signer, Verifier, carries_payload, credential_of
from pubmesh.net.store import Remembered, Store
from pubmesh.net.transport import NetConfig, Transport, Trouble
from pubmesh.proto.core import (
    Command,
    Deliver,
    Disconnect,
    HistoryRequest,
    Input,
    Leave,
    Message,
    NodeContext,
    NodeId,
    Output,
    PeerDown,
    Publish,
    Receive,
    Send,
    SetTimer,
    StackNode,
    Start,
    Subscribe,
    Timer,
    TimerFired,
    TraceRecord,
    Unsubscribe,
    node_random,
)
from pubmesh.proto.history import Journal
from pubmesh.stacks.base import StackSpec, get_stack

if TYPE_CHECKING:
    from pubmesh.net.tracing import PartialTrace

log = logging.getLogger("pubmesh.net")

#: the trace record a stack emits, once per peer, for a peer started with a configuration
#: that cannot work with this node's (detail: ``peer``, ``problem``); shown as one line
MISWIRED = "miswired"

DeliveryCallback = Callable[[Deliver, float], None]
EventCallback = Callable[[str, Mapping[str, Any]], None]

#: Inputs kept for a node that has not booted yet (beyond this they are dropped).
EARLY_INPUT_LIMIT = 10_000
#: seconds before its last delivery a restarted node asks its topics' history from (what it
#: had received but not yet committed when it stopped; see NodeRuntime._missed)
RESTART_SLACK = 10.0


class Congestion(enum.Enum):
    """What a publication does when the node has no room for it (Zenoh's
    ``CongestionControl``): ``BLOCK`` waits until there is room, ``DROP`` is refused at once.
    Either way the publisher is told (:class:`Receipt`); nothing is lost silently."""

    BLOCK = "block"
    DROP = "drop"


@dataclass(frozen=True)
class Receipt:
    """What became of a publication the application offered (flow control).

    ``accepted``: handed to the stack (``pub_id`` is its id); otherwise ``reason`` says why it
    was refused: the node holds more than its ``memory_budget`` in its queues, or the queue to
    one peer has no room (a slow peer, which the transport reports and in the end disconnects).
    ``waited``: seconds a ``Congestion.BLOCK`` publication waited for room."""

    pub_id: int | None
    accepted: bool
    reason: str | None = None
    waited: float = 0.0

    def __bool__(self) -> bool:
        return self.accepted


@dataclass(frozen=True)
class Delivery:
    """A publication handed to the application."""

    topic: str
    pub_id: int
    payload: bytes
    hops: int
    attributes: Mapping[str, Any] | None
    #: wall-clock time of the delivery
    t: float
    #: handed over from the topic's history (issued before the subscription asked for it)
    replayed: bool = False
    #: a replayed publication's original publish time (wall clock), as the history's holder
    #: dated it (``Deliver.age``); None for a live one
    published: float | None = None


def published_at(delivery: Deliver, t: float) -> float | None:
    """A replayed delivery's original publish time on the wall clock: its delivery time ``t``
    less its age (``Deliver.age``: how long before it was published, as the history's holder
    dated it; the answer's transit not counted, so at most that much late). None for a live
    delivery."""
    if not delivery.replayed or delivery.age is None:
        return None
    return round(t - delivery.age, 6)


class NodeRuntime:
    """One stack node over TCP. See the module docstring.

    Create it, ``await start()``, then use the commands (:meth:`subscribe`, :meth:`publish`,
    ...) and ``await close()``. All methods must be called from the event loop's thread.
    """

    def __init__(
        self,
        stack: str | StackSpec,
        *,
        key: ClusterKey | None = None,
        identity: Identity | None = None,
        sign: bool = True,
        acl: Acl | None = None,
        revocations: Path | str | None = None,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        contacts: Sequence[NodeId] = (),
        role: str = "peer",
        params: Any = None,
        seed: int | None = None,
        config: NetConfig | None = None,
        trace_dir: Path | str | None = None,
        trace_messages: bool = True,
        snapshot_interval: float = 0.0,
        segment_seconds: float = 5.0,
        data_dir: Path | str | None = None,
    ) -> None:
        self.spec = stack if isinstance(stack, StackSpec) else get_stack(stack)
        #: what the node remembers across restarts (pubmesh.net.store), opened in start()
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.store: Store | None = None
        #: ids delivered in the node's last life (within the store's window): not again
        self._delivered_before: set[int] = set()
        #: the stack's durable state as last written to the store (JSON text; "": none)
        self._state_text = ""
        #: with a data directory: the publications the stack's retentions kept since the
        #: last group commit (StackNode.keep_retained), written at the next
        self._journal: Journal = []
        #: deliveries waiting for their record's commit, and whether one is scheduled
        self._held: list[tuple[Deliver, float]] = []
        self._commit_scheduled = False
        self._store_problem: str | None = None
        self.duplicates_across_lives = 0
        self.key = key
        self.identity = identity
        #: identity mode signs its publications and verifies every copy (pubmesh.net.signing)
        self.signing = identity is not None and sign
        self.verifier: Verifier | None = None
        #: copies of this node's own publications waiting for the end of the loop turn, when
        #: they are signed as one batch (pubmesh.net.signing), and whether it is scheduled
        self._unsigned: list[tuple[NodeId, Message, float]] = []
        self._sign_scheduled = False
        #: topic permissions (pubmesh.net.acl): they rest on signed publications
        if acl is not None and not self.signing:
            raise ValueError("an ACL needs identity mode with signed publications")
        self.acl = acl
        #: the authority's revocation list, read again whenever the file changes
        #: (pubmesh.net.revocation); its (mtime, size) when last read
        if revocations is not None and identity is None:
            raise ValueError("a revocation list needs identity mode")
        self.revocations_file = Path(revocations) if revocations is not None else None
        self._revocations_seen: tuple[float, int] | None = None
        self._revocations_checked = 0.0
        if identity is not None:
            listen = bound_listen(identity, listen, "listen")
        self.listen_address = listen
        self.contacts = tuple(contacts)
        self.role = role
        self.params = params if params is not None else self.spec.params_type()
        self.seed = seed if seed is not None else secrets.randbits(63)
        self.config = config or NetConfig()
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.trace_messages = trace_messages
        self.snapshot_interval = snapshot_interval
        self.segment_seconds = segment_seconds

        self.node_id: NodeId = 0
        self.node: StackNode | None = None
        self.transport: Transport | None = None
        self.trace: PartialTrace | None = None  # set in start() when tracing
        self.started = False
        self.booted = False
        self.closed = False
        self.delivery_callbacks: list[DeliveryCallback] = []
        self.event_callbacks: list[EventCallback] = []
        #: open subscriptions: topic -> (t_start wall, filter)
        self.subscribed: dict[str, tuple[float, Mapping[str, Any] | None]] = {}
        self.deliveries = 0
        #: deliveries per topic (the node's own subscriptions: bounded by what it subscribed)
        self.delivered_by_topic: Counter[str] = Counter()
        self.published = 0
        #: bytes the application's queues hold, each a callable (pubmesh.Node's subscription
        #: queues, the node process's stdout buffer): counted in the memory budget
        self.application_queues: list[Callable[[], int]] = []
        self.handler_errors = 0
        self.peer_down_notices = 0
        self._release: set[NodeId] = set()
        self._release_scheduled = False
        self._epoch0 = 0.0
        self._mono0 = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._housekeeping: asyncio.TimerHandle | None = None
        self._next_snapshot = 0.0
        self._early: list[Input] = []
        #: BLOCK publications waiting for room (:meth:`wait_for_room`), woken by :meth:`net_room`
        self.room_waiters: list[asyncio.Future[None]] = []
        #: the node's own events (net.*), to the trace and the event callbacks, rate-limited
        self.events = NodeEvents(self)
        #: the checks on publications, subscriptions and copies, and their counters
        self.admission = Admission(self)

    # ------------------------------------------------------------------ clocks
    def now(self) -> float:
        """Protocol time: seconds since this node started (monotonic)."""
        assert self._loop is not None
        return self._loop.time() - self._mono0

    def wall(self, now: float | None = None) -> float:
        """Wall-clock time of protocol time ``now`` (default: the present)."""
        return self._epoch0 + (self.now() if now is None else now)

    def net_clock(self) -> float:
        return self.wall()

    # ------------------------------------------------------------------ lifecycle
    async def start(self, *, boot: bool = True) -> None:
        """Listen, create the protocol node and (unless ``boot`` is False) hand it Start."""
        if self.started:
            return
        loop = self._loop = asyncio.get_running_loop()
        self._mono0, self._epoch0 = _clock_pair(loop)
        memory = self._open_store()
        self.transport = Transport(self.key, self, self.config, identity=self.identity)
        host, port = self.listen_address
        await self.transport.listen(host, port)
        self.node_id = self.transport.node_id
        if self.store is not None:
            self.store.set_address(format_id(self.node_id))
            self.store.set_contacts(self.contacts)
        if self.signing:
            assert self.identity is not None
            credential = credential_of(self.identity.certificate, self.node_id)
            signer = Signer(self.node_id, signing_key(self.identity), credential, self.wall)
            transport = self.transport
            self.verifier = Verifier(
                signer,
                window=self.config.signature_window,
                started=self._epoch0,
                revoked=lambda credential: transport.revoked_serial(credential.serial),
            )
        self._read_revocations()
        ctx = NodeContext(
            node_id=self.node_id,
            rng=node_random(self.seed, self.node_id),
            role=self.role,
            params=self.params,
        )
        self.node = self.spec.create(ctx)
        if memory is not None and memory.state:
            try:
                self.node.restore(memory.state)
            except ValueError as error:
                raise UserError(
                    f"{self.data_dir}: the stack state kept there is not {self.spec.name}'s "
                    f"({error}); move node.db away to start with an empty memory"
                ) from None
            self._state_text = json.dumps(memory.state, sort_keys=True)
        if memory is not None:
            self._restore_retained(memory)
        if self.trace_dir is not None:
            from pubmesh.net.tracing import PartialTrace  # pyarrow: only when tracing

            self.trace = PartialTrace(
                self.trace_dir,
                self.node_id,
                segment_seconds=self.segment_seconds,
                on_error=self._trace_failed,
            )
            self.trace.node_event(self.wall(), "up", self.role)
            self.trace.event(
                self.wall(),
                "net.listen",
                {"address": format_id(self.node_id), "stack": self.spec.name, "role": self.role},
            )
        # net_sent only records sent frames in the trace
        self.transport.report_sent = self.trace is not None and self.trace_messages
        self.started = True
        self._housekeeping = loop.call_later(0.5, self._housekeep)
        if memory is not None:
            missed = self._missed(memory)
            for topic, filter_ in sorted(memory.subscriptions.items()):
                try:
                    self.subscribe(topic, filter_, missed)
                except (PermissionError, InvalidCommand) as error:
                    self.events.event("net.store", {"resubscribe": topic, "error": str(error)})
        if boot:
            try:
                self.boot()
            except InvalidCommand:
                await self.close()
                raise

    def _open_store(self) -> Remembered | None:
        """Open the data directory (UserError for one it must refuse) and take what it
        remembers: the port a ``HOST:0`` listen had, the contacts when none are given, the
        ids delivered in the last life; the subscriptions are taken once the node is up."""
        if self.data_dir is None:
            return None
        self.store = Store(self.data_dir, clock=self.wall)
        memory = self.store.remembered()
        host, port = self.listen_address
        if port == 0 and memory.address is not None:
            old_host, old_port = memory.address.rsplit(":", 1)
            if old_host == host:
                self.listen_address = (host, int(old_port))
        if not self.contacts and memory.contacts:
            self.contacts = memory.contacts
        self._delivered_before = memory.delivered
        return memory

    def _restore_retained(self, memory: Remembered) -> None:
        """The topic history the node retained in its last life, back in its retentions
        (each publication's wall time on this life's clock), then journaled from now on."""
        node = self._node()
        for topic, item in memory.retained:
            t = item.t - self._epoch0 if isinstance(item.t, float) else item.t
            try:
                node.restore_retained(topic, dataclasses.replace(item, t=t))
            except ValueError as error:
                raise UserError(
                    f"{self.data_dir}: the topic history kept there cannot be {self.spec.name}'s "
                    f"({error}); move node.db away to start with an empty memory"
                ) from None
        node.keep_retained(self._journal)

    def _missed(self, memory: Remembered) -> HistoryRequest | None:
        """What a node started again on its data directory asks of its topics' history when
        it resubscribes: everything since its last delivery (and RESTART_SLACK before it, for
        what it had received but not yet committed), at most DELIVERED_SECONDS back, the
        window in which it remembers what it delivered, so a replayed copy of one of those is
        refused, never delivered twice. None on a stack that keeps no history, or for a node
        that never delivered (it cannot tell what it missed)."""
        if not self.spec.history or memory.last_delivery is None:
            return None
        gap = self.wall() - memory.last_delivery + RESTART_SLACK
        return HistoryRequest(seconds=min(max(gap, RESTART_SLACK), DELIVERED_SECONDS))

    def boot(self, contacts: Sequence[NodeId] | None = None) -> None:
        """Hand the protocol its Start command (once); :class:`InvalidCommand` if the stack
        says this role cannot work with these contacts (``StackSpec.start_problem``)."""
        if self.booted:
            return
        if contacts is not None:
            self.contacts = tuple(contacts)
        check = self.spec.start_problem
        problem = None if check is None else check(self.role, self.contacts, self.node_id)
        if problem is not None:
            raise InvalidCommand(f"{self.spec.name}: {problem}")
        self.booted = True
        self.dispatch(Start(self.contacts, wall=self.wall(0.0)))
        early, self._early = self._early, []
        for event in early:
            self.dispatch(event)

    async def close(self, *, leave: bool = False, linger: float = 2.0) -> None:
        """Stop the node. With ``leave``, run the stack's leave protocol first and wait (up to
        ``linger`` seconds) until the node has no subscriptions left or the time is up."""
        if self.closed or not self.started:
            self.closed = True
            return
        if leave and self.booted:
            self.leave()
            deadline = self.now() + linger
            minimum = self.now() + min(0.3, linger)
            while self.now() < deadline:
                if self.now() >= minimum and not list(self._node().subscriptions()):
                    break
                await asyncio.sleep(0.05)
        self.closed = True
        self.net_room()  # a waiting publication is refused now, not when its time is up
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        assert self.transport is not None
        await self.transport.close(graceful=True, timeout=0.5)
        if self.store is not None:
            self._commit()  # the deliveries it held reach the application and the trace
        if self.trace is not None:
            end = self.wall()
            for topic, (t_start, filter_) in sorted(self.subscribed.items()):
                self.trace.subscription(topic, t_start, None, filter_)
            self.trace.node_event(end, "stop", self.role)
            self.trace.close()
        if self.store is not None:
            # last: closing folds the write-ahead log into the database, which can take a
            # while on a loaded disk; a node stopped during it has its trace already
            self.store.close()

    # ------------------------------------------------------------------ commands
    def subscribe(
        self,
        topic: str,
        filter: Mapping[str, Any] | None = None,
        history: HistoryRequest | None = None,
    ) -> None:
        """Subscribe to ``topic``; a PermissionError if the ACL does not let this node, an
        :class:`InvalidCommand` for a filter on a topic-based stack or an invalid filter, or
        for a ``history`` request on a stack that keeps no history (:meth:`check_history`).
        ``history``: the topic's retained past too, delivered marked ``replayed``."""
        self.admission.check_topic(topic)
        self.admission.check_filter(filter)
        self.check_history(history)
        self.admission.permitted("subscribe", topic)
        if topic not in self.subscribed:
            self.subscribed[topic] = (self.wall(), filter)
        if self.store is not None:
            self.store.subscribed(topic, filter)
            self._schedule_commit()
        self.dispatch(Subscribe(topic, filter, history))

    def check_history(self, history: HistoryRequest | None) -> None:
        """Raise :class:`InvalidCommand` for a history request this node's stack cannot serve
        (``StackSpec.history`` empty): refused where it is made, never ignored."""
        if history is not None and not self.spec.history:
            raise InvalidCommand(f"subscribe: stack {self.spec.name} keeps no topic history")

    def unsubscribe(self, topic: str) -> None:
        started = self.subscribed.pop(topic, None)
        if started is not None and self.trace is not None:
            self.trace.subscription(topic, started[0], self.wall(), started[1])
        if self.store is not None:
            self.store.unsubscribed(topic)
            self._schedule_commit()
        self.dispatch(Unsubscribe(topic))

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        pub_id: int | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> int:
        """Publish ``payload`` on ``topic``; returns the publication id (63 random bits unless
        given; with signed publications always drawn here, bound to this node: a ValueError
        if one is given). :class:`InvalidCommand` for attributes on a topic-based stack or
        attributes that are not names to strings or finite numbers."""
        self.admission.check_publication(topic, payload, attributes)
        if self.verifier is not None:
            if pub_id is not None:
                raise ValueError(
                    "publications are signed: their ids are drawn by the publishing node, "
                    "bound to its identity (publish without an id)"
                )
            pub_id = self.verifier.signer.new_pub_id()
        elif pub_id is None:
            pub_id = secrets.randbits(63)
        self.published += 1
        if self.trace is not None:
            self.trace.publication(pub_id, topic, self.wall(), len(payload), attributes)
        self.dispatch(Publish(topic, pub_id, payload, attributes))
        return pub_id

    def room(self, topic: str, payload: bytes) -> str | None:
        """Why a publication of ``payload`` on ``topic`` has no room now, or None if it has
        (:meth:`Admission.room`)."""
        return self.admission.room(topic, payload)

    async def wait_for_room(self, topic: str, payload: bytes, timeout: float | None) -> None:
        """Return once a publication of ``payload`` on ``topic`` has room (:meth:`room`), the
        node closes, or ``timeout`` seconds (None: no limit) have passed. Nothing polls: the
        check runs again each time room may have appeared (:meth:`net_room`)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.closed and self.room(topic, payload) is not None:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self.room_waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except TimeoutError:
                return
            finally:
                if not waiter.done():
                    waiter.cancel()

    def net_room(self) -> None:
        """Room may have appeared (a queue drained, a connection went away, the stack or the
        application let go of something, the node closed): every waiting publication looks
        again."""
        waiters, self.room_waiters = self.room_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def offer(
        self,
        topic: str,
        payload: bytes,
        *,
        pub_id: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        waited: float = 0.0,
    ) -> Receipt:
        """:meth:`publish` if there is room (:meth:`room`), else a refused receipt, counted.
        This is ``Congestion.DROP``; for BLOCK, :meth:`pubmesh.Node.publish` waits for room
        first (``waited``: how long, for the receipt)."""
        reason = self.admission.offered(topic, payload, attributes)
        if reason is not None:
            return Receipt(None, False, reason, waited)
        pub_id = self.publish(topic, payload, pub_id=pub_id, attributes=attributes)
        return Receipt(pub_id, True, waited=waited)

    @property
    def max_publication(self) -> int:
        """Bytes a publication (payload, topic and attributes) may take at most."""
        return self.admission.max_publication

    def check_attributes(self, attributes: Mapping[str, Any] | None) -> None:
        """Raise :class:`InvalidCommand` for attributes this node would refuse at publish."""
        self.admission.check_attributes(attributes)

    def leave(self) -> None:
        t = self.wall()
        if self.trace is not None:
            for topic, (t_start, filter_) in sorted(self.subscribed.items()):
                self.trace.subscription(topic, t_start, t, filter_)
            self.trace.node_event(t, "leave", self.role)
        self.subscribed.clear()
        self.dispatch(Leave())

    def command(self, command: Command) -> None:
        """Any protocol command, for callers that build them."""
        match command:
            case Subscribe(topic=topic, filter=filter_, history=history):
                self.subscribe(topic, filter_, history)
            case Unsubscribe(topic=topic):
                self.unsubscribe(topic)
            case Publish(topic=topic, pub_id=pub_id, payload=payload, attributes=attributes):
                self.publish(topic, payload, pub_id=pub_id, attributes=attributes)
            case Leave():
                self.leave()
            case Start(contacts=contacts):
                self.boot(contacts)

    # ------------------------------------------------------------------ the one entry point
    def _node(self) -> StackNode:
        node = self.node
        if node is None:
            raise RuntimeError("the node has not started (await start() first)")
        return node

    def dispatch(self, event: Input) -> None:
        """Hand ``event`` to the protocol and carry out what it returns."""
        if self.closed:
            return
        if not self.booted and not isinstance(event, Start):
            # a peer reached us before our Start (a cluster boots nodes one by one): keep the
            # input for after Start, as the simulator's ordering would have it
            if len(self._early) < EARLY_INPUT_LIMIT:
                self._early.append(event)
            return
        node = self._node()
        now = self.now()
        try:
            outputs = node.handle(event, now)
        except Exception as error:
            self._handler_error(type(event).__name__, error)
            return
        self._apply(outputs, now)
        if self.room_waiters:  # the stack's caches shrink only while it handles an input
            self.net_room()

    def _handler_error(self, input_name: str, error: Exception) -> None:
        self.handler_errors += 1
        log.exception("%s: handler error on %s", format_id(self.node_id), input_name)
        self.events.event(
            "handler-error", {"input": input_name, "error": f"{type(error).__name__}: {error}"}
        )

    def _apply(self, outputs: list[Output], now: float) -> None:
        transport = self.transport
        assert transport is not None and self._loop is not None
        for out in outputs:
            cls = type(out)
            if cls is Send:
                assert isinstance(out, Send)
                if out.dst == self.node_id:
                    self._loop.call_soon(self._loopback, out.message, self.wall(now))
                elif self.verifier is not None and carries_payload(out.message):
                    self.admission.send_publication(out.dst, out.message, self.wall(now))
                else:
                    transport.send(out.dst, out.message, self.wall(now))
            elif cls is SetTimer:
                assert isinstance(out, SetTimer)
                # no handle is kept: timers cannot be cancelled, and after close() a firing
                # timer finds the node closed and does nothing
                self._loop.call_later(max(0.0, out.after), self._fire, out.timer)
            elif cls is Deliver:
                assert isinstance(out, Deliver)
                self._deliver(out, now)
            elif cls is Disconnect:
                assert isinstance(out, Disconnect)
                self._release.add(out.peer)
                if not self._release_scheduled:
                    self._release_scheduled = True
                    self._loop.call_soon(self._release_peers)
            elif cls is TraceRecord:
                assert isinstance(out, TraceRecord)
                if out.kind == MISWIRED:
                    # a stack found a peer started with a configuration that cannot work with
                    # ours (brokertree: another broker list): an operator's mistake, said once
                    peer = format_id(out.detail["peer"])
                    log.error("%s: %s", peer, out.detail["problem"], extra={EVENT_LOGGED: MISWIRED})
                if self.trace is not None:
                    self.trace.event(self.wall(now), out.kind, out.detail)
                for callback in self.event_callbacks:
                    callback(out.kind, out.detail)
            else:
                raise TypeError(f"unknown output {out!r}")
        if self._journal:  # what the stack retained reaches the data directory
            self._schedule_commit()

    def _fire(self, timer: Timer) -> None:
        """``dispatch(TimerFired(timer))`` without the wrapper: ``node.fire``, the route the
        simulator takes too (StackNode.fire must behave exactly as handle does)."""
        if self.closed or not self.booted:
            self.dispatch(TimerFired(timer))
            return
        node = self._node()
        now = self.now()
        try:
            outputs = node.fire(timer, now)
        except Exception as error:
            self._handler_error("TimerFired", error)
            return
        self._apply(outputs, now)

    def _loopback(self, message: Message, t_send: float) -> None:
        if self.trace is not None and self.trace_messages:
            size = message.wire_size()
            self.trace.message(t_send, self.wall(), self.node_id, self.node_id, message, size)
        self.dispatch(Receive(self.node_id, message))

    def _deliver(self, out: Deliver, now: float) -> None:
        verifier = self.verifier
        if verifier is not None and not verifier.first_delivery(out.pub_id):
            # a replay within the window that the stack's duplicate filter had forgotten
            # (pubmesh.net.signing, fresh signatures): never delivered twice
            self.admission.forged["replayed"] += 1
            return
        t = self.wall(now)
        store = self.store
        if store is not None:
            if out.pub_id in self._delivered_before:
                # delivered in the node's last life: its record outlived the stack's filter
                self.duplicates_across_lives += 1
                return
            # handed over once its record is committed (the next loop turn, one transaction
            # for every delivery of the turn): killed at any moment, the node either has the
            # record or never delivered it
            store.delivered(out.pub_id, t)
            self._held.append((out, t))
            self._schedule_commit()
            return
        self._hand_over(out, t)

    def _commit(self) -> None:
        """The store's group commit, then the deliveries it held. A failed write (a full
        disk) is said once and the deliveries go on: the node serves from memory."""
        self._commit_scheduled = False
        store = self.store
        if store is None:
            return
        journal = self._journal
        if journal:
            wall = self._epoch0
            for retention, item in journal:
                store.retained(retention, item, wall + item.t)
            journal.clear()
        if self.node is not None:
            state = self.node.durable()
            if state or self._state_text:
                text = json.dumps(state, sort_keys=True)
                if text != self._state_text:
                    store.set_state(text)
                    self._state_text = text
        if not store.commit() and store.problem != self._store_problem:
            self.events.event(
                "net.store",
                {"file": str(store.path), "error": store.problem, "failures": store.failures},
            )
        self._store_problem = store.problem
        held, self._held = self._held, []
        for out, t in held:
            self._hand_over(out, t)

    def _schedule_commit(self) -> None:
        if self.store is not None and not self._commit_scheduled and self._loop is not None:
            self._commit_scheduled = True
            self._loop.call_soon(self._commit)

    def _hand_over(self, out: Deliver, t: float) -> None:
        self.deliveries += 1
        self.delivered_by_topic[out.topic] += 1
        if self.trace is not None:
            self.trace.delivery(out.pub_id, t, out.hops)
        if self.delivery_callbacks:
            for callback in list(self.delivery_callbacks):
                try:
                    callback(out, t)
                except Exception:
                    log.exception("delivery callback failed")

    def _release_peers(self) -> None:
        self._release_scheduled = False
        if self.closed:
            return
        monitored = self.net_monitored()
        transport = self.transport
        assert transport is not None
        for peer in sorted(self._release):
            if peer not in monitored:
                transport.release(peer)
        self._release.clear()

    def _read_revocations(self) -> None:
        """(Re)read ``--revocations FILE`` if it changed since the last read; a newer list is
        taken and sent on to every peer (Transport.adopt_revocations). A file that cannot be
        read or does not verify keeps the list we have, said once per change."""
        path, transport = self.revocations_file, self.transport
        if path is None or transport is None:
            return
        try:
            info = path.stat()
        except OSError:
            return
        seen = (info.st_mtime, info.st_size)
        if seen == self._revocations_seen:
            return
        self._revocations_seen = seen
        try:
            blob = path.read_bytes()
        except OSError as error:
            self.events.event("net.revocations", {"file": str(path), "error": str(error)})
            return
        if transport.adopt_revocations(blob, None):
            revocations = transport.revocations
            assert revocations is not None
            self.events.event(
                "net.revocations",
                {
                    "file": str(path),
                    "issued": revocations.issued,
                    "revoked": len(revocations.serials),
                },
            )

    def _housekeep(self) -> None:
        if self.closed:
            return
        assert self._loop is not None
        if self.revocations_file is not None and self.now() - self._revocations_checked >= 1.0:
            self._revocations_checked = self.now()
            self._read_revocations()
        if self.trace is not None:
            now = self.now()
            if self.snapshot_interval > 0 and now >= self._next_snapshot:
                self._next_snapshot = now + self.snapshot_interval
                with contextlib.suppress(Exception):
                    self.trace.snapshot(self.wall(now), list(self._node().snapshot()))
            self.trace.tick(self.wall(now))
        self._housekeeping = self._loop.call_later(0.25, self._housekeep)

    def hold_unsigned(self, dst: NodeId, message: Message, t: float) -> None:
        """A copy of this node's own publication, not signed yet, for ``dst``: it goes out at
        the end of this loop turn, when every publication of the turn is signed together."""
        self._unsigned.append((dst, message, t))
        if not self._sign_scheduled:
            assert self._loop is not None
            self._sign_scheduled = True
            self._loop.call_soon(self._sign_held)

    def _sign_held(self) -> None:
        """Sign the turn's own publications as one batch (a lone one is a batch of one, so
        no latency is added: Merkle batches in pubmesh.net.signing), then send their copies."""
        self._sign_scheduled = False
        held, self._unsigned = self._unsigned, []
        verifier = self.verifier
        if self.closed or verifier is None:
            return
        verifier.sign_batch([message for _dst, message, _t in held])
        for dst, message, t in held:
            self.admission.send_publication(dst, message, t)

    # ------------------------------------------------------------------ transport owner
    def net_receive(
        self, src: NodeId, message: Message, t_send: float, size: int, signed: Signed | None
    ) -> None:
        """A message from ``src``: ``node.receive``, the wrapper-free route of ``dispatch``.
        With signed publications, a copy of a publication is verified first; a forgery goes
        no further (pubmesh.net.signing)."""
        if self.verifier is not None and carries_payload(message):
            if not self.admission.received(src, message, signed):
                return
        elif self.acl is not None and not self.admission.may_name(src, message):
            return
        if self.trace is not None and self.trace_messages:
            self.trace.message(t_send, self.wall(), src, self.node_id, message, size)
        if self.closed or not self.booted:
            self.dispatch(Receive(src, message))
            return
        node = self._node()
        now = self.now()
        try:
            outputs = node.receive(src, message, now)
        except Exception as error:
            self._handler_error("Receive", error)
            return
        self._apply(outputs, now)

    def net_sent(self, dst: NodeId, message: Message, t_send: float, size: int) -> None:
        if self.trace is not None and self.trace_messages:
            self.trace.message(t_send, None, self.node_id, dst, message, size)

    def net_dropped(self, dst: NodeId, message: Message, t_send: float, reason: str) -> None:
        if self.trace is not None and self.trace_messages:
            self.trace.message(t_send, None, self.node_id, dst, message, message.wire_size())
        self.events.rate_limited(
            "net.dropped",
            dst,
            reason,
            {
                "peer": dst,
                "address": format_id(dst),
                "reason": reason,
                "type": type(message).__name__,
            },
        )

    def net_lost(self, peer: NodeId) -> None:
        if peer in self.net_monitored():
            self._peer_down(peer, "connection-lost")

    def net_trouble(self, trouble: Trouble, over: bool) -> None:
        self.events.trouble(trouble, over)

    def net_unreachable(self, peer: NodeId, reason: str) -> None:
        self._peer_down(peer, reason)

    def net_slow(self, peer: NodeId, backlog: int, seconds: float) -> None:
        self.events.event(
            "net.slow-peer",
            {
                "peer": peer,
                "address": format_id(peer),
                "queued": backlog,
                "seconds": round(seconds, 3),
                "disconnect_after": self.config.slow_disconnect,
            },
        )

    def _peer_down(self, peer: NodeId, reason: str) -> None:
        self.peer_down_notices += 1
        self.events.event(
            "net.peer-down", {"peer": peer, "address": format_id(peer), "reason": reason}
        )
        self.dispatch(PeerDown(peer))

    def net_rejected(self, peer: NodeId | None, remote: str, reason: str, detail: str) -> None:
        """A frame or connection refused (:meth:`NodeEvents.rejected`)."""
        self.events.rejected(peer, remote, reason, detail)

    def net_monitored(self) -> set[NodeId]:
        node = self.node
        if node is None:
            return set()
        return set(node.monitored_peers())

    # ------------------------------------------------------------------ events and stats
    def _trace_failed(self, message: str) -> None:
        """The trace's first write error (:mod:`pubmesh.net.tracing`): said once, kept off
        the network path."""
        self.events.event("net.trace-error", {"error": message})

    def neighbors(self) -> dict[str, list[NodeId]]:
        """Per topic, the peers the protocol's snapshot names (all layers together); an
        overlay every topic shares (brokertree's broker tree, chord's ring) under
        :data:`EVERY_TOPIC`."""
        out: dict[str, set[NodeId]] = {}
        for row in self._snapshot_rows():
            out.setdefault(row.topic or EVERY_TOPIC, set()).update(row.neighbors)
        return {topic: sorted(ids) for topic, ids in sorted(out.items())}

    def _snapshot_rows(self) -> Iterable[Any]:
        try:
            return list(self._node().snapshot())
        except Exception:
            log.exception("snapshot failed")
            return []

    def statistics(self) -> RuntimeStatistics:
        """Counters for humans: the node shell's ``stats``, the cluster's live table
        (:func:`pubmesh.net.runtime_stats.collect`)."""
        return collect(self)


#: the key of an overlay that every topic shares in :meth:`NodeRuntime.neighbors` (its
#: snapshot rows name no topic)
EVERY_TOPIC = "*"


def _clock_pair(loop: asyncio.AbstractEventLoop) -> tuple[float, float]:
    """A reading of the loop's monotonic clock and of the wall clock at the same instant: the
    wall clock read between two monotonic readings, the closest of a few tries, and paired
    with their midpoint. Read one after the other, a process preempted between the two
    (a loaded machine, ~6 ms seen in CI) maps all its protocol times that much late on the
    wall clock, and its sent messages then seem to arrive before they left."""
    best: tuple[float, float, float] | None = None
    for _ in range(8):
        before = loop.time()
        wall = time.time()
        after = loop.time()
        if best is None or after - before < best[0]:
            best = (after - before, (before + after) / 2, wall)
        if after - before < 1e-4:
            break
    assert best is not None
    return best[1], best[2]
