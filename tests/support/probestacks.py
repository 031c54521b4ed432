"""The test-only stacks, independent of the real ones: ``probe`` for the simulator's own tests
and ``nettest`` for the network runtime's.

What they share is defined once here: the periodic timer :class:`Ping`, the flood message
:class:`ProbeFlood` (tag 90; ``hops`` is the links the copy has crossed before this one, so a
receiver delivers it at ``hops + 1``), the ping :class:`ProbePing` (tag 91), the first-copy
rule of :class:`FloodingProbe` (remember the publication, send it on, deliver it where
subscribed) and :func:`register_test_stack`. Both stacks deliver each publication once per
subscribed node, and both are simple enough that the outcome of a run can be worked out by
hand. What differs is kept in two named variants:

* ``probe`` (:class:`ProbeNode`, :class:`ProbeParams`): every node knows its ring neighbour
  (node+1 mod n) only, floods publications to it, pings it every ``ping_interval`` seconds
  (from the start) and records the PeerDown notices it gets with their times.
  tests/sim/test_workload.py subclasses it into a content-based variant.
* ``nettest`` (:class:`NetTestNode`, :class:`NetTestParams`): every node floods publications
  to every peer it knows (its contacts, and anyone who ever sent it something), pings them only
  if ``ping_interval`` > 0, honours Unsubscribe, and forgets the peers reported down; it
  monitors every peer it knows, so the transport's failure detector is exercised. Its own tests
  are in ``tests/net/test_net_stack.py``. :class:`NetTestKitchenSink` (tag 94) carries every
  field form the network codec supports. Tags 92 and 93 (the nettest stack's own flood and
  hello before the two stacks shared theirs) are retired.

The network tests' node processes, shell and clusters are in :mod:`support.netnode`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pubmesh.proto.core import (
    Deliver,
    Input,
    Message,
    NodeContext,
    NodeId,
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
    register_message,
)
from pubmesh.stacks.base import STACKS, StackSpec, register


def register_test_stack(spec: StackSpec) -> StackSpec:
    """Register a test-only stack, once per process: the registered spec."""
    return STACKS[spec.name] if spec.name in STACKS else register(spec)


# ------------------------------------------------------------------------------------------
# What the two stacks share
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ping(Timer):
    """The test stacks' periodic timer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeFlood(Message):
    """A publication flooded hop by hop: ``hops`` links crossed before this copy."""

    topic: str
    pub_id: int
    hops: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(ProbeFlood, 90, layer="test", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbePing(Message):
    seq: int


register_message(ProbePing, 91, layer="test")


class FloodingProbe(StackNode):
    """What both test stacks' nodes hold and how they pass a publication on."""

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.seen: set[int] = set()
        self.topics: set[str] = set()
        self.pings_received = 0

    def flood(
        self, topic: str, pub_id: int, payload: bytes, hops: int, to: Iterable[NodeId]
    ) -> list[Output]:
        """A publication this node has now seen at ``hops``: a copy to each of ``to``, and
        the delivery if the node subscribes to its topic."""
        self.seen.add(pub_id)
        copy = ProbeFlood(topic=topic, pub_id=pub_id, hops=hops, payload=payload)
        out: list[Output] = [Send(peer, copy) for peer in to]
        if topic in self.topics:
            out.append(Deliver(topic, pub_id, payload, hops))
        return out

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.topics)


# ------------------------------------------------------------------------------------------
# probe: the simulator's ring
# ------------------------------------------------------------------------------------------
@dataclass
class ProbeParams:
    ring_size: int = 10
    ping_interval: float = 1.0


