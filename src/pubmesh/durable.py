"""What a node keeps across its lives, for both runtimes.

The network runtime keeps it in the node's data directory (:mod:`pubmesh.net.store`); the
simulator's ``recover`` fault with ``durable = true`` brings a node back with the same subset,
by the same rule (:class:`DeliveredMemory`): the ids of the publications it delivered in the
last ``DELIVERED_SECONDS``, none of which it delivers again in its next life, its stack's
``durable()`` state, and the topic history it retained (:func:`retained_now`). (Its address
and subscriptions come back too: in the simulator a node keeps its id and the plan
resubscribes every recovered node.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pubmesh.proto.core import StackNode
    from pubmesh.proto.history import Retained

#: seconds of delivered ids kept: a copy older than this is stale to every stack's own
#: duplicate filter too (gossip keeps ids 90 s; identity mode refuses copies signed before
#: the node started)
DELIVERED_SECONDS = 600.0


class DeliveredMemory:
    """One node's delivered ids with their times, as its data directory holds them."""

    __slots__ = ("_at",)

    def __init__(self) -> None:
        self._at: dict[int, float] = {}

    def record(self, pub_id: int, t: float) -> None:
        self._at[pub_id] = t
        if len(self._at) > 4096 and len(self._at) & 4095 == 0:
            self.forget_before(t - DELIVERED_SECONDS)

    def forget_before(self, t: float) -> None:
        self._at = {p: at for p, at in self._at.items() if at >= t}

    def remembered(self, now: float) -> frozenset[int]:
        """The ids a node started again at ``now`` does not deliver again."""
        return frozenset(p for p, at in self._at.items() if at >= now - DELIVERED_SECONDS)


def retained_now(node: StackNode) -> list[tuple[str, Retained]]:
    """The topic history ``node`` retains (``StackNode.retentions``), oldest first per topic:
    what its data directory holds of it (the simulator keeps it at a durable crash; the
    network runtime writes it at each group commit)."""
    return [
        (retention.topic, item)
        for retention in node.retentions()
        for item in retention.items.values()
    ]
