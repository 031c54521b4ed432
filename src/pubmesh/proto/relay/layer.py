"""The relay layer (Scheideler's lecture ch. 9 "relay model"; docs/protocols/relay.md §2): one per
node, below the ``clique`` and ``d2g`` stacks and shared by all their topic instances.

How it works
============
A *relay* is held by exactly one process, its owner. An IN relay's ``next`` is the owner
itself; an OUT relay's ``next`` is another relay, (node, rid). Following ``next`` ends at the
relay's *sink*. ``r ← M`` sends M along the chain: every hop is one message, so a chain of k
relays costs k messages, each with its own latency in the simulator (spec §2.4). An OUT relay
whose next is an IN relay is *direct* (one hop); the protocols above want only direct links
and delegate the others away.

**Passing a reference** (a :class:`Ref` inside a group message) never hands out the relay
itself: the receiver gets a fresh OUT relay pointing at it (spec §2.1, the slides' "u is newly
created, so no incoming links"). So a node reaches v directly only if v handed out its own IN
relay (safe introduction), and forwarding someone else's reference lengthens the chain.

**Incoming links** are what makes deletion safe (Scheideler's lecture Theorem 9.3 needs the relay
graph to stay weakly connected). Every relay counts its *holders*: each Ref to it that is sent
counts one for the sink it is sent towards (that is E_M, a reference in transit), and a holder that
drops its relay sends ``Release`` (E_L gone). A relay the protocol deletes while something still
points at it stays as a forwarding *zombie* until its holders reach zero. Counts are never below the
truth (spec §6): a Release is applied only once every frame the holder sent through its relay has
arrived (its ``sent`` against our ``recv``), so it never overtakes data; a frame for an unknown
relay is answered with ``RelayGone`` and its Refs released; a holder that is gone (``PeerDown``) is
forgotten; an owner whose relay should go but still shows holders asks them (``Probe`` /
``HoldCount``), skipping a holder it counted a reference towards within ``grace`` (that reference
may still be in flight).

The rule that keeps it correct
==============================
**A relay's holder count is never below the number of relays and in-transit references
pointing at it**; so a relay is never collected while something can still reach it, and the
relay graph stays weakly connected through every delete (spec §2.2, §6).

Every node also has an IN relay PORT (rid 0, never counted, never deleted): ``Start(contacts)``
gives each node a bootstrap OUT relay to its contact's PORT (spec §2.4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pubmesh.proto.core import Message, NodeId, Send
from pubmesh.proto.relay.messages import (
    Adopt,
    HoldCount,
    Nudge,
    Probe,
    Ref,
    RelayGone,
    Release,
    SinkFix,
)

IN, OUT = "in", "out"
#: the rid of every node's PORT, the bootstrap IN relay (spec §2.4)
PORT = 0
#: group messages (the ones routed along relays) carry these header fields (spec §8)
HEADER = ("rid", "prev", "sink", "direct", "hop")
#: answers remembered before old ones are pruned (see RelayLayer._answered)
ANSWERED_KEPT = 4096
#: a frame that has crossed more relays than this is on a cycle (see RelayLayer._frame)
MAX_HOPS = 64
#: message classes routed along relays, registered by the stacks that define them
ROUTED: set[type[Message]] = set()


def routed(cls: type[Any]) -> type[Any]:
    """Mark a group message class (it has the :data:`HEADER` fields and may carry Refs)."""
    names = {f.name for f in dataclasses.fields(cls)}
    missing = [h for h in HEADER if h not in names]
    if missing:
        raise TypeError(f"{cls.__name__} lacks the relay header fields {missing}")
    ROUTED.add(cls)
    _REF_FIELDS[cls] = tuple(
        f.name for f in dataclasses.fields(cls) if "Ref" in str(f.type) and f.name not in HEADER
    )
    return cls


_REF_FIELDS: dict[type, tuple[str, ...]] = {}


def refs_of(message: Message) -> list[tuple[str, Ref]]:
    """The Refs a group message carries, by field name (spec §10.1: by walking the fields)."""
    out = []
    for name in _REF_FIELDS.get(type(message), ()):
        value = getattr(message, name)
        if isinstance(value, Ref):
            out.append((name, value))
    return out


@dataclass(slots=True, eq=False)
class Relay:
    """One relay (spec §2.3 state)."""

    rid: int
    kind: str
    #: the topic instance it belongs to (None: the node's PORT and bootstrap relays)
    key: Hashable | None
    #: an OUT relay's next relay (node, rid); None for an IN relay
    next: tuple[NodeId, int] | None
    sink: NodeId
    direct: bool
    born: float = 0.0
    #: holder node -> relays and references pointing here (never below the truth)
    holders: dict[NodeId, int] = field(default_factory=dict)
    #: when a reference towards each holder was last counted (Probe grace)
    counted: dict[NodeId, float] = field(default_factory=dict)
    zombie: bool = False
    #: frames sent through it (an OUT relay's Release says how many to wait for)
    sent: int = 0
    #: when it was first found to be due for collection with holders left (Probe)
    due_since: float | None = None
    #: a materialized OUT relay whose owner counted it towards another process: an Adopt
    #: went out, so its Release must say so (it waits for the Adopt)
    adopted: bool = False
    #: owner side: the probe epoch per holder, and the references counted towards each
    #: holder since the last Probe to it (added to its answer)
    epochs: dict[NodeId, int] = field(default_factory=dict)
    fresh: dict[NodeId, int] = field(default_factory=dict)
    #: the epoch of the last Probe answer applied per holder (one below ``epochs``: an
    #: answer is pending, and decrements of that epoch wait for it)
    answered: dict[NodeId, int] = field(default_factory=dict)
    #: holder side (an OUT relay): the epoch of the count the owner keeps for it (its Release
    #: carries it; -1: unknown, an adopted relay, whose Release the owner ignores)
    epoch: int = 0

    @property
    def incoming(self) -> bool:
        """Something points at this relay (Scheideler's lecture: r.incoming)."""
        return any(self.holders.values())

    def key_order(self) -> tuple[bool, float, int]:
        """spec §2.2 redundant(): direct first, then older, then by rid."""
        return (not self.direct, self.born, self.rid)


@dataclass(frozen=True, slots=True)
class Delivery:
    """A group frame arrived at one of our IN relays: the relay, the frame and the OUT relays
    materialized from its Refs (by field name)."""

    relay: Relay
    message: Message
    refs: dict[str, Relay]


@dataclass
class Outcome:
    """What one call into the layer produced: frames to send, frames for the instances,
    relays killed (their instances must drop them)."""

    sends: list[Send] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    killed: list[Relay] = field(default_factory=list)
    #: our relays whose target's owner nudged us (Nudge): the instance may speak through them
    nudged: list[Relay] = field(default_factory=list)


class RelayLayer:
    """The relays of one node (module doc)."""

    def __init__(self, me: NodeId, rng: Any, *, probe_after: float, grace: float) -> None:
        self.me = me
        self.rng = rng
        self.probe_after = probe_after
        self.grace = grace
        self.relays: dict[int, Relay] = {}
        #: frames received per (our relay, sender, sender's relay): Release waits for them
        self.recv: dict[tuple[int, NodeId, int], int] = {}
        #: Releases waiting for their frames (and Adopt, and the answer to a Probe of their
        #: epoch): (rid, src, prev, sent, adopted, epoch); prev None: an Adopt's decrement
        #: of the holder ``src`` the reference had been counted towards
        self.waiting: list[tuple[int, NodeId, int | None, Any, bool, Any]] = []
        #: Adopts arrived, (our relay, sender, sender's relay), until its Release
        #: with the epoch of the sender's count when it arrived
        self.adopted: dict[tuple[int, NodeId, int], int] = {}
        self.port = Relay(PORT, IN, None, None, me, True)
        self.relays[PORT] = self.port
        self.counters: dict[str, int] = {}
        #: holder side: the last Probe epoch answered per (owner, rid), and when
        self.answered_for: dict[tuple[NodeId, int], tuple[int, float]] = {}
        #: peers reported down, and when (their holder counts go after ``grace``)
        self.down: dict[NodeId, float] = {}

    # ------------------------------------------------------------------ making relays
    def _rid(self) -> int:
        while True:
            rid = self.rng.getrandbits(63)
            if rid and rid not in self.relays:
                return int(rid)

    def new_in(self, key: Hashable, now: float) -> Relay:
        relay = Relay(self._rid(), IN, key, None, self.me, True, born=now)
        self.relays[relay.rid] = relay
        return relay

    def new_out(
        self,
        key: Hashable | None,
        target: tuple[NodeId, int],
        sink: NodeId,
        direct: bool,
        now: float,
    ) -> Relay:
        relay = Relay(self._rid(), OUT, key, target, sink, direct, born=now)
        self.relays[relay.rid] = relay
        return relay

    def ref(self, relay: Relay) -> Ref:
        """A reference to one of our relays, to pass in a group message."""
        return Ref(owner=self.me, rid=relay.rid, sink=relay.sink, is_in=relay.kind == IN)

    def get(self, rid: int) -> Relay | None:
        return self.relays.get(rid)

    # ------------------------------------------------------------------ sending
    def send(self, relay: Relay, message: Message, now: float) -> Send | None:
        """``relay ← message`` (spec §2.3 Send): the first hop of the chain, with our relays'
        holders counted for the references it carries. None for a relay that is not an OUT
        relay of ours (an IN relay is a local call, the caller's business)."""
        if relay.kind != OUT or relay.next is None or self.relays.get(relay.rid) is not relay:
            return None
        node, rid = relay.next
        header: dict[str, Any] = {
            "rid": rid, "prev": relay.rid, "sink": relay.sink, "direct": relay.direct, "hop": 1
        }  # fmt: skip
        for name, ref in refs_of(message):
            if ref.owner == self.me:
                mine = self.relays.get(ref.rid)
                if mine is not None and mine is not self.port:
                    sink = relay.sink
                    mine.holders[sink] = mine.holders.get(sink, 0) + 1
                    mine.fresh[sink] = mine.fresh.get(sink, 0) + 1
                    mine.counted[sink] = now
                    epoch = mine.epochs.get(sink, 0)
                    header[name] = dataclasses.replace(ref, holder=sink, epoch=epoch)
        frame: Message = dataclasses.replace(message, **header)
        relay.sent += 1
        return Send(node, frame)

    # ------------------------------------------------------------------ deleting
    def delete(self, relay: Relay, out: Outcome) -> None:
        """The protocol forgets ``relay`` (Scheideler's lecture "delete r"): collected at once if
        nothing points at it, else kept as a forwarding zombie (spec §2.2)."""
        if relay is self.port or self.relays.get(relay.rid) is not relay:
            return
        if relay.incoming:
            relay.zombie = True
            relay.key = None
            return
        self._collect(relay, out)

    def _collect(self, relay: Relay, out: Outcome) -> None:
        del self.relays[relay.rid]
        if self.adopted:
            self.adopted = {a: e for a, e in self.adopted.items() if a[0] != relay.rid}
        if relay.kind == OUT and relay.next is not None:
            node, rid = relay.next
            release = Release(
                rid=rid, prev=relay.rid, sent=relay.sent, adopted=relay.adopted, epoch=relay.epoch
            )
            out.sends.append(Send(node, release))
        self._count("collected")

    def _count(self, name: str) -> None:
        self.counters[name] = self.counters.get(name, 0) + 1

    # ------------------------------------------------------------------ receiving
    def receive(self, src: NodeId, message: Message, now: float, out: Outcome) -> None:
        """A frame from ``src`` (spec §2.3 Receive and the bookkeeping messages)."""
        if self.down:
            self.down.pop(src, None)  # it is back (a restart)
        match message:
            case Release(rid=rid, prev=prev, sent=sent, adopted=adopted, epoch=epoch):
                self.waiting.append((rid, src, prev, sent, adopted is True, epoch))
                self._apply_releases(out)
            case Adopt(rid=rid, prev=prev, was=was, epoch=epoch):
                relay = self.relays.get(rid) if type(rid) is int else None
                if relay is None or relay is self.port or type(prev) is not int:
                    return
                if type(was) is not int:
                    return
                if epoch == relay.epochs.get(was, 0):
                    # the reference never reached ``was``: its count goes, once the answer
                    # to a Probe of this epoch (which would replace the count) is in
                    self.waiting.append((rid, was, None, 0, False, epoch))
                if prev:
                    relay.holders[src] = relay.holders.get(src, 0) + 1
                    relay.fresh[src] = relay.fresh.get(src, 0) + 1
                    self.adopted[(rid, src, prev)] = relay.epochs.get(src, 0)
                self._apply_releases(out)
            case RelayGone(rid=rid):
                relay = self.relays.get(rid)
                if (
                    relay is not None
                    and relay.kind == OUT
                    and relay.next is not None
                    and (relay.next[0] == src)
                ):
                    self._kill(relay, out)
            case SinkFix(rid=rid, sink=sink, direct=direct):
                relay = self.relays.get(rid)
                if (
                    relay is not None
                    and relay.kind == OUT
                    and relay.next is not None
                    and relay.next[0] == src
                    and type(sink) is int
                    and sink >= 0
                ):
                    relay.sink, relay.direct = sink, bool(direct) and relay.next[0] == sink
            case Probe(rids=rids, epochs=epochs):
                pairs = []
                answered: list[Any] = []
                stamps = epochs if isinstance(epochs, tuple) and len(epochs) == len(rids) else ()
                for index, rid in enumerate(rids):
                    if type(rid) is not int:
                        continue
                    mine = self._holding(src, rid)
                    if stamps and type(stamps[index]) is int:
                        # relays made from references counted after the Probe went carry
                        # its epoch already: the owner adds those itself (``fresh``)
                        stamp = stamps[index]
                        self._answered(src, rid, stamp, now)
                        held = sum(1 for relay in mine if relay.epoch != stamp)
                        for relay in mine:
                            relay.epoch = stamp
                    else:
                        held = len(mine)
                    pairs.append((rid, held))
                    answered.append(stamps[index] if stamps else 0)
                out.sends.append(Send(src, HoldCount(pairs=tuple(pairs), epochs=tuple(answered))))
            case Nudge(rid=rid):
                if type(rid) is int:
                    out.nudged.extend(
                        r
                        for r in sorted(self.relays.values(), key=lambda r: r.rid)
                        if r.kind == OUT and r.next == (src, rid) and not r.zombie
                    )
            case HoldCount(pairs=pairs, epochs=epochs):
                stamps = epochs if isinstance(epochs, tuple) and len(epochs) == len(pairs) else ()
                for index, pair in enumerate(pairs):
                    if type(pair) is not tuple or len(pair) != 2:
                        continue
                    rid, held = pair
                    relay = self.relays.get(rid) if type(rid) is int else None
                    if relay is None or type(held) is not int or held < 0:
                        continue
                    epoch = stamps[index] if stamps else relay.epochs.get(src, 0)
                    if epoch != relay.epochs.get(src, 0):
                        continue  # the answer to an older Probe: a newer one is on its way
                    relay.answered[src] = epoch
                    # references counted towards it since the Probe went may be in flight
                    held += relay.fresh.get(src, 0)
                    if held:
                        relay.holders[src] = held
                    else:
                        relay.holders.pop(src, None)
                    self._maybe_collect(relay, out)
                self._apply_releases(out)
            case _ if type(message) in ROUTED:
                self._frame(src, message, now, out)

    def _frame(self, src: NodeId, message: Any, now: float, out: Outcome) -> None:
        rid, prev, hop = message.rid, message.prev, message.hop
        if type(rid) is not int or type(prev) is not int or type(hop) is not int:
            return
        relay = self.relays.get(rid)
        if relay is not None and hop > MAX_HOPS:
            # a chain this long is a cycle of relays (a corrupted state's): the sender's relay
            # goes, which breaks the cycle (ours; the spec has no cycles, its states do)
            relay = None
            self._count("hop_limit")
        if relay is None:
            # spec §2.3: the relay is gone; the sender kills its own, and the counts kept for
            # the references the frame carried go
            out.sends.append(Send(src, RelayGone(rid=prev)))
            self._disown(message, out)
            self._count("relay_gone")
            return
        key = (rid, src, prev)
        self.recv[key] = self.recv.get(key, 0) + 1
        if relay.kind == OUT:
            assert relay.next is not None
            if message.sink != relay.sink or message.direct:
                out.sends.append(Send(src, SinkFix(rid=prev, sink=relay.sink, direct=False)))
            node, nxt = relay.next
            frame = dataclasses.replace(
                message, rid=nxt, prev=relay.rid, sink=relay.sink, direct=relay.direct, hop=hop + 1
            )
            relay.sent += 1
            out.sends.append(Send(node, frame))
            self._count("forwarded")
        else:
            # the header's direct claim is the last relay's, which points at this IN relay,
            # so it is direct whatever the chain before it (the spec's §2.3 test
            # "direct ≠ (hop = 1)" would mark a direct relay that forwarded a longer chain
            # indirect, and the next frame would flip it back: found in the first runs)
            if message.sink != self.me or not message.direct:
                out.sends.append(Send(src, SinkFix(rid=prev, sink=self.me, direct=True)))
            if relay.zombie:
                # the instance it belonged to is gone: nothing behind it, so the sender's
                # relay goes too (RelayGone; its count here is probed away)
                out.sends.append(Send(src, RelayGone(rid=prev)))
                self._disown(message, out)
                self._apply_releases(out)
                return
            refs: dict[str, Relay] = {}
            for name, ref in refs_of(message):
                if ref.owner < 0 or ref.sink < 0 or type(ref.holder) is not int:
                    continue
                made = self.new_out(relay.key, (ref.owner, ref.rid), ref.sink, ref.is_in, now)
                made.epoch = ref.epoch if type(ref.epoch) is int else -1
                answered = self.answered_for.get((ref.owner, ref.rid))
                late = answered is not None and type(ref.epoch) is int and ref.epoch < answered[0]
                if ref.holder != self.me or late:
                    # counted towards another process: move the count here (Adopt); or
                    # counted towards us before a Probe we answered without it: report it
                    made.adopted = True
                    made.epoch = -1
                    adopt = Adopt(rid=ref.rid, prev=made.rid, was=ref.holder, epoch=ref.epoch)
                    out.sends.append(Send(ref.owner, adopt))
                refs[name] = made
            out.deliveries.append(Delivery(relay, message, refs))
        self._apply_releases(out)

    def _disown(self, message: Any, out: Outcome) -> None:
        """The frame's references make no relay here (its relay is gone, or a zombie): each
        count their owners keep for them goes (an Adopt with ``prev = 0``)."""
        for _, ref in refs_of(message):
            if ref.owner >= 0 and type(ref.holder) is int and ref.holder >= 0:
                adopt = Adopt(rid=ref.rid, prev=0, was=ref.holder, epoch=ref.epoch)
                out.sends.append(Send(ref.owner, adopt))

    def _apply_releases(self, out: Outcome) -> None:
        """Releases whose frames (and Adopt) have all arrived (spec §2.3: never overtaking
        data; a Release overtaking its Adopt would lower the count of another relay)."""
        still = []
        for entry in self.waiting:
            rid, src, prev, sent, adopted, epoch = entry
            relay = self.relays.get(rid)
            pending = (
                relay is not None
                and type(epoch) is int
                and relay.answered.get(src, 0) < epoch == relay.epochs.get(src, 0)
            )
            if prev is None:  # an Adopt's decrement of the holder it was counted towards
                if relay is None or relay is self.port:
                    continue
                if pending:
                    still.append(entry)
                    continue
                if epoch == relay.epochs.get(src, 0):
                    self._lower(relay, src)
                self._maybe_collect(relay, out)
                continue
            key = (rid, src, prev)
            if relay is None or relay is self.port:
                self.recv.pop(key, None)
                self.adopted.pop(key, None)
                continue
            if pending:
                # a Probe of this epoch is unanswered: its answer may have been made before
                # this Release was sent, and would undo it
                still.append(entry)
                continue
            if (type(sent) is int and self.recv.get(key, 0) < sent) or (
                adopted and key not in self.adopted
            ):
                still.append(entry)
                continue
            self.recv.pop(key, None)
            at_adopt = self.adopted.pop(key, None)
            if epoch == -1 and at_adopt is not None:
                epoch = at_adopt  # never probed since: the epoch its Adopt was counted in
            if epoch == relay.epochs.get(src, 0):
                # an older epoch's Release is in the Probe answer that started this one
                self._lower(relay, src)
            self._maybe_collect(relay, out)
        self.waiting = still

    def _maybe_collect(self, relay: Relay, out: Outcome) -> None:
        if relay.zombie and not relay.incoming and self.relays.get(relay.rid) is relay:
            self._collect(relay, out)

    def _kill(self, relay: Relay, out: Outcome) -> None:
        """The relay's next is gone: drop it without a Release (nothing to release)."""
        self.relays.pop(relay.rid, None)
        out.killed.append(relay)
        self._count("killed")

    # ------------------------------------------------------------------ failures
    def peer_down(self, peer: NodeId, now: float, out: Outcome) -> None:
        """``peer`` is gone (spec §2.3): relays whose next is there die, and it holds nothing
        once ``grace`` has passed: a reference counted towards it may be in flight to
        another process (a relay with a wrong cached sink), whose Adopt moves the count there
        (found by the model test). Its counts go at the next Probe round after that."""
        for relay in sorted(self.relays.values(), key=lambda r: r.rid):
            if relay.kind == OUT and relay.next is not None and relay.next[0] == peer:
                self._kill(relay, out)
        self.down[peer] = now
        self.waiting = [w for w in self.waiting if w[1] != peer]
        self.adopted = {a: e for a, e in self.adopted.items() if a[1] != peer}

    def probe(
        self, due: Iterable[Relay], now: float, out: Outcome, *, at_once: bool = False
    ) -> None:
        """Ask the holders of relays that should go (spec §2.3 Probe) once they have shown
        holders for ``probe_after`` (``at_once``: now, for a relay whose count the protocol
        reads, like d2g's ``in``). A holder counted within ``grace`` is skipped (a reference
        counted before the Probe may still be in flight: the answer would miss it); for an
        ``at_once`` probe within grace / 4 only (spec §8: T ≥ 5× a 3-hop chain, so T / 2
        covers delivery), as a count refreshed every round would otherwise never be probed.
        A reference that still arrives after the answer is reported then (an Adopt to
        itself, see _frame)."""
        window = self.grace / 4 if at_once else self.grace
        asks: dict[NodeId, list[int]] = {}
        for relay in due:
            if not relay.incoming:
                relay.due_since = None
                continue
            if relay.due_since is None:
                relay.due_since = now
            if now - relay.due_since < self.probe_after and not at_once:
                continue
            for holder in sorted(relay.holders):
                if holder in self.down:
                    if now - self.down[holder] >= self.grace:
                        del relay.holders[holder]
                        self._maybe_collect(relay, out)
                    continue
                if now - relay.counted.get(holder, -1e18) < window:
                    continue
                relay.epochs[holder] = relay.epochs.get(holder, 0) + 1
                relay.fresh[holder] = 0
                if holder == self.me:
                    # a count towards ourselves (a corrupted state's, or a reference we sent
                    # to our own instance): our own table answers at once
                    mine = self._holding(holder, relay.rid)
                    for own in mine:
                        own.epoch = relay.epochs[holder]
                    relay.holders[holder] = len(mine)
                    if not relay.holders[holder]:
                        del relay.holders[holder]
                        self._maybe_collect(relay, out)
                    continue
                asks.setdefault(holder, []).append(relay.rid)
        for holder in sorted(asks):
            rids = tuple(sorted(asks[holder]))
            epochs = tuple(self.relays[rid].epochs[holder] for rid in rids)
            out.sends.append(Send(holder, Probe(rids=rids, epochs=epochs)))
            self._count("probes")

    def _answered(self, owner: NodeId, rid: int, epoch: int, now: float) -> None:
        """Remember the last Probe epoch we answered for ``owner``'s relay ``rid``: a
        reference stamped with an older one that arrives later was not in that answer."""
        self.answered_for[(owner, rid)] = (epoch, now)
        if len(self.answered_for) > ANSWERED_KEPT:
            # references are delivered within seconds; forget answers a minute old
            self.answered_for = {
                key: value for key, value in self.answered_for.items() if now - value[1] < 60.0
            }

    def _held(self, owner: NodeId, rid: int) -> int:
        """How many of our relays point at ``owner``'s relay ``rid`` (a Probe's answer)."""
        return len(self._holding(owner, rid))

    def _holding(self, owner: NodeId, rid: int) -> list[Relay]:
        return [r for r in self.relays.values() if r.kind == OUT and r.next == (owner, rid)]

    @staticmethod
    def _lower(relay: Relay, holder: NodeId) -> None:
        if relay.holders.get(holder, 0) > 0:
            relay.holders[holder] -= 1
            if not relay.holders[holder]:
                del relay.holders[holder]

    def zombies(self) -> list[Relay]:
        return [r for r in self.relays.values() if r.zombie]

    def peers(self) -> set[NodeId]:
        """Next-hop owners and holder nodes (spec §2.3 monitored peers)."""
        out: set[NodeId] = set()
        for relay in self.relays.values():
            if relay.next is not None:
                out.add(relay.next[0])
            out.update(h for h, k in relay.holders.items() if k)
        out.discard(self.me)
        out.difference_update(self.down)
        return out
