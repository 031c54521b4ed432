"""The deterministic discrete-event simulator.

How it works
============
One heap of events keyed ``(time, sequence)``: the sequence number is a global counter, so two
events at the same instant run in the order they were scheduled and the whole run is a pure
function of the scenario and the seed (SimPy's ``core.py`` uses the same key). An event is a
plain tuple ``(t, seq, kind, a, b, c, d)``; the kinds are a message arriving, a timer firing, a
peer-down notice, a command for a node and a scheduled action of the simulator itself (a fault,
a workload step, a snapshot).

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

import heapq
import inspect
import math
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

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
    Receive,
    Send,
    SetTimer,
    StackNode,
    Start,
    Subscribe,
    TimerFired,
    TraceRecord,
    Unsubscribe,
    node_seed,
)
from pubmesh.sim.scenario import Fault, Scenario
from pubmesh.stacks.base import get_stack
from pubmesh.trace.schema import SCHEMA_VERSION
from pubmesh.trace.writer import TraceWriter

# event kinds
MSG, TIMER, DOWN, CMD, ACTION = 0, 1, 2, 3, 4

# stream ids for the simulator's own random streams (node streams use ids ≥ 0)
_NET, _TIMERS, _WORKLOAD, _FAULTS, _CORRUPT = -1, -2, -3, -4, -5


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
        self.params = scenario.stack_params
        seed = scenario.run.seed
        self.seed = seed
        self.run_id = run_id_for(scenario)
        self.now = 0.0
        self.events_processed = 0
        self.messages_sent = 0
        self.messages_lost = 0
        self.deliveries: list[tuple[int, int, float, int]] = []
        self.delivery_count = 0
        self.keep_deliveries = keep_deliveries
        self._progress = progress
        self._progress_every = progress_every

        self._heap: list[tuple[Any, ...]] = []
        self._seq = 0
        self._net_rng = random.Random(node_seed(seed, _NET))
        self._timer_rng = random.Random(node_seed(seed, _TIMERS))
        self._workload_rng = random.Random(node_seed(seed, _WORKLOAD))
        self._fault_rng = random.Random(node_seed(seed, _FAULTS))
        self._corrupt_rng = random.Random(node_seed(seed, _CORRUPT))

        #: live nodes by id (crashed nodes are removed; a recovered node is a new object)
        self.nodes: dict[NodeId, StackNode] = {}
        self.alive: set[NodeId] = set()
        self.crashed: set[NodeId] = set()
        self.left: set[NodeId] = set()
        self.incarnation: dict[NodeId, int] = {}
        self.roles: dict[NodeId, str] = dict(
            self.spec.infrastructure(scenario.run.nodes, self.params)
        )
        self.contacts = tuple(self.spec.contacts(scenario.run.nodes, self.params))
        self.next_node_id = scenario.run.nodes
        #: workload topics of every node, for resubscribing after a recovery
        self.node_topics: dict[NodeId, list[str]] = {}
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

        self.writer: TraceWriter | None = None
        if run_dir is not None:
            self.writer = TraceWriter(run_dir, self.run_id, messages_mode=scenario.trace.messages)
            self.writer.run(
                stack=scenario.run.stack,
                runtime="sim",
                nodes=scenario.run.nodes,
                seed=seed,
                scenario=scenario.text,
                duration=scenario.run.duration,
                schema_version=SCHEMA_VERSION,
            )
        self._schedule_start()

    # ------------------------------------------------------------------ scheduling
    def _push(
        self, t: float, kind: int, a: Any = None, b: Any = None, c: Any = None, d: Any = None
    ) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, a, b, c, d))

    def at(self, t: float, action: Callable[..., None], *args: Any) -> None:
        """Schedule a simulator action (fault, workload step, snapshot) at time ``t``."""
        self._push(t, ACTION, action, args)

    def _schedule_start(self) -> None:
        s = self.scenario
        workload_nodes = [i for i in range(s.run.nodes) if i not in self.roles]
        spread = s.run.start_spread
        starts: dict[NodeId, float] = dict.fromkeys(self.roles, 0.0)
        for node in workload_nodes:
            starts[node] = self._workload_rng.uniform(0.0, spread) if spread > 0 else 0.0
        topics = [f"t{i}" for i in range(s.workload.topics)]
        self._topics = topics
        self._topic_weights = _popularity(s, len(topics))
        for node in workload_nodes:
            self.node_topics[node] = self._draw_topics()
        # infrastructure first, then the rest in start order (ties by id)
        for node in sorted(starts, key=lambda n: (starts[n], n)):
            self.at(starts[node], self._start_node, node)
        last_start = max(starts.values())
        if s.init.corruption != "none":
            self.at(last_start + s.workload.subscribe_at, self._corrupt)
        self._schedule_workload()
        for fault in s.faults:
            self.at(fault.at, self._fault, fault)
        if s.trace.snapshot_interval > 0:
            self.at(0.0, self._snapshot)

    def _draw_topics(self) -> list[str]:
        k = self.scenario.workload.subscriptions_per_node
        chosen: list[str] = []
        pool = list(range(len(self._topics)))
        weights = list(self._topic_weights)
        for _ in range(k):
            index = self._workload_rng.choices(range(len(pool)), weights=weights)[0]
            chosen.append(self._topics[pool.pop(index)])
            weights.pop(index)
        return sorted(chosen, key=lambda t: int(t[1:]))

    # ------------------------------------------------------------------ node lifecycle
    def _create(self, node: NodeId) -> StackNode:
        incarnation = self.incarnation.get(node, -1) + 1
        self.incarnation[node] = incarnation
        rng = random.Random(node_seed(self.seed, node) + incarnation)
        ctx = NodeContext(
            node_id=node, rng=rng, role=self.roles.get(node, "peer"), params=self.params
        )
        obj = self.spec.create(ctx)
        self.nodes[node] = obj
        self.alive.add(node)
        self.crashed.discard(node)
        return obj

    def _start_node(self, node: NodeId, event: str = "up") -> None:
        obj = self._create(node)
        if self.writer:
            self.writer.node(node, self.now, event, self.roles.get(node, "peer"))
        self._apply(node, obj.handle(Start(self.contacts), self.now))
        if node in self.node_topics:
            delay = self.scenario.workload.subscribe_at
            for topic in self.node_topics[node]:
                if delay > 0:
                    self._push(
                        self.now + delay, CMD, node, Subscribe(topic), self.incarnation[node]
                    )
                else:
                    self.command(node, Subscribe(topic))

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
        """Crash ``nodes`` now: they stop, their monitors hear of it after the detection delay."""
        victims = sorted(n for n in set(nodes) if n in self.alive)
        if not victims:
            return
        for node in victims:
            self.alive.discard(node)
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

    def recover(self, nodes: Iterable[NodeId]) -> None:
        for node in sorted(set(nodes) & self.crashed):
            self._start_node(node, event="recover")

    def join_new(self) -> NodeId:
        node = self.next_node_id
        self.next_node_id += 1
        self.node_topics[node] = self._draw_topics()
        self._start_node(node)
        return node

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
            self._lost(now, src, dst, message)
            if self._detection >= 0:
                self._notify_down(src, dst, now + self._detection)
            return
        if self._partition is not None and self._partition.get(src) != self._partition.get(dst):
            self._lost(now, src, dst, message)
            if self.scenario.network.partition_notices:
                self._notify_down(src, dst, now + self._detection)
            return
        if self._loss and self._net_rng.random() < self._loss:
            self._lost(now, src, dst, message)
            return
        self._seq += 1
        heapq.heappush(self._heap, (now + self._latency(), self._seq, MSG, dst, src, message, now))

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
                message.wire_size(),
            )

    def _apply(self, node: NodeId, outputs: list[Any]) -> None:
        for out in outputs:
            cls = type(out)
            if cls is Send:
                self._send(node, out.dst, out.message)
            elif cls is SetTimer:
                after = out.after
                if self._jitter:
                    after *= 1.0 + self._jitter * (2.0 * self._timer_rng.random() - 1.0)
                self._seq += 1
                heapq.heappush(
                    self._heap,
                    (
                        self.now + after,
                        self._seq,
                        TIMER,
                        node,
                        out.timer,
                        self.incarnation[node],
                        None,
                    ),
                )
            elif cls is Deliver:
                self.delivery_count += 1
                if self.keep_deliveries:
                    self.deliveries.append((out.pub_id, node, self.now, out.hops))
                if self.writer:
                    self.writer.delivery(out.pub_id, node, self.now, out.hops)
            elif cls is TraceRecord:
                if self.writer:
                    self.writer.event(self.now, node, out.kind, out.detail)
            elif cls is Disconnect:
                pass  # no connections to close in the simulator
            else:
                raise TypeError(f"node {node} returned an unknown output {out!r}")

    # ------------------------------------------------------------------ the loop
    def run(self, until: float | None = None) -> None:
        """Process events up to time ``until`` (default: the scenario's duration)."""
        end = self.scenario.run.duration if until is None else until
        self._loop(end, None)
        self.now = max(self.now, end)

    def run_until(self, predicate: Callable[[Simulation], bool], limit: float) -> bool:
        """Run until ``predicate(self)`` holds (checked after every event) or time ``limit``."""
        if predicate(self):
            return True
        return self._loop(limit, predicate)

    def _loop(self, end: float, predicate: Callable[[Simulation], bool] | None) -> bool:
        heap = self._heap
        pop = heapq.heappop
        nodes = self.nodes
        infos = MESSAGE_INFO
        writer = self.writer
        full_trace = writer is not None and writer.messages_mode == "full"
        progress = self._progress
        every = self._progress_every
        processed = self.events_processed
        while heap:
            if heap[0][0] > end:
                break
            t, _seq, kind, a, b, c, d = pop(heap)
            self.now = t
            processed += 1
            if kind == MSG:
                node = nodes.get(a)
                if writer is not None:
                    info = infos[type(c)]
                    writer.message(
                        d,
                        t if node is not None else None,
                        b,
                        a,
                        info.name,
                        info.layer,
                        info.payload,
                        c.publication() if full_trace else None,
                        c.wire_size(),
                    )
                if node is None:
                    self.messages_lost += 1
                    continue
                self._apply(a, node.handle(Receive(b, c), t))
            elif kind == TIMER:
                if self.incarnation.get(a) != c or a not in nodes:
                    continue
                self._apply(a, nodes[a].handle(TimerFired(b), t))
            elif kind == DOWN:
                self._pending_down.discard((a, b))
                if self.incarnation.get(a) != c or a not in nodes:
                    continue
                self._apply(a, nodes[a].handle(PeerDown(b), t))
            elif kind == CMD:
                if self.incarnation.get(a) != c or a not in nodes:
                    continue
                self.command(a, b)
            else:
                a(*b)
            if processed % every == 0:
                self.events_processed = processed
                if writer is not None:
                    writer.advance(t)
                if progress is not None:
                    progress(self)
            if predicate is not None and predicate(self):
                self.events_processed = processed
                return True
        self.events_processed = processed
        return False

    # ------------------------------------------------------------------ workload
    def _schedule_workload(self) -> None:
        w = self.scenario.workload
        for i in range(w.publications):
            self.at(w.publish_start + i / w.publish_rate, self._publish, i)
        if w.unsubscribe_fraction > 0:
            self.at(w.unsubscribe_at, self._unsubscribe_some)

    def _publish(self, pub_id: int) -> None:
        w = self.scenario.workload
        rng = self._workload_rng
        topic = rng.choices(self._topics, weights=self._topic_weights)[0]
        candidates: list[NodeId] = []
        if w.publisher == "subscriber":
            candidates = sorted(
                n for n in self.topic_subscribers.get(topic, ()) if n not in self.left
            )
        if not candidates:
            candidates = sorted(n for n in self.alive if n not in self.roles and n not in self.left)
        if not candidates:
            return
        publisher = candidates[rng.randrange(len(candidates))]
        # the first bytes name the publication, the rest is padding up to payload_size
        payload = (pub_id.to_bytes(8, "big") + bytes(max(0, w.payload_size - 8)))[: w.payload_size]
        self.command(publisher, Publish(topic, pub_id, payload))

    def _unsubscribe_some(self) -> None:
        w = self.scenario.workload
        subscribed = sorted({n for (n, _t) in self._subscribed if n not in self.roles})
        count = round(w.unsubscribe_fraction * len(subscribed))
        for node in sorted(self._workload_rng.sample(subscribed, count)):
            topics = sorted(t for (n, t) in self._subscribed if n == node)
            topic = topics[self._workload_rng.randrange(len(topics))]
            self.command(node, Unsubscribe(topic))

    # ------------------------------------------------------------------ faults
    def _pick(self, fault: Fault, pool: Iterable[NodeId]) -> list[NodeId]:
        if fault.nodes:
            return sorted(fault.nodes)
        ordered = sorted(pool)
        count = round((fault.fraction or 0.0) * len(ordered))
        return sorted(self._fault_rng.sample(ordered, count))

    def _fault(self, fault: Fault) -> None:
        # Fraction-based faults pick among live workload nodes other than the contacts: the
        # well-known entry nodes are the ones that run the experiment (papers/004 §3.1: the
        # contact node issues kill_random). Name a contact in `nodes` to crash it.
        contacts = set(self.contacts)
        live_workload = [
            n
            for n in self.alive
            if n not in self.roles and n not in self.left and n not in contacts
        ]
        detail: dict[str, Any] = {}
        if fault.kind == "crash":
            victims = self._pick(fault, live_workload)
            self.crash(victims)
            detail = {"nodes": victims}
        elif fault.kind == "leave":
            victims = self._pick(fault, live_workload)
            self.leave(victims)
            detail = {"nodes": victims}
        elif fault.kind == "recover":
            back = self._pick(fault, self.crashed)
            self.recover(back)
            detail = {"nodes": back}
        elif fault.kind == "partition":
            self._partition = self._make_partition(fault)
            groups: dict[int, list[NodeId]] = {}
            for node, group in sorted(self._partition.items()):
                groups.setdefault(group, []).append(node)
            detail = {"sizes": [len(groups[g]) for g in sorted(groups)]}
        elif fault.kind == "heal":
            self._partition = None
        elif fault.kind == "churn":
            assert fault.until is not None
            self._schedule_churn(fault, fault.at)
            detail = {"rate": fault.rate, "until": fault.until}
        if self.writer:
            self.writer.fault(self.now, fault.kind, detail)

    def _make_partition(self, fault: Fault) -> dict[NodeId, int]:
        everyone = sorted(set(self.incarnation) | set(range(self.scenario.run.nodes)))
        if fault.groups:
            assignment = dict.fromkeys(everyone, len(fault.groups))
            for index, group in enumerate(fault.groups):
                for node in group:
                    assignment[node] = index
            return assignment
        if fault.parts:
            return {node: self._fault_rng.randrange(fault.parts) for node in everyone}
        side = set(self._fault_rng.sample(everyone, round((fault.fraction or 0) * len(everyone))))
        return {node: int(node in side) for node in everyone}

    def _schedule_churn(self, fault: Fault, after: float) -> None:
        gap = self._fault_rng.expovariate(fault.rate)
        t = after + gap
        if fault.until is None or t > fault.until:
            return
        self.at(t, self._churn_event, fault)

    def _churn_event(self, fault: Fault) -> None:
        rng = self._fault_rng
        if rng.random() < fault.join_fraction:
            node = self.join_new()
            kind = "join"
        else:
            pool = sorted(n for n in self.alive if n not in self.roles and n not in self.left)
            if not pool:
                self._schedule_churn(fault, self.now)
                return
            node = pool[rng.randrange(len(pool))]
            kind = "leave" if fault.graceful else "crash"
            if fault.graceful:
                self.leave([node])
            else:
                self.crash([node])
        if self.writer:
            self.writer.fault(self.now, f"churn-{kind}", {"node": node})
        self._schedule_churn(fault, self.now)

    # ------------------------------------------------------------------ corruption
    def _corrupt(self) -> None:
        corrupt = self.spec.corrupt
        if corrupt is None:
            return
        kind = self.scenario.init.corruption
        kwargs: dict[str, Any] = {}
        if "junk_messages" in inspect.signature(corrupt).parameters:
            kwargs["junk_messages"] = self.scenario.init.junk_messages
        live = {n: self.nodes[n] for n in sorted(self.nodes)}
        junk = corrupt(kind, live, self._corrupt_rng, self.params, **kwargs)
        for src, dst, message in junk or []:
            self.inject(src, dst, message)
        if self.writer:
            self.writer.fault(self.now, "corruption", {"kind": kind, "junk": len(junk or [])})

    # ------------------------------------------------------------------ snapshots
    def _snapshot(self) -> None:
        writer = self.writer
        if writer is not None:
            for node in sorted(self.nodes):
                for row in self.nodes[node].snapshot():
                    writer.snapshot(
                        self.now, node, row.topic, row.layer, list(row.neighbors), row.state
                    )
            if self.spec.is_legitimate is not None:
                live = {n: self.nodes[n] for n in sorted(self.nodes)}
                writer.check(self.now, "legitimate", bool(self.spec.is_legitimate(live)))
        interval = self.scenario.trace.snapshot_interval
        if self.now + interval <= self.scenario.run.duration + 1e-9:
            self.at(self.now + interval, self._snapshot)

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """Write open subscriptions and flush the trace."""
        if self.writer is None:
            return
        for (node, topic), t_start in sorted(self._subscribed.items()):
            self.writer.subscription(
                node, topic, t_start, None, self._sub_filters.get((node, topic))
            )
        self.writer.close()


def _popularity(s: Scenario, count: int) -> list[float]:
    if s.workload.topic_popularity == "uniform":
        return [1.0] * count
    return [1.0 / math.pow(rank + 1, s.workload.zipf_s) for rank in range(count)]


def _latency_sampler(s: Scenario, rng: random.Random) -> Callable[[], float]:
    lat = s.network.latency
    if lat.dist == "constant":
        value = lat.value
        return lambda: value
    if lat.dist == "uniform":
        lo, hi = lat.min, lat.max
        uniform = rng.uniform
        return lambda: uniform(lo, hi)
    mu, sigma = math.log(lat.median), lat.sigma
    lognorm = rng.lognormvariate
    return lambda: lognorm(mu, sigma)
