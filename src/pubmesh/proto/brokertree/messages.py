"""Wire messages of the brokertree stack (docs/protocols/brokertree.md §10; tags 400–499).

Every frame carries its session id and frame number, ``sid`` and ``n`` (spec §2 "Links"): the
simulator's links are not FIFO, and the protocol needs FIFO, loss-free sessions (Kazemzadeh &
Jacobsen §5.1(ii), §9: TCP), so :mod:`pubmesh.proto.brokertree.session` numbers the frames of each
direction of a session and releases them in order. The fields are declared on each class rather than
inherited, so every message stays one flat frozen dataclass for the codec, the trace and the
compiled build.

Layer "brokertree.ctl" (no payload) for all but ``Pub`` (spec §10).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.core import Message, register_message

CTL = "brokertree.ctl"


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello(Message):
    """Opens session ``sid`` (frame 0 of the dialer's direction) [P §4.2]: the dialer's
    ``epoch`` (when its incarnation started, spec §2 "Sequence numbers") and ``kind``.

    ``after`` is ours [R], not the spec's: the sid of the dialer's last session with the
    acceptor (0: none). Over non-FIFO links a Hello that lost a simultaneous dial (spec §12.1:
    the lower id's dial is kept) can arrive after the winning session opened, and so can the
    Hello of a peer that ended that session (a suspicion) and dials again; only the second
    names the open session in ``after``, and only it may replace the session.

    ``wiring`` is ours too: a digest of the broker list, in its order, and of the parameters
    that shape the tree (:func:`pubmesh.proto.brokertree.topology.wiring`). Every node
    computes the same tree from them (spec §2); a node started with another list or another
    δ computes another tree and, unchecked, never received a thing while nobody said why.
    A Hello whose wiring differs from the acceptor's is answered with a HelloAck carrying the
    acceptor's, and opens nothing: both sides report the mismatch and treat the other as
    failed."""

    sid: int
    n: int
    epoch: float
    kind: str
    after: int
    wiring: int = 0


register_message(Hello, 400, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloAck(Message):
    """Accepts session ``sid`` (frame 0 of the acceptor's direction), with the acceptor's
    ``epoch``, ``kind`` and ``wiring`` (a different wiring: refused, see :class:`Hello`)."""

    sid: int
    n: int
    epoch: float
    kind: str
    wiring: int = 0


register_message(HelloAck, 401, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reset(Message):
    """ "No such session": the answer to a frame on an unknown or old ``sid`` (a TCP RST,
    spec §2). The sender of that frame treats the session as failed."""

    sid: int
    n: int


register_message(Reset, 402, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat(Message):
    """Keeps an idle session's peer from suspecting us (spec §2: every ``hb_period``)."""

    sid: int
    n: int


register_message(Heartbeat, 403, layer=CTL)


# ----------------------------------------------------------------------------- value types
#: a local sequence number (spec §2): (epoch, k), compared lexicographically
SeqT = tuple[float, int]
#: one seqVect entry: a node and its number, or None (⊥) for a bypassed node
VectEntry = tuple[int, SeqT | None]
#: a seqVect, newest first: entry k names the node k + 1 hops upstream of the receiver
Vect = tuple[VectEntry, ...]
#: a message's identity: its source and the source's sequence number for it
OriginT = tuple[int, SeqT]
#: partition information ⟨lead, seq, lFrag, recovered⟩ (Kazemzadeh & Jacobsen §3.5; π̄ when
#: recovered)
ParInfoT = tuple[int, SeqT, tuple[int, ...], bool]
#: a subscription tuple in a summary: origin, topic, filter (canonical JSON text), the vect as
#: stored by the sender, and the sender's own sequence number for it (spec §7.2)
TupleT = tuple[OriginT, str, str, Vect, SeqT]
#: a dack entry ⟨A, B : seq⟩: A's arrival (or discard) of B's sequence number seq [P §8]
DackEntry = tuple[int, int, SeqT]


@dataclass(frozen=True, slots=True, kw_only=True)
class LSeq(Message):
    """The activation handshake's sequence exchange [P §4.2.1] (spec §7.1): ``request`` is sent
    by the side that activates the connection (``gen`` numbers its activations), the answer
    echoes ``gen``. Each carries what its sender holds of the peer: ``lseq_sub``, the peer's
    highest sequence number found in the sender's subscription tuples, and ``lseq_msg``,
    highSeq(peer) of Fig. 5."""

    sid: int
    n: int
    request: bool
    gen: int
    lseq_sub: SeqT | None
    lseq_msg: SeqT | None
    #: ours [R]: the sender knew an older incarnation of the receiver (so the receiver is a
    #: restarted node that lost its table), and the sender is itself such a node, still
    #: recovering (so it wants a whole table, not [P §4.2.1]'s share of one)
    knew: bool
    recovering: bool


register_message(LSeq, 404, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pub(Message):
    """A publication [P §2.2, §6] (spec §6.2): ``origin`` = (publisher, its seq), the seqVect
    as sent on this hop, ``hops`` transmissions so far, partition ``tags`` [P §3.5]."""

    sid: int
    n: int
    origin: OriginT
    pub_id: int
    topic: str
    attributes: Mapping[str, Any]
    payload: bytes
    vect: Vect
    hops: int
    tags: tuple[ParInfoT, ...]

    def publication(self) -> int | None:
        return self.pub_id


register_message(Pub, 405, layer="brokertree.pub", payload=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Sub(Message):
    """A subscription [P §3.1] (spec §5): ``filter`` is the content filter (the topic rides
    apart, as the ``$topic`` constraint every node adds)."""

    sid: int
    n: int
    origin: OriginT
    topic: str
    filter: Mapping[str, Any]
    vect: Vect


register_message(Sub, 406, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsub(Message):
    """An unsubscription (spec §9): travels like a Sub; ``target`` is the subscription's
    origin, removed where the Unsub is confirmed."""

    sid: int
    n: int
    origin: OriginT
    target: OriginT
    vect: Vect


register_message(Unsub, 407, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Conf(Message):
    """Confirmation of the messages ``keys`` (their origins) [P §2.2] (spec §4 rule CF),
    batched per session and event (spec §12.5). ``parinfo`` makes it partial (Kazemzadeh & Jacobsen
    §3.5 case 2): the large fragments that kept the subscriptions from propagating fully. A
    node keeps π while its lead is within 2δ + 1 hops [P §3.5]; the spec (§5) adds a hop
    count because the lead may lie outside the map, but every node here knows the whole tree
    (:mod:`.view`), so the distance is exact and no count travels."""

    sid: int
    n: int
    keys: tuple[OriginT, ...]
    parinfo: tuple[ParInfoT, ...]


register_message(Conf, 408, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class SubSummary(Message):
    """Subscription tuples (and unsubscription tombstones) the receiver may lack [P §4.2.1]
    (spec §7.2), in chunks; ``last`` marks the final chunk of one transfer. ``parinfo`` carries
    the partition entries whose leads lie within 2δ + 1 of the receiver [P §4.2]."""

    sid: int
    n: int
    tuples: tuple[TupleT, ...]
    tombstones: tuple[OriginT, ...]
    parinfo: tuple[ParInfoT, ...]
    last: bool
    #: ours [R]: with ``last``, the transfer was the sender's whole table and the sender had
    #: lost nothing (a recovering receiver is complete once it has one such transfer)
    complete: bool


register_message(SubSummary, 409, layer=CTL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Dack(Message):
    """A depth acknowledgement [P §8] (spec §8): ⟨A, B : seq⟩ entries for A on the sender's
    side and B on the receiver's side within δ + 1 hops of each other, ``arrived`` (highest
    seq of B that A received) and ``discarded`` (B's seq up to which A purged everything)."""

    sid: int
    n: int
    arrived: tuple[DackEntry, ...]
    discarded: tuple[DackEntry, ...]


register_message(Dack, 412, layer=CTL)


#: the messages a node checks out of its queue (spec §4)
QUEUED = (Pub, Sub, Unsub)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopoSummary(Message):
    """Part of the receiver's topology map (spec §3, §10): ``edges`` (client, broker) of the
    subscriber clients within δ + 1 hops of it. A broker tells each client that connects to it, and
    each time a new subscriber appears, so that a publisher client can route to the subscribers
    around its broker when that broker fails (Kazemzadeh & Jacobsen §13: a client connects to the
    failed broker's farther neighbours, "which may include both brokers and other clients"). Brokers
    compute the tree themselves (:mod:`.view`) and need none."""

    sid: int
    n: int
    edges: tuple[tuple[int, int], ...]
    last: bool


register_message(TopoSummary, 415, layer=CTL)


# ------------------------------------------------------------------------------ topic history
HISTORY = "history"


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryAsk(Message):
    """A late subscriber's history query (spec §14, not in the paper), outside the
    sessions: sent by ``asker`` straight to every broker, and by each broker to the clients
    it has a session with. ``filter`` is the subscription's content filter (as in
    :class:`Sub`), ``count``/``seconds`` the request (0: no limit), ``qid`` the asker's number
    for the query; the items go straight back to the asker."""

    topic: str
    filter: Mapping[str, Any]
    count: int
    seconds: float
    asker: int
    qid: int


register_message(HistoryAsk, 420, layer=HISTORY)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPub(Message):
    """One retained publication of the sender, sent straight to the asker of query ``qid``
    (spec §14): ``seq`` is the sender's own sequence number for it (the origin of its live
    copies, which the asker's per-publisher high-water mark compares); ``age``: seconds since
    the sender published it."""

    topic: str
    pub_id: int
    payload: bytes
    attributes: Mapping[str, Any]
    seq: SeqT
    qid: int
    age: float

    def publication(self) -> int | None:
        return self.pub_id


register_message(HistoryPub, 421, layer=HISTORY, payload=True)
