"""The deterministic discrete-event simulator.

How it works
============
One queue of events ordered by ``(time, sequence)``: the sequence number is a global counter, so
two events at the same instant run in the order they were scheduled and the whole run is a pure
function of the scenario and the seed (SimPy's ``core.py`` uses the same key on a heap; here the
queue is binned by tenths of a millisecond, each bin sorted when the run reaches it, which pops
in the same order as a heap at a fraction of its cost, see :meth:`Simulation._queue`). An event is a
plain tuple ``(t, seq, kind, a, b, c, d)``; the kinds are a message arriving, a timer firing, a
peer-down notice, a command for a node and a scheduled action of the simulator itself (a fault,
a workload step, a snapshot).

The workload is not drawn here: :func:`pubmesh.scenario.workload.plan` turns the scenario into a
timeline of node starts, subscriptions, publications, unsubscriptions and faults with every
random choice made and every victim resolved, the same plan the network cluster runs. The
simulator walks that timeline with a cursor beside the queue: the loop runs the plan's next
event when its time is at or before the queue's first, as if it were queued with a negative
sequence number (its index in the plan minus the plan's length), so at one instant the plan's
events run before anything else (messages, timers, failure notices, snapshots, the ``[init]``
corruption) and in the plan's own order. Each counts as an event processed.

Nodes are stack objects (:class:`pubmesh.stacks.base.StackNode`) driven through their one
entry point ``handle(event, now)``. What they return is applied here:

* ``Send``: a latency is drawn *per message* from the scenario's distribution, so two messages
  on the same link may overtake each other (the papers' asynchronous, non-FIFO model; use a
  constant latency for FIFO links). The message may be lost (``network.loss``) or cut by a
  partition. A send to a crashed node is lost and reported back to the sender as ``PeerDown``
  after ``network.detection_delay``, as a failed TCP connect would be.
* ``SetTimer``: the timer value comes back as ``TimerFired`` after the delay (times
  ``1 + U(-j, j)`` with ``network.timer_jitter = j``). Timers of a node that crashed or was
  replaced by a restart are dropped (each node has an *incarnation* number).
* ``Deliver``: a row in ``deliveries``; ``TraceRecord``: a row in ``events``.

When nodes crash, every live node whose ``monitored_peers()`` holds one of them receives
``PeerDown`` after the detection delay: the simulator's failure detector stands in for lost TCP
connections.

Randomness comes from separate seeded streams (latency/loss, timers, workload, faults,
corruption, and one private stream per node derived from (seed, node id)), so nothing depends on
Python's hash seed or on wall-clock time.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from heapq import heappush
from pathlib import Path
from typing import Any

from pubmesh.durable import DeliveredMemory, retained_now
from pubmesh.proto.core import (
    MESSAGE_INFO,
    Command,
    Deliver,
    Disconnect,
    Leave,
    Message,
    NodeContext,
    NodeId,
    PeerDown,
    Publish,
    Send,
    SetTimer,
    StackNode,
    Start,
    Subscribe,
    TraceRecord,
    Unsubscribe,
    node_random,
    node_seed,
)
from pubmesh.proto.history import Retained
from pubmesh.scenario.model import Scenario
from pubmesh.scenario.workload import (
    PlanEvent,
    WorkloadPlan,
    plan,
)
from pubmesh.sim.actions import ScenarioActions
from pubmesh.sim.fastinit import install as install_fast_init
from pubmesh.sim.sizes import SIZES, size_function
from pubmesh.stacks.base import get_stack
from pubmesh.trace.schema import SCHEMA_VERSION
from pubmesh.trace.writer import TraceWriter

# event kinds (PLAN: the plan's next event, run from the cursor, never queued)
MSG, TIMER, DOWN, CMD, ACTION, PLAN = 0, 1, 2, 3, 4, 5
_NO_MORE = math.inf  # the plan cursor's time once the plan has run out

#: the event queue's time bins per simulated second (see Simulation._queue): with bins of 1 ms
#: the sort of a 10^6-node broadcast's bins missed the cache on every comparison (12 of ~184
#: CPU s in a py-spy profile); a bin of a tenth of that stays in the cache while it is sorted
BINS_PER_SECOND = 10000.0

# stream ids for the simulator's own random streams (node streams use ids ≥ 0; the workload
# planner's streams are -3, -4, -6 and -7, see pubmesh.scenario.workload)
_NET, _TIMERS, _CORRUPT, _WARM = -1, -2, -5, -8


def run_id_for(scenario: Scenario) -> str:
    import hashlib

    digest = hashlib.sha256(scenario.text.encode()).hexdigest()[:8]
    return f"{scenario.run.name}-{scenario.run.stack}-s{scenario.run.seed}-{digest}"


class Simulation:
    """One simulated run of a scenario. See the module docstring for the model."""

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path | str | None = None,
        *,
        keep_deliveries: bool = True,
        progress: Callable[[Simulation], None] | None = None,
        progress_every: int = 50_000,
    ) -> None:
        self.scenario = scenario
        self.spec = get_stack(scenario.run.stack)
        install_fast_init()  # the stack's messages are registered now (pubmesh.sim.fastinit)
        self.params = scenario.stack_params
        seed = scenario.run.seed
        self.seed = seed
        self.run_id = run_id_for(scenario)
        self.now = 0.0
        self.events_processed = 0
        self.messages_sent = 0
        self.messages_lost = 0
        #: why they were lost: the receiver not running (not started yet, crashed or left;
        #: a message already on its way when it went counts here too), a partition between
        #: the two, the network's random ``loss``
        self.lost_not_running = 0
        self.lost_partition = 0
        self.lost_network = 0
        self.deliveries: list[tuple[int, int, float, int]] = []
        self.delivery_count = 0
        #: the simulated time of the latest delivery (None before the first): how long the
        #: run's publications took to arrive, which a fixed run window may far outlast
        self.last_delivery: float | None = None
        self.keep_deliveries = keep_deliveries
        #: why the run was stopped before its end (:meth:`request_stop`), or None
        self.stopped: str | None = None
        self._progress = progress
        self._progress_every = progress_every

        #: the event queue (see _queue): future events by time bin, the bins' numbers in a
        #: heap, and the current bin's events sorted last-first
        self._bins: dict[int, list[tuple[Any, ...]]] = {}
        self._bin_keys: list[int] = []
        self._current: list[tuple[Any, ...]] = []
        self._current_bin = -1
        self._seq = 0
        self._net_rng = random.Random(node_seed(seed, _NET))
        self._timer_rng = random.Random(node_seed(seed, _TIMERS))
        self._corrupt_rng = random.Random(node_seed(seed, _CORRUPT))

        #: live nodes by id (crashed nodes are removed; a recovered node is a new object)
        self.nodes: dict[NodeId, StackNode] = {}
        self.alive: set[NodeId] = set()
        self.crashed: set[NodeId] = set()
        self.left: set[NodeId] = set()
        self.incarnation: dict[NodeId, int] = {}
        #: with a durable recover in the scenario, every node's delivered ids, and for a node
        #: recovered durably the ids of its last life it does not deliver again
        #: (pubmesh.durable); copies of those refused so far
        self._durable = any(f.durable for f in scenario.faults)
        self._delivered: dict[NodeId, DeliveredMemory] = {}
        self._before: dict[NodeId, frozenset[int]] = {}
        self.duplicates_across_lives = 0
        #: the stack's durable() state of each crashed node, for a durable recover
        self._kept: dict[NodeId, dict[str, Any]] = {}
        #: the topic history each crashed node retained, for a durable recover
        self._kept_retained: dict[NodeId, list[tuple[str, Retained]]] = {}
        #: the workload, planned (pubmesh.scenario.workload); the simulator runs its events in order
        with _no_collections():
            self.plan: WorkloadPlan = plan(scenario)
        self._plan_events: tuple[PlanEvent, ...] = self.plan.events
        #: the plan cursor: the index of the plan's next event and its time
        self._plan_index = 0
        self._plan_t = self._plan_events[0].t if self._plan_events else _NO_MORE
        #: plan events a warm start made no-ops (a byte per plan event; see
        #: ScenarioActions.warm_start)
        self._warm_skip: bytearray | None = None
        self.roles: dict[NodeId, str] = dict(self.plan.roles)
        self.contacts = self.plan.contacts
        self.next_node_id = scenario.run.nodes
        #: workload topics of every node (churn joins included)
        self.node_topics: dict[NodeId, list[str]] = {
            node: list(topics) for node, topics in self.plan.topics.items()
        }
        #: live subscriptions: (node, topic) -> t_start, and per topic the subscribers
        self._subscribed: dict[tuple[NodeId, str], float] = {}
        self._sub_filters: dict[tuple[NodeId, str], Any] = {}
        self.topic_subscribers: dict[str, set[NodeId]] = {}
        self._pending_down: set[tuple[NodeId, NodeId]] = set()
        self._partition: dict[NodeId, int] | None = None

        net = scenario.network
        self._loss = net.loss
        self._detection = net.detection_delay
        self._jitter = net.timer_jitter
        self._latency = _latency_sampler(scenario, self._net_rng)
        #: a uniform latency's (min, max - min, draw), for _apply to draw it inline
        self._uniform = _uniform_latency(scenario, self._net_rng)

        self.writer: TraceWriter | None = None
        if run_dir is not None:
            # the runs row is written by close(), once the run's length is known
            self.writer = TraceWriter(run_dir, self.run_id, messages_mode=scenario.trace.messages)
        #: the warm start, the plan's events, the corruption and the snapshots (pubmesh.sim.actions)
        self._actions = ScenarioActions(self)
        self._schedule_start()

    # ------------------------------------------------------------------ scheduling
    def _push(
        self, t: float, kind: int, a: Any = None, b: Any = None, c: Any = None, d: Any = None
    ) -> None:
        self._seq += 1
        self._queue((t, self._seq, kind, a, b, c, d))

    def _queue(self, entry: tuple[Any, ...]) -> None:
        """Put an event on the queue. Events are kept in bins of 1/BINS_PER_SECOND s: a bin is
        sorted once when the run reaches it, and popped from its end (the queue holds it sorted
        last-first). The order is the heap order exactly, ``(time, sequence)``; what changes is
        the cost: a push is a dict look-up and an append, a pop a list pop, where a heap of
        10^4-10^7 events compared tuples along a path of 14-24 levels per pop. An event for the
        bin being run (a zero-delay timer, a plan event at the current instant, a past time
        given to :meth:`at`) is inserted into it in order."""
        k = int(entry[0] * BINS_PER_SECOND)
        if k > self._current_bin:
            bin_ = self._bins.get(k)
            if bin_ is None:
                self._bins[k] = [entry]
                heappush(self._bin_keys, k)
            else:
                bin_.append(entry)
        else:
            _insert_last_first(self._current, entry)

    def pending_events(self) -> list[tuple[Any, ...]]:
        """Every queued event, in the order they will run (for tests and oracles); the plan's
        next event is among them as ``(t, index - len(plan), PLAN, index, None, None, None)``."""
        events = self._current[::-1]
        for k in sorted(self._bins):
            events.extend(sorted(self._bins[k]))
        index = self._plan_index
        if index < len(self._plan_events):
            entry = (self._plan_t, index - len(self._plan_events), PLAN, index, None, None, None)
            events.insert(bisect.bisect(events, entry[:2], key=lambda e: e[:2]), entry)
        return events

    def _open_next_bin(self) -> list[tuple[Any, ...]]:
        k = heapq.heappop(self._bin_keys)
        current = self._bins.pop(k)
        current.sort(reverse=True)
        self._current = current
        self._current_bin = k
        return current

    def at(self, t: float, action: Callable[..., None], *args: Any) -> None:
        """Schedule a simulator action (fault, workload step, snapshot) at time ``t``."""
        self._push(t, ACTION, action, args)

    def _schedule_start(self) -> None:
        s = self.scenario
        if s.init.overlay == "warm":
            with _no_collections():
                self._actions.warm_start(random.Random(node_seed(self.seed, _WARM)))
        if s.init.corruption != "none":
            last_start = max(self.plan.starts.values())
            self.at(last_start + s.workload.subscribe_at, self._actions.corrupt)
        if s.trace.snapshot_interval > 0:
            self.at(0.0, self._actions.snapshot)

    # ------------------------------------------------------------------ node lifecycle
    def _create(self, node: NodeId) -> StackNode:
        incarnation = self.incarnation.get(node, -1) + 1
        self.incarnation[node] = incarnation
        rng = node_random(self.seed, node, incarnation)
        ctx = NodeContext(
            node_id=node, rng=rng, role=self.roles.get(node, "peer"), params=self.params
        )
        obj = self.spec.create(ctx)
        self.nodes[node] = obj
        self.alive.add(node)
        self.crashed.discard(node)
        return obj

    def _start_node(
        self,
        node: NodeId,
        event: str = "up",
        restore: dict[str, Any] | None = None,
        retained: Iterable[tuple[str, Retained]] = (),
    ) -> None:
        """Boot ``node`` now (its workload subscriptions are events of the plan), with
        ``restore`` and ``retained``: its last life's durable state and topic history (a
        durable recover)."""
        obj = self._create(node)
        if restore:
            obj.restore(restore)
        for topic, item in retained:
            obj.restore_retained(topic, item)
        if self.writer:
            self.writer.node(node, self.now, event, self.roles.get(node, "peer"))
        self._apply(node, obj.handle(Start(self.contacts), self.now))

    def command(self, node: NodeId, command: Command) -> None:
        """Hand an application command to a live node now (and record it in the trace)."""
        obj = self.nodes.get(node)
        if obj is None:
            return
        now = self.now
        if isinstance(command, Subscribe):
            key = (node, command.topic)
            if key not in self._subscribed:
                self._subscribed[key] = now
                self.topic_subscribers.setdefault(command.topic, set()).add(node)
                self._sub_filters[key] = command.filter
        elif isinstance(command, Unsubscribe):
            self._end_subscription(node, command.topic)
        elif isinstance(command, Publish) and self.writer:
            self.writer.publication(
                command.pub_id, node, command.topic, now, len(command.payload), command.attributes
            )
        self._apply(node, obj.handle(command, now))

    def _end_subscription(self, node: NodeId, topic: str) -> None:
        t_start = self._subscribed.pop((node, topic), None)
        if t_start is None:
            return
        self.topic_subscribers[topic].discard(node)
        filter_ = self._sub_filters.pop((node, topic), None)
        if self.writer:
            self.writer.subscription(node, topic, t_start, self.now, filter_)

    def _end_all_subscriptions(self, node: NodeId) -> None:
        for topic in sorted(t for (n, t) in self._subscribed if n == node):
            self._end_subscription(node, topic)

    def crash(self, nodes: Iterable[NodeId], event: str = "crash") -> None:
        """Crash ``nodes`` now: they stop, their monitors hear of it after the detection delay.
        With a durable recover in the scenario each keeps what its data directory would hold
        (its stack's ``durable()`` state, as last committed: now)."""
        victims = sorted(n for n in set(nodes) if n in self.alive)
        if not victims:
            return
        for node in victims:
            self.alive.discard(node)
            if self._durable:
                self._kept[node] = self.nodes[node].durable()
                self._kept_retained[node] = retained_now(self.nodes[node])
            del self.nodes[node]
            self.crashed.add(node)
            self._end_all_subscriptions(node)
            if self.writer:
                self.writer.node(node, self.now, event, self.roles.get(node, "peer"))
        dead = set(victims)
        when = self.now + self._detection
        for watcher in sorted(self.alive):
            for peer in sorted(p for p in self.nodes[watcher].monitored_peers() if p in dead):
                self._notify_down(watcher, peer, when)

    def leave(self, nodes: Iterable[NodeId]) -> None:
        """Graceful leave: the node runs its stack's leave protocol and stays reachable for it,
        but its life as a subscriber ends now (trace event ``leave``)."""
        for node in sorted(set(nodes) & self.alive):
            if node in self.left:
                continue
            self.left.add(node)
            self._end_all_subscriptions(node)
            if self.writer:
                self.writer.node(node, self.now, "leave", self.roles.get(node, "peer"))
            self._apply(node, self.nodes[node].handle(Leave(), self.now))

    def recover(self, nodes: Iterable[NodeId], *, durable: bool = False) -> None:
        """Restart crashed ``nodes`` with fresh state (a recovered node is a member again, no
        longer counted as left); the plan resubscribes them. ``durable``: they come back with
        what their data directories hold (pubmesh.durable), not delivering again what they
        delivered in their last life."""
        for node in sorted(set(nodes) & self.crashed):
            self.left.discard(node)
            memory = self._delivered.get(node)
            kept = self._kept.pop(node, None)
            retained = self._kept_retained.pop(node, [])
            if durable and memory is not None:
                self._before[node] = memory.remembered(self.now)
            else:
                self._before.pop(node, None)
                self._delivered.pop(node, None)
            self._start_node(
                node,
                event="recover",
                restore=kept if durable else None,
                retained=retained if durable else (),
            )

    def _across_lives(self, node: NodeId, pub_id: int, now: float) -> bool:
        """Whether ``node`` delivered ``pub_id`` in a life its data directory remembers (then
        the copy is refused and counted); records the delivery otherwise."""
        before = self._before.get(node)
        if before is not None and pub_id in before:
            self.duplicates_across_lives += 1
            return True
        memory = self._delivered.get(node)
        if memory is None:
            memory = self._delivered[node] = DeliveredMemory()
        memory.record(pub_id, now)
        return False

    def join(self, node: NodeId) -> None:
        """Start a new node now, as a churn join does (scripted experiments: one join at a
        chosen time); it subscribes when it is handed Subscribe commands."""
        self._join(node)

    def _join(self, node: NodeId) -> None:
        """A new node joins (churn): it gets the id the plan gave it."""
        self.next_node_id = max(self.next_node_id, node + 1)
        self._start_node(node)

    def _notify_down(self, watcher: NodeId, peer: NodeId, when: float) -> None:
        key = (watcher, peer)
        if key in self._pending_down:
            return
        self._pending_down.add(key)
        self._push(when, DOWN, watcher, peer, self.incarnation[watcher])

    # ------------------------------------------------------------------ messages
    def inject(
        self, src: NodeId, dst: NodeId, message: Message, delay: float | None = None
    ) -> None:
        """Put a message in flight from ``src`` to ``dst`` (junk messages, tests)."""
        latency = self._latency() if delay is None else delay
        self.messages_sent += 1
        self._push(self.now + latency, MSG, dst, src, message, self.now)

    def _send(self, src: NodeId, dst: NodeId, message: Message) -> None:
        self.messages_sent += 1
        now = self.now
        if dst not in self.alive:
            self.lost_not_running += 1
            self._lost(now, src, dst, message)
            if self._detection >= 0:
                self._notify_down(src, dst, now + self._detection)
            return
        if self._partition is not None and self._partition.get(src) != self._partition.get(dst):
            self.lost_partition += 1
            self._lost(now, src, dst, message)
            if self.scenario.network.partition_notices:
                self._notify_down(src, dst, now + self._detection)
            return
        if self._loss and self._net_rng.random() < self._loss:
            self.lost_network += 1
            self._lost(now, src, dst, message)
            return
        self._seq += 1
        self._queue((now + self._latency(), self._seq, MSG, dst, src, message, now))

    def _lost(self, now: float, src: NodeId, dst: NodeId, message: Message) -> None:
        self.messages_lost += 1
        if self.writer:
            info = MESSAGE_INFO[type(message)]
            self.writer.message(
                now,
                None,
                src,
                dst,
                info.name,
                info.layer,
                info.payload,
                message.publication(),
                size_function(type(message))(message),
            )

    def apply(self, node: NodeId, outputs: list[Any]) -> None:
        """Take outputs that a live node returned outside the event loop, from a stack's own
        API called by a script or test (``CliqueNode.search``), as if a handler returned
        them now."""
        if node in self.nodes:
            self._apply(node, outputs)

    def _apply(self, node: NodeId, outputs: list[Any]) -> None:
        # the hot path: a Send to a live node on a clean network goes straight on the queue;
        # anything else (dead peer, partition, loss) takes _send's full rules
        fast = self._partition is None and not self._loss
        alive = self.alive
        bins = self._bins  # every bin in it is after the current one
        latency = self._latency
        uniform = self._uniform
        if uniform is not None:
            lo, span, draw = uniform
        now = self.now
        for out in outputs:
            cls = type(out)
            if cls is Send:
                dst = out.dst
                if fast and dst in alive:
                    self.messages_sent += 1
                    self._seq += 1
                    # the latency sampler's lo + span * random(), inlined (the same draw)
                    t = now + (lo + span * draw()) if uniform is not None else now + latency()
                    entry = (t, self._seq, MSG, dst, node, out.message, now)
                    # _queue, inlined
                    k = int(t * BINS_PER_SECOND)
                    bin_ = bins.get(k)
                    if bin_ is not None:
                        bin_.append(entry)
                    else:
                        self._queue(entry)
                else:
                    self._send(node, dst, out.message)
            elif cls is SetTimer:
                after = out.after
                if self._jitter:
                    after *= 1.0 + self._jitter * (2.0 * self._timer_rng.random() - 1.0)
                self._seq += 1
                self._queue(
                    (now + after, self._seq, TIMER, node, out.timer, self.incarnation[node], None)
                )
            elif cls is Deliver:
                if self._durable and self._across_lives(node, out.pub_id, now):
                    continue
                self.delivery_count += 1
                self.last_delivery = now
                if self.keep_deliveries:
                    self.deliveries.append((out.pub_id, node, now, out.hops))
                if self.writer:
                    self.writer.delivery(out.pub_id, node, now, out.hops)
            elif cls is TraceRecord:
                if self.writer:
                    self.writer.event(now, node, out.kind, out.detail)
            elif cls is Disconnect:
                pass  # no connections to close in the simulator
            else:
                raise TypeError(f"node {node} returned an unknown output {out!r}")

    # ------------------------------------------------------------------ the loop
    def run(self, until: float | None = None) -> None:
        """Process events up to time ``until`` (default: the scenario's duration), or until a
        stop is requested (:meth:`request_stop`): then ``now`` is the last event's time."""
        end = self.scenario.run.duration if until is None else until
        self._loop(end, None)
        if self.stopped is None:
            self.now = max(self.now, end)

    def request_stop(self, reason: str) -> None:
        """Ask the loop to stop early, e.g. from a signal handler (a Ctrl-C, a CPU limit). It
        stops between two events at its next periodic check (every ``progress_every``
        events), so the state and the trace so far stay whole; :meth:`close` then writes the
        trace up to that time."""
        self.stopped = reason

    def run_until(self, predicate: Callable[[Simulation], bool], limit: float) -> bool:
        """Run until ``predicate(self)`` holds (checked after every event) or time ``limit``."""
        if predicate(self):
            return True
        return self._loop(limit, predicate)

    def _loop(self, end: float, predicate: Callable[[Simulation], bool] | None) -> bool:
        # No collections in the loop (see _no_collections): a run allocates millions of
        # messages that reference counting frees, and what survives (the state a broadcast
        # leaves at every node, the events in flight) makes no cycles; with the collector on,
        # the gen-0 passes walk those survivors, and a full one now and then everything
        # made since the run began (4.7 of 61 CPU s at 400,000 warm gossip nodes). The stacks
        # make no cyclic garbage in a run (tests/sim/test_sim_engine.py); cycles a stack did make
        # would be collected after the run.
        with _no_collections():
            return self._run_loop(end, predicate)

    def _run_loop(self, end: float, predicate: Callable[[Simulation], bool] | None) -> bool:
        nodes = self.nodes
        incarnation = self.incarnation
        apply = self._apply
        writer = self.writer
        full_trace = writer is not None and writer.messages_mode == "full"
        counts = writer is not None and not full_trace
        kinds: dict[type[Message], int] = {}
        if counts and writer is not None:  # writer.count's appends, inlined (refetched on flush)
            kinds = _message_kinds(writer)
            c_st, c_sn, c_sk, c_ss, c_rt, c_rn, c_rk = writer.count_appends()
        sizes = SIZES
        progress = self._progress
        every = self._progress_every
        processed = self.events_processed
        current = self._current
        plan_t = self._plan_t
        plan_k = _bin_of(plan_t)
        bin_keys = self._bin_keys
        while True:
            # a bin is opened when the plan's next event is not before it: a bin opened early
            # would take every event the plan's event makes before the bin into the bin's
            # sorted list one insertion at a time
            if not current and bin_keys and bin_keys[0] <= plan_k:
                current = self._open_next_bin()
            if current and current[-1][0] < plan_t:  # the plan goes first at one instant
                if current[-1][0] > end:
                    break
                t, _seq, kind, a, b, c, d = current.pop()
            elif plan_t > end or plan_t == _NO_MORE:
                break
            else:
                t, kind = plan_t, PLAN
            self.now = t
            processed += 1
            if kind == MSG:
                node = nodes.get(a)
                if writer is not None:
                    cls = type(c)
                    size_of = sizes.get(cls)
                    size = size_of(c) if size_of is not None else size_function(cls)(c)
                    if counts:
                        k = kinds[cls]
                        if node is not None:
                            c_st(d)
                            c_sn(b)
                            c_sk(k)
                            c_ss(size)
                            c_rt(t)
                            c_rn(a)
                            c_rk(k)
                        else:
                            writer.count(d, None, b, a, k, size)
                    else:
                        info = MESSAGE_INFO[cls]
                        writer.message(
                            d,
                            t if node is not None else None,
                            b,
                            a,
                            info.name,
                            info.layer,
                            info.payload,
                            c.publication(),
                            size,
                        )
                if node is None:
                    self.messages_lost += 1
                    self.lost_not_running += 1
                    continue
                apply(a, node.receive(b, c, t))
            elif kind == TIMER:
                if incarnation.get(a) != c or a not in nodes:
                    continue
                apply(a, nodes[a].fire(b, t))
            elif kind == DOWN:
                self._pending_down.discard((a, b))
                if incarnation.get(a) != c or a not in nodes:
                    continue
                apply(a, nodes[a].handle(PeerDown(b), t))
            elif kind == CMD:
                if incarnation.get(a) != c or a not in nodes:
                    continue
                self.command(a, b)
            elif kind == PLAN:
                plan_t = self._run_planned()
                plan_k = _bin_of(plan_t)
            else:
                a(*b)
            if processed % every == 0:
                self.events_processed = processed
                if writer is not None:
                    writer.advance(t)
                    if counts:
                        c_st, c_sn, c_sk, c_ss, c_rt, c_rn, c_rk = writer.count_appends()
                if progress is not None:
                    progress(self)
                if self.stopped is not None:
                    break
            if predicate is not None and predicate(self):
                self.events_processed = processed
                return True
        self.events_processed = processed
        return False

    # ------------------------------------------------------------------ the plan
    def _run_planned(self) -> float:
        """Run the plan's next event and move the cursor on; returns the next one's time."""
        events = self._plan_events
        index = self._plan_index
        self._plan_index = index + 1
        self._plan_t = events[index + 1].t if index + 1 < len(events) else _NO_MORE
        if self._warm_skip is None or not self._warm_skip[index]:
            self._actions.planned(events[index])
        return self._plan_t

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """Write open subscriptions and flush the trace."""
        if self.writer is None or self.writer.closed:
            return
        run = self.scenario.run
        self.writer.run(
            stack=run.stack,
            runtime="sim",
            nodes=run.nodes,
            seed=self.seed,
            scenario=self.scenario.text,
            # a stopped run's length is the time it reached, so rates over it stay right
            duration=run.duration if self.stopped is None else self.now,
            schema_version=SCHEMA_VERSION,
        )
        with _no_collections():
            for (node, topic), t_start in sorted(self._subscribed.items()):
                self.writer.subscription(
                    node, topic, t_start, None, self._sub_filters.get((node, topic))
                )
            self.writer.close()


def _bin_of(t: float) -> float:
    """The queue bin of time ``t`` (infinity for the plan cursor's end: after every bin)."""
    return t if t == _NO_MORE else int(t * BINS_PER_SECOND)


def _insert_last_first(events: list[tuple[Any, ...]], entry: tuple[Any, ...]) -> None:
    """Insert ``entry`` into ``events``, sorted by (time, sequence) from last to first."""
    lo, hi = 0, len(events)
    while lo < hi:
        mid = (lo + hi) // 2
        if events[mid] < entry:
            hi = mid
        else:
            lo = mid + 1
    events.insert(lo, entry)


@contextmanager
def _no_collections() -> Iterator[None]:
    """No garbage collection for a stretch that only builds objects which live on (the
    plan, a warm-started overlay, the state a run leaves at the nodes), are freed by
    reference counting (a run's messages) or are written out and dropped whole (the trace's
    last rows at close). With the collector on, such a stretch of a large run triggers full
    collections that walk every object of the run, again and again, and free nothing: at
    500,000 warm gossip nodes close took 21.4 CPU s with them and 7.7 without. Nothing the
    collector does is visible in the trace."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            # What the stretch built is counted as young: re-enabled as it is, the collector
            # would walk all of it at the next allocation (2.3 of 20 CPU s of a 300,000-node
            # warm start). A freeze and unfreeze move every object to the oldest generation.
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()


def _message_kinds(writer: TraceWriter) -> dict[type[Message], int]:
    """Message class -> the number the counts-mode trace counts it under (its (type name,
    layer, payload) triple's :meth:`TraceWriter.kind_id`)."""
    return {
        cls: writer.kind_id((info.name, info.layer, info.payload))
        for cls, info in MESSAGE_INFO.items()
    }


def _uniform_latency(
    s: Scenario, rng: random.Random
) -> tuple[float, float, Callable[[], float]] | None:
    """A uniform latency as (min, max - min, the draw): ``rng.uniform(lo, hi)`` is
    ``lo + (hi - lo) * rng.random()`` in CPython's random.py, so ``lo + span * draw()`` draws
    the same numbers without a Python-level method call. None for other distributions."""
    lat = s.network.latency
    if lat.dist != "uniform":
        return None
    return lat.min, lat.max - lat.min, rng.random


def _latency_sampler(s: Scenario, rng: random.Random) -> Callable[[], float]:
    lat = s.network.latency
    if lat.dist == "constant":
        value = lat.value
        return lambda: value
    uniform = _uniform_latency(s, rng)
    if uniform is not None:
        lo, span, rand = uniform
        return lambda: lo + span * rand()
    mu, sigma = math.log(lat.median), lat.sigma
    lognorm = rng.lognormvariate
    return lambda: lognorm(mu, sigma)
