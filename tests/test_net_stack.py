"""A trivial flooding stack for testing the network runtime, and its own tests.

``nettest``: every node floods publications to every peer it knows (its contacts, and anyone
who ever sent it something), delivers those of topics it subscribes to once, and records the
PeerDown notices it gets. It monitors every peer it knows, so the transport's failure detector
is exercised. Its messages use tags 92-99 (90 and 91 belong to the simulator's probe stack in
``simstacks.py``); ``NetTestKitchenSink`` carries every field form the codec supports.

Other ``test_net_*`` files import this module for the stack and the helpers below.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pubmesh.net.runtime import NodeRuntime
from pubmesh.net.security import ClusterKey
from pubmesh.net.transport import NetConfig
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
    Start,
    Subscribe,
    Timer,
    TimerFired,
    TraceRecord,
    Unsubscribe,
    message,
)
from pubmesh.stacks.base import STACKS, StackNode, StackSpec, register

KEY = ClusterKey(b"test cluster key: 0123456789abcdef")
OTHER_KEY = ClusterKey(b"a different key entirely, 0123456789")


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@message(92, layer="test", payload=True)
class NetTestFlood(Message):
    topic: str
    pub_id: int
    hops: int
    payload: bytes

    def publication(self) -> int | None:
        return self.pub_id


@message(93, layer="test")
class NetTestHello(Message):
    seq: int


@message(94, layer="test")
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
    inner: NetTestHello
    optional_inner: Message | None
    colour: Colour
    mode: Literal["fast", "slow"]
    pairs: tuple[tuple[str, bytes], ...] = ()


@dataclass
class NetTestParams:
    ping_interval: float = 0.0


class NetTestNode(StackNode):
    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.params: NetTestParams = ctx.params or NetTestParams()
        self.peers: set[NodeId] = set()
        self.topics: set[str] = set()
        self.seen: set[int] = set()
        self.downs: list[NodeId] = []
        self.hellos = 0

    def handle(self, event: Input, now: float) -> list[Output]:
        out: list[Output] = []
        match event:
            case Start(contacts=contacts):
                for contact in contacts:
                    if contact != self.node_id:
                        self.peers.add(contact)
                        out.append(Send(contact, NetTestHello(seq=0)))
                if self.params.ping_interval > 0:
                    out.append(SetTimer(self.params.ping_interval, Timer("ping")))
            case Subscribe(topic=topic):
                self.topics.add(topic)
            case Unsubscribe(topic=topic):
                self.topics.discard(topic)
            case Publish(topic=topic, pub_id=pub_id, payload=payload):
                self.seen.add(pub_id)
                flood = NetTestFlood(topic=topic, pub_id=pub_id, hops=1, payload=payload)
                out.extend(Send(p, flood) for p in sorted(self.peers))
                if topic in self.topics:
                    out.append(Deliver(topic, pub_id, payload, 0))
            case Receive(src=src, message=NetTestFlood() as m):
                self.peers.add(src)
                if m.pub_id not in self.seen:
                    self.seen.add(m.pub_id)
                    forward = NetTestFlood(
                        topic=m.topic, pub_id=m.pub_id, hops=m.hops + 1, payload=m.payload
                    )
                    out.extend(Send(p, forward) for p in sorted(self.peers) if p != src)
                    if m.topic in self.topics:
                        out.append(Deliver(m.topic, m.pub_id, m.payload, m.hops))
            case Receive(src=src, message=NetTestHello()):
                self.hellos += 1
                self.peers.add(src)
            case Receive(src=src):
                self.peers.add(src)
            case TimerFired(timer=Timer(kind="ping")):
                out.extend(Send(p, NetTestHello(seq=1)) for p in sorted(self.peers))
                out.append(SetTimer(self.params.ping_interval, Timer("ping")))
            case PeerDown(peer=peer):
                self.downs.append(peer)
                self.peers.discard(peer)
                out.append(TraceRecord("test.peer-down", {"peer": peer}))
        return out

    def monitored_peers(self) -> Iterable[NodeId]:
        return sorted(self.peers)

    def subscriptions(self) -> Iterable[str]:
        return sorted(self.topics)

    def snapshot(self) -> Iterable[SnapshotRow]:
        return [SnapshotRow(t, "flood", tuple(sorted(self.peers)), {}) for t in sorted(self.topics)]


if "nettest" not in STACKS:
    register(
        StackSpec(
            name="nettest",
            params_type=NetTestParams,
            create=NetTestNode,
            description="test-only flooding stack for the network runtime",
        )
    )

FAST = NetConfig(dial_attempts=3, backoff_initial=0.02, backoff_max=0.1, tick=0.1)


async def start_node(
    contacts: tuple[NodeId, ...] = (),
    *,
    key: ClusterKey = KEY,
    config: NetConfig = FAST,
    **kwargs: Any,
) -> NodeRuntime:
    """A nettest node on a free loopback port."""
    node = NodeRuntime("nettest", key=key, contacts=contacts, config=config, **kwargs)
    await node.start()
    return node


def stack_of(node: NodeRuntime) -> NetTestNode:
    assert isinstance(node.node, NetTestNode)
    return node.node


async def wait_for(predicate: Any, timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)


# ------------------------------------------------------------------------------------------
# Tests of the stack itself (so that a failure elsewhere is not a bug in the test stack)
# ------------------------------------------------------------------------------------------
def test_nettest_floods_and_delivers_once() -> None:
    import random

    a = NetTestNode(NodeContext(1, random.Random(1)))
    b = NetTestNode(NodeContext(2, random.Random(2)))
    a.handle(Start((2,)), 0.0)
    b.handle(Subscribe("t"), 0.0)
    out = a.handle(Publish("t", 7, b"x"), 0.0)
    sends = [o for o in out if isinstance(o, Send)]
    assert [s.dst for s in sends] == [2]
    first = b.handle(Receive(1, sends[0].message), 0.0)
    again = b.handle(Receive(1, sends[0].message), 0.0)
    assert [o for o in first if isinstance(o, Deliver)] == [Deliver("t", 7, b"x", 1)]
    assert again == []
    assert b.monitored_peers() == [1]


def test_nettest_forgets_a_peer_reported_down() -> None:
    import random

    a = NetTestNode(NodeContext(1, random.Random(1)))
    a.handle(Start((2, 3)), 0.0)
    out = a.handle(PeerDown(2), 1.0)
    assert a.downs == [2]
    assert list(a.monitored_peers()) == [3]
    assert out == [TraceRecord("test.peer-down", {"peer": 2})]
