"""The protocol test harness: a cluster of stack nodes over a message pool the test drives.

How it works
============
Where :class:`pubmesh.sim.engine.Simulation` draws a latency for every message and runs a heap,
:class:`PoolCluster` hands the network to the test: every message sent is put in a *pool* of
messages in flight, and the test decides what happens next. It may deliver any pooled message
(or, on FIFO links, only the oldest of each link), drop one, deliver one twice, break a link
(both ends hear ``PeerDown``, as a lost TCP connection would tell them), crash a node, or fire
the earliest pending timer. That is the adversary of the papers' asynchronous model, and the
shape Hypothesis's ``RuleBasedStateMachine`` wants: each of these is a rule, the cluster's
invariants are checked after every step (h2's ``test_state_machines.py``; Kafka's
``RaftEventSimulationTest``).

Time only moves when a timer fires: the cluster's clock jumps to the timer's due time, so
periodic protocol actions (shuffles, timeouts, cache eviction) happen in their real order
relative to each other, and message delivery takes no time. :meth:`PoolCluster.quiesce` is the
liveness helper: it delivers every message in flight and fires timers in time order up to a
horizon, so that after the faults stop the test can ask whether the system does its job.

The failure detector is perfect, as the papers assume: a node that sends to a crashed node, or
monitors one (``monitored_peers``), receives ``PeerDown`` for it before anything else happens.

Every stack gets the same harness: :func:`pubmesh.stacks.base.available_stacks` names them, and
``tests/proto/test_stacks_generated.py`` runs the generated checks (determinism, hostile input,
liveness) over all of them.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pubmesh.proto.core import (
    Command,
    Deliver,
    Disconnect,
    Input,
    Message,
    NodeContext,
    NodeId,
    Output,
    PeerDown,
    Receive,
    Send,
    SetTimer,
    StackNode,
    Start,
    Timer,
    TimerFired,
    TraceRecord,
    node_random,
)
from pubmesh.stacks.base import StackSpec


class HarnessError(AssertionError):
    """The cluster did not settle within its step budget, or a node broke the contract."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """A message in the pool."""

    src: NodeId
    dst: NodeId
    message: Message


@dataclass(slots=True)
class _PendingTimer:
    due: float
    seq: int
    node: NodeId = field(compare=False)
    incarnation: int = field(compare=False)
    timer: Timer = field(compare=False)

    def __lt__(self, other: _PendingTimer) -> bool:
        # the heap's only comparison, by (due, seq) as order=True compared, without building
        # two tuples per call: a model test's run pops millions, so it shows in the suite's CPU
        if self.due != other.due:
            return self.due < other.due
        return self.seq < other.seq


class PoolCluster:
    """Nodes of one stack, a pool of messages in flight and the pending timers.

    ``n`` nodes with ids 0..n-1 are created with the stack's roles and started with its
    contacts. ``fifo`` restricts delivery to the oldest pooled message of each link.
    ``on_output`` sees every output of every node (for invariants over deliveries).
    """

    def __init__(
        self,
        spec: StackSpec,
        n: int,
        seed: int,
        *,
        params: Any = None,
        fifo: bool = True,
        step_limit: int = 200_000,
        on_output: Callable[[NodeId, Output], None] | None = None,
    ) -> None:
        self.spec = spec
        self.seed = seed
        self.params = params if params is not None else spec.params_type()
        self.fifo = fifo
        self.step_limit = step_limit
        self.on_output = on_output
        self.roles = dict(spec.infrastructure(n, self.params))
        self.contacts = tuple(spec.contacts(n, self.params))
        self.now = 0.0
        self.steps = 0
        self.nodes: dict[NodeId, StackNode] = {}
        self.crashed: set[NodeId] = set()
        self.incarnation: dict[NodeId, int] = {}
        self.pool: list[InFlight] = []
        self.timers: list[_PendingTimer] = []
        self._timer_seq = 0
        #: deliveries per node, in order: (topic, pub_id, hops)
        self.delivered: dict[NodeId, list[tuple[str, int, int]]] = {}
        for node in range(n):
            self.add_node(node)

    # ------------------------------------------------------------------ nodes
    @property
    def live(self) -> list[NodeId]:
        return [node for node in sorted(self.nodes) if node not in self.crashed]

    @property
    def peers(self) -> list[NodeId]:
        """Live nodes that take part in the workload (not infrastructure)."""
        return [node for node in self.live if node not in self.roles]

    def add_node(self, node: NodeId) -> StackNode:
        """Create (or re-create, after a crash) ``node`` and start it."""
        incarnation = self.incarnation.get(node, -1) + 1
        self.incarnation[node] = incarnation
        ctx = NodeContext(
            node_id=node,
            rng=node_random(self.seed, node, incarnation),
            role=self.roles.get(node, "peer"),
            params=self.params,
        )
        obj = self.spec.create(ctx)
        self.nodes[node] = obj
        self.crashed.discard(node)
        self.delivered.setdefault(node, [])
        self.run(node, Start(self.contacts))
        return obj

    def command(self, node: NodeId, command: Command) -> None:
        """Hand an application command to a live node."""
        self.run(node, command)

    def crash(self, node: NodeId) -> None:
        """``node`` stops: messages to it vanish, its timers die, its monitors learn of it."""
        self.crashed.add(node)
        self.pool = [m for m in self.pool if m.dst != node]
        self.timers = [t for t in self.timers if t.node != node]
        heapq.heapify(self.timers)
        self.run(None, None)

    # ------------------------------------------------------------------ running a node
    def run(self, node: NodeId | None, event: Input | None) -> None:
        """Hand ``event`` to ``node``, apply its outputs, and run the failure detector until
        no node hears of a crash it has not handled."""
        work: deque[tuple[NodeId, Input]] = deque()
        if node is not None and event is not None:
            work.append((node, event))
        while True:
            while work:
                at, ev = work.popleft()
                if at in self.crashed or at not in self.nodes:
                    continue
                self._count_step()
                for out in self.nodes[at].handle(ev, self.now):
                    self._apply(at, out, work)
            if self.crashed:
                for at in self.live:
                    for peer in sorted(self.nodes[at].monitored_peers()):
                        if peer in self.crashed:
                            work.append((at, PeerDown(peer)))
            if not work:
                return

    def _apply(self, at: NodeId, out: Output, work: deque[tuple[NodeId, Input]]) -> None:
        if self.on_output is not None:
            self.on_output(at, out)
        match out:
            case Send(dst=dst, message=message):
                if dst in self.crashed or dst not in self.nodes:
                    work.append((at, PeerDown(dst)))
                else:
                    self.pool.append(InFlight(at, dst, message))
            case SetTimer(after=after, timer=timer):
                if after < 0:
                    raise HarnessError(f"node {at} set a timer {after} s in the past: {timer!r}")
                self._timer_seq += 1
                heapq.heappush(
                    self.timers,
                    _PendingTimer(
                        self.now + after, self._timer_seq, at, self.incarnation[at], timer
                    ),
                )
            case Deliver(topic=topic, pub_id=pub_id, hops=hops):
                self.delivered[at].append((topic, pub_id, hops))
            case Disconnect() | TraceRecord():
                pass
            case _:
                raise HarnessError(f"node {at} returned {out!r}, which is no Output")

    def _count_step(self) -> None:
        self.steps += 1
        if self.steps > self.step_limit:
            raise HarnessError(
                f"more than {self.step_limit} handler calls (seed {self.seed}): the cluster "
                f"does not settle ({len(self.pool)} messages in flight)"
            )

    # ------------------------------------------------------------------ the network
    def deliverable(self) -> list[int]:
        """Indices of pooled messages that may be delivered next."""
        if not self.fifo:
            return list(range(len(self.pool)))
        heads: dict[tuple[NodeId, NodeId], int] = {}
        for index, item in enumerate(self.pool):
            heads.setdefault((item.src, item.dst), index)
        return sorted(heads.values())

    def deliver(self, index: int) -> InFlight:
        item = self.pool.pop(index)
        self.run(item.dst, Receive(item.src, item.message))
        return item

    def drop(self, index: int) -> InFlight:
        """Lose a message (on a TCP link, followed by the link breaking: see break_link)."""
        return self.pool.pop(index)

    def duplicate(self, index: int) -> None:
        self.pool.append(self.pool[index])

    def break_link(self, a: NodeId, b: NodeId) -> None:
        """The connection between ``a`` and ``b`` breaks: what is in flight on it is lost and
        both ends hear ``PeerDown`` of the other."""
        self.pool = [m for m in self.pool if {m.src, m.dst} != {a, b}]
        self.run(a, PeerDown(b))
        self.run(b, PeerDown(a))

    def fire_next_timer(self) -> bool:
        """Advance the clock to the earliest pending timer and fire it; False if none."""
        while self.timers:
            pending = heapq.heappop(self.timers)
            stale = self.incarnation[pending.node] != pending.incarnation
            if pending.node in self.crashed or stale:
                continue
            self.now = max(self.now, pending.due)
            self.run(pending.node, TimerFired(pending.timer))
            return True
        return False

    def fire_timer_of(self, node: NodeId) -> bool:
        """Fire ``node``'s earliest pending timer now, ahead of other nodes' timers (an
        adversarial schedule: a fast clock at one node); False if it has none."""
        mine = [t for t in self.timers if t.node == node and node not in self.crashed]
        mine = [t for t in mine if self.incarnation[t.node] == t.incarnation]
        if not mine:
            return False
        pending = min(mine)
        self.timers.remove(pending)
        heapq.heapify(self.timers)
        self.now = max(self.now, pending.due)
        self.run(node, TimerFired(pending.timer))
        return True

    def drain(self) -> None:
        """Deliver every message in flight (oldest deliverable first), none of the timers."""
        while self.pool:
            self.deliver(self.deliverable()[0])

    def drain_in_rounds(self) -> int:
        """Deliver every message in flight in synchronous rounds (every message of round k,
        then what they caused), none of the timers; returns the number of rounds."""
        rounds = 0
        while self.pool:
            wave, self.pool = self.pool, []
            for item in wave:
                self.run(item.dst, Receive(item.src, item.message))
            rounds += 1
        return rounds

    def quiesce(self, horizon: float) -> None:
        """Deliver everything in flight and fire every timer due up to ``now + horizon`` in
        time order, delivering what each one causes before the next: the system runs without
        faults for ``horizon`` seconds."""
        end = self.now + horizon
        self.drain()
        while self.timers and self.timers[0].due <= end:
            self.fire_next_timer()
            self.drain()
        self.now = max(self.now, end)

    # ------------------------------------------------------------------ queries
    def delivered_ids(self, node: NodeId, topic: str | None = None) -> set[int]:
        return {pub for t, pub, _ in self.delivered[node] if topic is None or t == topic}

    def messages_in_flight(self) -> Iterable[InFlight]:
        return tuple(self.pool)
