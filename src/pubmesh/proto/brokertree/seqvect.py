"""Sequence vectors: legitimacy, duplicate detection and ``from`` (Kazemzadeh & Jacobsen §2.2,
§5.2–§5.4, Fig. 5; docs/protocols/brokertree.md §2 "Sequence numbers", §5, §6.3–§6.4).

Every node N that receives a message for the first time gives it a local sequence number
``seq_N`` (spec §2: ``(epoch, k)``, compared lexicographically, so a recovered node's numbers
exceed its old ones). A copy N sends to M while bypassing N₁ … N_k carries

    vect' = [(N_k, ⊥), …, (N₁, ⊥), (N, seq_N)] + vect     (cut to 3δ + 1 entries)

newest first: ``vect[k]`` is the node k + 1 hops upstream of the receiver (spec §5: this
resolves [P §5.3]'s "appended by N₁:⊥ … N_k:⊥, N:seq"; the 3δ + 1 is [P §5.7]'s history).

* **Legitimacy** [P §5.2 Def. 2, §5.3]: a propagation is legitimate iff every 2δ + 1 window
  of it holds at least δ + 1 visited nodes; the sender checks the window it extends: at most δ
  ⊥ among ``vect'[0:2δ+1]``. Paths shorter than 2δ + 1 always pass (a vector of fewer than
  2δ entries: with up to δ nodes bypassed per hop, two bypasses on a short path can exceed δ
  ⊥ while Def. 2 has no window to apply).
* **isDuplicate** [P Fig. 5]: over the non-⊥ entries of ``vect[0:2δ+1]``, each node once, a
  copy is a duplicate iff some ``seq`` does not exceed ``highSeq`` of its node; every entry
  updates ``highSeq`` either way. Lemma 1: this catches every legitimate duplicate.
* **from** [P §2.2]: the subscriber itself when it is at most δ + 1 hops away, else the node
  δ + 1 hops closer to it, i.e. ``vect[δ].node`` (spec §5 STEP-II; its [D1] checked this on
  1,621 hops). ⊥ entries still name their node, so ``from`` is defined across bypasses.

The paper pads seqVect with the source's own number; the spec (§5) drops the padding (Fig. 5
would flag every fresh copy, the source's entry repeated) and carries the origin apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from pubmesh.proto.core import NodeId

#: a local sequence number: (epoch, k)
Seq = tuple[float, int]
#: one seqVect entry: a node and its number, or None (⊥) for a bypassed node
Entry = tuple[NodeId, Seq | None]


def shifted(
    vect: Sequence[Entry], sender: NodeId, seq: Seq, bypassed: Sequence[NodeId], delta: int
) -> tuple[Entry, ...]:
    """The vector of the copy ``sender`` sends while bypassing ``bypassed`` (N₁ … N_k, in path
    order from the sender towards the receiver), cut to 3δ + 1 entries (spec §5)."""
    head: list[Entry] = [(node, None) for node in reversed(bypassed)]
    head.append((sender, seq))
    return tuple([*head, *vect][: 3 * delta + 1])


def legitimate(vect: Sequence[Entry], delta: int) -> bool:
    """[P §5.3]: at most δ ⊥ among the newest 2δ + 1 entries of an outgoing vector. A vector
    of fewer than 2δ entries belongs to a path of fewer than 2δ + 1 nodes, which Def. 2 leaves
    without a window to check ("paths shorter than 2δ + 1 are automatically legitimate")."""
    if len(vect) < 2 * delta:
        return True
    return sum(1 for _, seq in vect[: 2 * delta + 1] if seq is None) <= delta


def from_node(vect: Sequence[Entry], subscriber: NodeId, delta: int) -> NodeId:
    """The ``from`` of a subscription tuple at the receiver of ``vect`` [P §2.2]: the
    subscriber if it is at most δ + 1 hops away, else the node δ + 1 hops closer to it."""
    return vect[delta][0] if len(vect) > delta else subscriber


class HighSeq:
    """``highSeq`` of every node seen in the newest 2δ + 1 entries (Kazemzadeh & Jacobsen Fig. 5).
    The tree bounds the nodes that can appear (spec §12.4), so nothing expires."""

    __slots__ = ("delta", "high")

    def __init__(self, delta: int) -> None:
        self.delta = delta
        self.high: dict[NodeId, Seq] = {}

    def is_duplicate(self, vect: Sequence[Entry]) -> bool:
        """Fig. 5: True iff some non-⊥ entry does not exceed its node's highSeq; every entry
        raises highSeq either way. Each node is looked at once (its newest entry)."""
        duplicate = False
        seen: set[NodeId] = set()
        high = self.high
        for node, seq in vect[: 2 * self.delta + 1]:
            if seq is None or node in seen:
                continue
            seen.add(node)
            known = high.get(node)
            if known is None or seq > known:
                high[node] = seq
            else:
                duplicate = True
        return duplicate

    def get(self, node: NodeId) -> Seq | None:
        return self.high.get(node)


def bypassed_in(vin: Sequence[Entry], delta: int) -> int:
    """⊥ entries among the newest 2δ + 1 of a received vector."""
    return sum(1 for _, seq in vin[: 2 * delta + 1] if seq is None)
