"""A tiny test-only stack: publish/subscribe through one hub, in one folder.

It exists to show that a stack is a folder plus a spec: nothing outside this folder names it,
yet ``pubmesh stacks``, the demo grid, the analysis and every generated test pick it up (the
test suite loads it through ``$PUBMESH_STACK_MODULES=tinystack.spec``, see tests/conftest.py).

The protocol: node 0 (the contact) is the hub. A node tells the hub its topics with
``TinyJoin`` on every subscription change and every ``announce_interval`` (soft state, so a
hub that lost it relearns it); a publisher sends ``TinyPublish`` to the hub, which sends
``TinyDeliver`` to every other member subscribed to the topic. The publisher delivers its own
publication at hop 0, the hub at hop 1, the others at hop 2. The hub drops a member it hears
is down.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pubmesh.proto.core import (
    Deliver,
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
    Unsubscribe,
    register_message,
)


@dataclass(frozen=True)
class TinyParams:
    """The ``[stack.tiny]`` table."""

    #: seconds between a member's re-announcements of its topics to the hub
    announce_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.announce_interval <= 0:
            raise ValueError(f"announce_interval must be > 0, got {self.announce_interval}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyJoin(Message):
    """Member -> hub: my topics now (empty: forget me)."""

    topics: tuple[str, ...]


register_message(TinyJoin, 95, layer="star")


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyPublish(Message):
    topic: str
    pub_id: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(TinyPublish, 96, layer="relay", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class TinyDeliver(Message):
    topic: str
    pub_id: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


register_message(TinyDeliver, 97, layer="relay", payload=True)


@dataclass(frozen=True, slots=True)
class Announce(Timer):
    """Re-announce this node's topics to the hub."""


class TinyNode(StackNode):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: TinyParams = ctx.params if ctx.params is not None else TinyParams()
        self.hub: NodeId = ctx.node_id
        self.topics: set[str] = set()
        self.members: dict[NodeId, frozenset[str]] = {}
        self.seen: set[tuple[str, int]] = set()
        self.delivered = 0
        self.left = False

    @property
    def is_hub(self) -> bool:
        return self.hub == self.node_id

    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Start(contacts=contacts):
                self.hub = contacts[0] if contacts else self.node_id
                first = self.params.announce_interval * self.rng.uniform(0.5, 1.0)
                out.append(SetTimer(first, Announce()))
            case Subscribe(topic=topic) if not self.left:
                self.topics.add(topic)
                self._announce(out)
            case Unsubscribe(topic=topic):
                self.topics.discard(topic)
                self._announce(out)
            case Leave():
                self.left = True
                self.topics.clear()
                self._announce(out)
            case Publish(topic=topic, pub_id=pub_id, payload=payload) if not self.left:
                self._deliver(topic, pub_id, payload, 0, out)
                if self.is_hub:
                    self._fan_out(self.node_id, topic, pub_id, payload, out)
                else:
                    out.append(
                        Send(self.hub, TinyPublish(topic=topic, pub_id=pub_id, payload=payload))
                    )
            case Receive(src=src, message=TinyJoin(topics=topics)) if self.is_hub:
                if topics:
                    self.members[src] = frozenset(topics)
                else:
                    self.members.pop(src, None)
            case Receive(src=src, message=TinyPublish(topic=topic, pub_id=pub_id, payload=payload)):
                if self.is_hub:
                    self._deliver(topic, pub_id, payload, 1, out)
                    self._fan_out(src, topic, pub_id, payload, out)
            case Receive(message=TinyDeliver(topic=topic, pub_id=pub_id, payload=payload)):
                self._deliver(topic, pub_id, payload, 2, out)
            case PeerDown(peer=peer):
                self.members.pop(peer, None)
            case TimerFired(timer=Announce()):
                if self.topics and not self.is_hub:
                    self._announce(out)
                out.append(SetTimer(self.params.announce_interval, Announce()))
        return out

    def _announce(self, out: list[Output]) -> None:
        if self.is_hub:
            return
        out.append(Send(self.hub, TinyJoin(topics=tuple(sorted(self.topics)))))

    def _fan_out(
        self, source: NodeId, topic: str, pub_id: int, payload: bytes, out: list[Output]
    ) -> None:
        message = TinyDeliver(topic=topic, pub_id=pub_id, payload=payload)
        for member in sorted(self.members):
            if member != source and topic in self.members[member]:
                out.append(Send(member, message))

    def _deliver(
        self, topic: str, pub_id: int, payload: bytes, hops: int, out: list[Output]
    ) -> None:
        if topic in self.topics and (topic, pub_id) not in self.seen:
            self.seen.add((topic, pub_id))
            self.delivered += 1
            out.append(Deliver(topic, pub_id, payload, hops))

    def monitored_peers(self) -> Iterable[NodeId]:
        return sorted(self.members) if self.is_hub else [self.hub]

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.topics)

    def snapshot(self) -> Iterable[SnapshotRow]:
        neighbors = tuple(sorted(self.members)) if self.is_hub else (self.hub,)
        return [SnapshotRow(topic, "star", neighbors, {}) for topic in sorted(self.topics)]

    def statistics(self) -> NodeStatistics:
        return NodeStatistics(
            role=self.ctx.role,
            topics=tuple(sorted(self.topics)),
            delivered=self.delivered,
            neighbors={
                t: tuple(sorted(self.members)) if self.is_hub else (self.hub,)
                for t in sorted(self.topics)
            },
            counters={"members": len(self.members)},
        )