class ProbeNode(FloodingProbe):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: ProbeParams = ctx.params
        self.next = (ctx.node_id + 1) % self.params.ring_size
        self.downs: list[tuple[float, NodeId]] = []
        self.pings_sent = 0
        self.timer_times: list[float] = []

    def handle(self, event: Input, now: float) -> list[Output]:
        match event:
            case Start():
                return [SetTimer(self.params.ping_interval, Ping())]
            case Subscribe(topic=topic):
                self.topics.add(topic)
                return []
            case Publish(topic=topic, pub_id=pub_id, payload=payload):
                return self.flood(topic, pub_id, payload, 0, (self.next,))
            case Receive(message=ProbeFlood() as m):
                if m.pub_id in self.seen:
                    return []
                return self.flood(m.topic, m.pub_id, m.payload, m.hops + 1, (self.next,))
            case Receive(message=ProbePing()):
                self.pings_received += 1
                return []
            case TimerFired(timer=Ping()):
                self.timer_times.append(now)
                self.pings_sent += 1
                return [
                    Send(self.next, ProbePing(seq=self.pings_sent)),
                    SetTimer(self.params.ping_interval, Ping()),
                ]
            case PeerDown(peer=peer):
                self.downs.append((now, peer))
                return [TraceRecord("peer-down", {"peer": peer})]
        return []

    def monitored_peers(self) -> Iterable[NodeId]:
        return (self.next,)

    def snapshot(self) -> Iterable[SnapshotRow]:
        return [SnapshotRow("", "ring", (self.next,), {"seen": len(self.seen)})]


def _legit(nodes: Any) -> bool:
    return all(len(n.seen) > 0 for n in nodes.values())


register_test_stack(
    StackSpec(
        name="probe",
        params_type=ProbeParams,
        create=ProbeNode,
        contacts=lambda n, p: (0,),
        is_legitimate=_legit,
        description="test-only ring flooding stack",
    )
)


# ------------------------------------------------------------------------------------------
# nettest: the network runtime's flood to every known peer
# ------------------------------------------------------------------------------------------
class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True, kw_only=True)
class NetTestKitchenSink(Message):
    """Every field form the codec supports (see pubmesh.net.codec)."""

    number: int
    ratio: float
    flag: bool
    name: str
    blob: bytes
    maybe: int | None
    either: int | str
    ids: tuple[int, ...]
    pair: tuple[str, bytes]
    members: frozenset[int]
    attributes: Mapping[str, Any]
    counts: dict[str, int]
    inner: ProbePing
    optional_inner: Message | None
    colour: Colour
    mode: Literal["fast", "slow"]
    pairs: tuple[tuple[str, bytes], ...] = ()


register_message(NetTestKitchenSink, 94, layer="test")


@dataclass
class NetTestParams:
    ping_interval: float = 0.0


class NetTestNode(FloodingProbe):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: NetTestParams = ctx.params or NetTestParams()
        self.peers: set[NodeId] = set()
        self.downs: list[NodeId] = []

    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Start(contacts=contacts):
                for contact in contacts:
                    if contact != self.node_id:
                        self.peers.add(contact)
                        out.append(Send(contact, ProbePing(seq=0)))
                if self.params.ping_interval > 0:
                    out.append(SetTimer(self.params.ping_interval, Ping()))
            case Subscribe(topic=topic):
                self.topics.add(topic)
            case Unsubscribe(topic=topic):
                self.topics.discard(topic)
            case Publish(topic=topic, pub_id=pub_id, payload=payload):
                out = self.flood(topic, pub_id, payload, 0, sorted(self.peers))
            case Receive(src=src, message=ProbeFlood() as m):
                self.peers.add(src)
                if m.pub_id not in self.seen:
                    others = [p for p in sorted(self.peers) if p != src]
                    out = self.flood(m.topic, m.pub_id, m.payload, m.hops + 1, others)
            case Receive(src=src, message=ProbePing()):
                self.pings_received += 1
                self.peers.add(src)
            case Receive(src=src):
                self.peers.add(src)
            case TimerFired(timer=Ping()):
                out.extend(Send(p, ProbePing(seq=1)) for p in sorted(self.peers))
                out.append(SetTimer(self.params.ping_interval, Ping()))
            case PeerDown(peer=peer):
                self.downs.append(peer)
                self.peers.discard(peer)
                out.append(TraceRecord("test.peer-down", {"peer": peer}))
        return out

    def monitored_peers(self) -> Iterable[NodeId]:
        return sorted(self.peers)

    def snapshot(self) -> Iterable[SnapshotRow]:
        return [SnapshotRow(t, "flood", tuple(sorted(self.peers)), {}) for t in sorted(self.topics)]


register_test_stack(
    StackSpec(
        name="nettest",
        params_type=NetTestParams,
        create=NetTestNode,
        description="test-only flooding stack for the network runtime",
    )
)
