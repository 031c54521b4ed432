"""A tiny stack for testing the simulator itself, independent of the real stacks.

``probe``: every node knows a ring neighbour (node+1 mod n) and floods publications to it;
it pings its neighbour periodically and records PeerDown notices. Simple enough that the
expected outcome of every simulator feature can be computed by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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
    register_message,
)
from pubmesh.stacks.base import STACKS, StackSpec, register


@dataclass(frozen=True, slots=True)
class Ping(Timer):
    """The test stack's periodic timer."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeGossip(Message):
    topic: str
    pub_id: int
    hops: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(ProbeGossip, 90, layer="test", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbePing(Message):
    seq: int


register_message(ProbePing, 91, layer="test")


@dataclass
class ProbeParams:
    ring_size: int = 10
    ping_interval: float = 1.0


class ProbeNode(StackNode):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: ProbeParams = ctx.params
        self.next = (ctx.node_id + 1) % self.params.ring_size
        self.seen: set[int] = set()
        self.topics: set[str] = set()
        self.downs: list[tuple[float, NodeId]] = []
        self.pings_received = 0
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
                self.seen.add(pub_id)
                out: list[Output] = [
                    Send(
                        self.next, ProbeGossip(topic=topic, pub_id=pub_id, hops=0, payload=payload)
                    )
                ]
                if topic in self.topics:
                    out.append(Deliver(topic, pub_id, payload, 0))
                return out
            case Receive(message=ProbeGossip() as m):
                if m.pub_id in self.seen:
                    return []
                self.seen.add(m.pub_id)
                fwd = ProbeGossip(
                    topic=m.topic, pub_id=m.pub_id, hops=m.hops + 1, payload=m.payload
                )
                out = [Send(self.next, fwd)]
                if m.topic in self.topics:
                    out.append(Deliver(m.topic, m.pub_id, m.payload, m.hops + 1))
                return out
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

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.topics)


def _legit(nodes: Any) -> bool:
    return all(len(n.seen) > 0 for n in nodes.values())


if "probe" not in STACKS:
    register(
        StackSpec(
            name="probe",
            params_type=ProbeParams,
            create=ProbeNode,
            contacts=lambda n, p: (0,),
            is_legitimate=_legit,
            description="test-only ring flooding stack",
        )
    )
