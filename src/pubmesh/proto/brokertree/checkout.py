"""The check-out queue (Kazemzadeh & Jacobsen §9 "message queue manager";
docs/protocols/brokertree.md §4, §12.2).

Every publication, subscription and unsubscription a node forwards goes through one FIFO queue.
Each active connection has a *pointer* that moves along the queue and checks out the entries
relevant to its peer, in queue order [P §9]: "Active connection objects have pointers that move
along this queue and check out messages if they correspond to a node on the outPath of the
message." Because every connection checks out in the same order and the sessions below are
FIFO, a node's messages reach each peer in the order the node numbered them, the property
isDuplicate (Fig. 5) and per-publisher delivery order rest on.

Spec §12.2: a list plus a dict by origin; pointers are absolute indices over a base offset, and
the confirmed head is compacted, so a pointer never has to move when entries leave.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field

from pubmesh.proto.brokertree.messages import OriginT, ParInfoT, Pub, SeqT, Sub, Unsub, Vect
from pubmesh.proto.core import NodeId


class Kind(enum.StrEnum):
    """What a queue entry carries."""

    PUB = "pub"
    SUB = "sub"
    UNSUB = "unsub"


PUB, SUB, UNSUB = Kind  # by their short names, in order


@dataclass(slots=True, eq=False)
class Entry:
    """One queued message (spec §4): the message as received (or made, at its source), the
    node's own sequence number for it, the seqVect as received, who sent copies, the recipient
    set and the peers whose confirmation is awaited."""

    kind: Kind
    origin: OriginT
    message: Pub | Sub | Unsub
    lseq: SeqT
    vin: Vect
    rcpt: frozenset[NodeId]
    senders: set[NodeId] = field(default_factory=set)
    #: peers sent a copy whose Conf is awaited (spec §4 rule CF)
    out: set[NodeId] = field(default_factory=set)
    #: partition information gathered from partial confirmations (Kazemzadeh & Jacobsen §3.5)
    parinfo: set[ParInfoT] = field(default_factory=set)
    #: links that stalled at this entry (reported once each)
    stalled: set[NodeId] = field(default_factory=set)
    index: int = -1
    #: confirmed (conf-acknowledged kinds) and kept only for the dack purge
    confirmed: bool = False
    #: time the entry was queued (for the trace and dack statistics)
    t: float = 0.0


class CheckoutQueue:
    """Entries in arrival order, addressed by absolute index; removed entries leave a hole
    that the head compaction reclaims."""

    __slots__ = ("_by_origin", "_items", "_skip", "base")

    def __init__(self) -> None:
        self._items: list[Entry | None] = []
        #: index into _items of the first slot still kept
        self._skip = 0
        #: absolute index of _items[0]
        self.base = 0
        self._by_origin: dict[OriginT, Entry] = {}

    def __len__(self) -> int:
        return len(self._by_origin)

    @property
    def head(self) -> int:
        """Absolute index of the oldest slot kept (a pointer reset starts here)."""
        return self.base + self._skip

    @property
    def end(self) -> int:
        return self.base + len(self._items)

    def at(self, index: int) -> Entry | None:
        i = index - self.base
        if i < self._skip or i >= len(self._items):
            return None
        return self._items[i]

    def get(self, origin: OriginT) -> Entry | None:
        return self._by_origin.get(origin)

    def append(self, entry: Entry) -> None:
        entry.index = self.end
        self._items.append(entry)
        self._by_origin[entry.origin] = entry

    def remove(self, entry: Entry) -> None:
        if self._by_origin.get(entry.origin) is not entry:
            return
        del self._by_origin[entry.origin]
        self._items[entry.index - self.base] = None
        items = self._items
        while self._skip < len(items) and items[self._skip] is None:
            self._skip += 1
        if self._skip > 1024 and self._skip * 2 > len(items):
            del items[: self._skip]
            self.base += self._skip
            self._skip = 0

    def entries(self) -> Iterator[Entry]:
        """Live entries in queue order."""
        for item in self._items[self._skip :]:
            if item is not None:
                yield item
