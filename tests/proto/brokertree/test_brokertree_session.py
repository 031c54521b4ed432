"""brokertree's sessions: FIFO and loss-free over links that reorder (docs/protocols/brokertree.md
§2 "Links", "Failure detector", §12.1; Kazemzadeh & Jacobsen §5.1, §9).

Every test drives real :class:`Sessions` objects through a pool of frames in flight that a
seeded random stream delivers in any order (the simulator's non-FIFO links at their worst).
A failure prints the seed and the command that replays it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from pubmesh.proto.brokertree.messages import Heartbeat, Hello, Reset
from pubmesh.proto.brokertree.session import (
    Beat,
    Down,
    Event,
    Miswired,
    Released,
    SessionOutput,
    Sessions,
    Up,
)
from pubmesh.proto.core import Message, NodeId, PeerDown, Receive, Send, register_message

SEEDS = range(1, 11)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionData(Message):
    """A numbered frame for the tests (tag 98: tests' range)."""

    sid: int
    n: int
    value: int


register_message(SessionData, 98, layer="test")


def split(items: list[SessionOutput]) -> tuple[list[Message], list[Event], list[Send]]:
    """The session layer's one output list as (released, events, sends), after checking its
    order: frames to send first, then events, then released frames."""
    rank = [0 if isinstance(i, Send) else 2 if isinstance(i, Released) else 1 for i in items]
    assert rank == sorted(rank), items
    released = [i.message for i in items if isinstance(i, Released)]
    events: list[Event] = [i for i in items if isinstance(i, (Up, Down, Miswired))]
    sends = [i for i in items if isinstance(i, Send)]
    assert len(released) + len(events) + len(sends) == len(items), items
    return released, events, sends


def _replay(test: str, seed: int) -> str:
    return (
        f"seed {seed}; replay: pytest tests/proto/brokertree/test_brokertree_session.py -k '{test}'"
    )


class Net:
    """Sessions of a few nodes and the frames in flight between them, delivered in an order
    drawn from ``rng`` (or oldest first with ``fifo``)."""

    def __init__(
        self,
        seed: int,
        nodes: int = 2,
        *,
        hb: bool = True,
        epoch: float = 0.0,
        via_handle: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        #: drive the layer through handle(Receive(...)) rather than receive(...)
        self.via_handle = via_handle
        self.now = 0.0
        self.nodes = {i: self._sessions(i, hb, epoch) for i in range(nodes)}
        self.pool: list[tuple[NodeId, NodeId, Message]] = []
        self.got: dict[NodeId, list[tuple[NodeId, int]]] = {i: [] for i in range(nodes)}
        self.events: dict[NodeId, list[Event]] = {i: [] for i in range(nodes)}
        self.dead: set[NodeId] = set()

    @staticmethod
    def _sessions(node: NodeId, hb: bool, epoch: float) -> Sessions:
        return Sessions(node, epoch, "broker", hb=hb, hb_period=0.5, fd_timeout=1.5)

    def post(self, src: NodeId, sends: list[Send]) -> None:
        for send in sends:
            if send.dst not in self.dead:
                self.pool.append((send.dst, src, send.message))

    def connect(self, a: NodeId, b: NodeId) -> None:
        self.post(a, self.nodes[a].connect(b, self.now))

    def send(self, a: NodeId, b: NodeId, value: int) -> None:
        send = self.nodes[a].send(b, lambda sid, n: SessionData(sid=sid, n=n, value=value), 0)
        self.post(a, [send])

    def step(self) -> None:
        dst, src, message = self.pool.pop(self.rng.randrange(len(self.pool)))
        node = self.nodes[dst]
        if self.via_handle:
            items = node.handle(Receive(src, message), self.now)
        else:
            items = node.receive(src, message, self.now)
        released, events, sends = split(items)
        self.got[dst].extend((src, m.value) for m in released if isinstance(m, SessionData))
        self.events[dst].extend(events)
        self.post(dst, sends)

    def drain(self) -> None:
        while self.pool:
            self.step()

    def restart(self, node: NodeId, epoch: float) -> None:
        self.nodes[node] = self._sessions(node, True, epoch)
        self.got[node].clear()
        self.events[node].clear()


@pytest.mark.parametrize("seed", SEEDS)
def test_frames_are_released_in_order_and_once_over_reordering_links(seed: int) -> None:
    """Spec §2: frames carry (sid, n) and the receiver releases them in order; the dialer
    sends nothing before the HelloAck, while the acceptor may send at once."""
    net = Net(seed)
    net.connect(0, 1)
    net.step()  # the Hello reaches 1, which may send straight away
    assert net.nodes[1].is_open(0) and not net.nodes[0].is_open(1)
    for value in range(100):
        net.send(1, 0, value)
    while not net.nodes[0].is_open(1):
        net.step()
    for value in range(100):
        net.send(0, 1, value)
        if net.rng.random() < 0.3:
            net.step()
    net.drain()
    why = _replay("released_in_order", seed)
    assert net.got[0] == [(1, v) for v in range(100)], why
    assert net.got[1] == [(0, v) for v in range(100)], why
    assert net.events[0] == [Up(1, 0.0, "broker", dialed=True)], why
    assert net.events[1] == [Up(0, 0.0, "broker", dialed=False)], why


@pytest.mark.parametrize("seed", SEEDS)
def test_simultaneous_dials_keep_the_lower_ids_session(seed: int) -> None:
    """Spec §12.1: one session per pair; when both sides dial, the lower id's is kept, in
    whatever order the four handshake frames arrive."""
    net = Net(seed)
    net.connect(0, 1)
    net.connect(1, 0)
    net.drain()
    why = _replay("simultaneous_dials", seed)
    assert net.nodes[0].is_open(1) and net.nodes[1].is_open(0), why
    assert net.nodes[0]._by_peer[1].sid == net.nodes[1]._by_peer[0].sid, why
    assert net.nodes[0]._by_peer[1].dialed and not net.nodes[1]._by_peer[0].dialed, why
    assert [type(e) for e in net.events[0] + net.events[1]] == [Up, Up], why
    for value in range(20):
        net.send(1, 0, value)
    net.drain()
    assert net.got[0] == [(1, v) for v in range(20)], why


def test_a_frame_on_an_unknown_session_is_reset_and_ends_the_senders_session() -> None:
    """Spec §2: a frame on an unknown or old sid gets Reset (a TCP RST), which its sender
    treats as a failure."""
    net = Net(1)
    net.connect(0, 1)
    net.drain()
    net.nodes[1].close(0)  # 1 gave up on the session, 0 does not know yet
    net.send(0, 1, 7)
    net.step()
    assert net.pool and isinstance(net.pool[0][2], Reset)
    net.drain()
    assert net.events[0][-1] == Down(1, "reset")
    assert not net.nodes[0].has(1) and net.got[1] == []


def test_a_redial_after_a_suspicion_replaces_the_session() -> None:
    """Spec §2 "Mistakes": a node that suspected a live peer dials it again; the peer ends
    the old session (Hello.after names it) and both sides deliver in order on the new one."""
    net = Net(2)
    net.connect(0, 1)
    net.drain()
    net.nodes[0].close(1)  # a false suspicion at 0
    net.connect(0, 1)
    net.drain()
    assert net.events[1][-2:] == [Down(0, "redialed"), Up(0, 0.0, "broker", dialed=False)]
    for value in range(10):
        net.send(1, 0, value)
    net.drain()
    assert net.got[0] == [(1, v) for v in range(10)]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_restarted_peer_replaces_its_dead_incarnations_session(seed: int) -> None:
    """Spec §2: a Hello with a newer epoch ends the old incarnation's session; frames the
    dead incarnation left in flight are not delivered to anyone (spec §2, [D2]: without
    sessions a restarted node received a message whose predecessor went to its old self)."""
    net = Net(seed)
    net.connect(0, 1)
    net.drain()
    for value in range(5):
        net.send(0, 1, value)
    old_frames = list(net.pool)
    net.pool.clear()
    net.restart(0, epoch=10.0)
    net.connect(0, 1)
    net.drain()
    why = _replay("restarted_peer", seed)
    assert net.events[1][-2:] == [Down(0, "restarted"), Up(0, 10.0, "broker", dialed=False)], why
    net.pool.extend(old_frames)  # the dead incarnation's frames arrive late
    net.drain()
    assert net.got[1] == [], why  # refused (Reset), not delivered
    assert net.nodes[1].is_open(0) and net.nodes[0].is_open(1), why


def test_heartbeats_keep_an_idle_session_and_silence_is_suspected() -> None:
    """Spec §2: an idle session sends a Heartbeat every hb_period; silence for fd_timeout
    makes the peer suspected."""
    net = Net(3)
    net.connect(0, 1)
    net.drain()
    for tick in range(1, 21):  # 10 s of idle session, heartbeats both ways
        net.now = tick * 0.5
        for node in (0, 1):
            _, events, sends = split(net.nodes[node].tick(net.now))
            assert events == []
            assert [type(s.message) for s in sends] == [Heartbeat]
            net.post(node, sends)
        net.drain()
    net.dead.add(1)  # 1 crashes silently
    downs: list[Event] = []
    for tick in range(21, 26):
        net.now = tick * 0.5
        _, events, sends = split(net.nodes[0].tick(net.now))
        downs.extend(events)
        net.post(0, sends)
    assert downs == [Down(1, "silent")]
    assert net.now - 10.0 >= 1.5


def test_an_unanswered_handshake_and_a_stuck_gap_end_the_session() -> None:
    """Spec §2: a gap older than fd_timeout ends the session; §10: the handshake timer is
    fd_timeout."""
    net = Net(4)
    net.connect(0, 1)
    net.pool.clear()  # the Hello is lost (the peer is gone)
    assert net.nodes[0].tick(1.4) == []
    assert net.nodes[0].tick(1.5) == [Down(1, "handshake")]

    net = Net(5)
    net.connect(0, 1)
    net.drain()
    net.send(0, 1, 1)
    net.send(0, 1, 2)
    first = net.pool.pop(0)  # frame 1 goes missing, frame 2 waits behind it
    net.drain()
    assert net.got[1] == []
    net.now = 1.0
    assert split(net.nodes[1].tick(1.0))[1] == []
    assert first[2].n == 1  # type: ignore[attr-defined]
    assert split(net.nodes[1].tick(1.5))[1] == [Down(0, "gap")]


def test_a_frame_seen_twice_is_a_protocol_error() -> None:
    """Links are loss-free and never duplicate (spec §2): a repeated frame means a bug, and
    the session layer says so instead of delivering twice."""
    net = Net(6)
    net.connect(0, 1)
    net.drain()
    net.send(0, 1, 1)
    dst, src, frame = net.pool[0]
    net.drain()
    with pytest.raises(ValueError, match="seen twice"):
        net.nodes[dst].receive(src, frame, 0.0)
    hello = Hello(sid=net.nodes[0]._by_peer[1].sid, n=0, epoch=0.0, kind="broker", after=0)
    with pytest.raises(ValueError, match="seen twice"):
        net.nodes[1].receive(0, hello, 0.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_handle_gives_what_receive_tick_and_peer_down_give(seed: int) -> None:
    """The layer contract (pubmesh.proto.core.Layer): handle of a Receive, a Beat or a PeerDown
    is receive, tick or peer_down, output for output, over the same run."""
    why = _replay("handle_gives", seed)
    runs = []
    for via_handle in (False, True):
        net = Net(seed, 3, via_handle=via_handle)
        net.connect(0, 1)
        net.connect(1, 2)
        net.connect(2, 0)
        net.drain()
        for value in range(20):
            net.send(0, 1, value)
            net.send(2, 1, 100 + value)
            net.step()
        net.drain()
        beats = []
        for step in range(1, 6):
            net.now = step * 0.5
            for node in (0, 1, 2):
                sessions = net.nodes[node]
                items = sessions.handle(Beat(), net.now) if via_handle else sessions.tick(net.now)
                beats.append((node, [str(i) for i in items]))
                net.post(node, split(items)[2])
            net.drain()
        down = net.nodes[1].handle(PeerDown(2), net.now) if via_handle else None
        if down is None:
            down = list(net.nodes[1].peer_down(2))
        runs.append((dict(net.got), dict(net.events), beats, down))
    assert runs[0] == runs[1], why
    got, _, _, down = runs[0]
    assert sorted(v for _, v in got[1]) == [*range(20), *range(100, 120)], why
    assert down == [Down(2, "down")], why
