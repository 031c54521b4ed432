"""Publications: the self-stabilizing Patricia-trie exchange and flooding (Feldmann et al. §4.2,
§4.3; docs/protocols/skipring.md §8).

How it works
============
Every subscriber stores all publications of a topic in its Patricia trie
(:mod:`.patricia`). Two mechanisms spread them:

* **Flooding** (§4.3, ``PublishNew``): the publisher inserts p and sends it to all its
  neighbours (ring edges and shortcuts); a receiver that lacks p inserts it and forwards it to
  its neighbours except the one it came from (spec §10.12: skipping the sender is our choice);
  one that has it drops the message. The skip ring's diameter is at most 2L - 1, so a flood
  reaches everybody within that many hops of a synchronous network.
* **CheckTrie** (§4.2), the part that makes publications self-stabilizing and that a late
  subscriber relies on: every Timeout, v sends the (label, hash) of its trie's root to a random
  ring neighbour w. For each pair (ℓ, η) it receives, w does one of three things:

  1. it has a node x labelled ℓ with hash η: the subtries are equal, nothing to do;
  2. it has x labelled ℓ with another hash: if x is inner, it sends the children's pairs back
     (roles swap), so the difference is located by descending both tries in lockstep; if x is
     a leaf, it re-sends its publication (spec §10.8; a leaf's hash covers its content);
  3. it has no node labelled ℓ: everything below ℓ that w holds lies under the node y with the
     shortest label that extends ℓ. If y exists, w is certainly missing prefix
     p = ℓ·(1 - b), b the bit of y's label after ℓ, so it asks v to check y and to send every
     publication with prefix p (``CheckAndPublish``); without y it asks for all of prefix ℓ.

The one rule that keeps it correct: **only publications the receiver lacks are inserted, and
nothing is ever deleted**, so the set of publications a subscriber holds only grows, towards the
union over the topic (Feldmann et al. §5, Publication Convergence). Each publication is handed to
the application exactly once per subscriber: when it first enters that subscriber's trie.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.core import Deliver, Message, NodeId, Output, Receive, Send
from pubmesh.proto.skipring.messages import (
    CheckAndPublish,
    CheckTrie,
    PublicationTransfer,
    PublishNew,
    TriePair,
)
from pubmesh.proto.skipring.patricia import KEY_BITS, Publication, is_bits
from pubmesh.proto.skipring.ring import Status, TopicState, message_kind

HASH_BYTES = 32


@dataclass(frozen=True, slots=True)
class PublishLocal:
    """The application publishes ``publication`` on this topic (§4.2 insert, §4.3 flood)."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class CheckTick:
    """The Timeout's CheckTrie with a random ring neighbour (§4.2)."""


#: the publication layer's closed input set
PublicationInput = Receive | PublishLocal | CheckTick


class PublicationLayer:
    """The publication layer of one topic instance: its one entry point over the instance's
    trie and neighbours (the ring layer's :class:`TopicState` holds both). It keeps no state of
    its own, so the subscriber makes one per use."""

    __slots__ = ("flooding", "rng", "state")

    def __init__(self, state: TopicState, rng: random.Random, flooding: bool) -> None:
        self.state = state
        self.rng = rng
        self.flooding = flooding

    def handle(self, event: PublicationInput, now: float) -> list[Output]:
        """A publication message from a neighbour, a local publish, or the CheckTrie tick."""
        state = self.state
        out_: list[Output] = []
        match event:
            case PublishLocal(publication=publication):
                if accept(state, publication, 0, out_) and self.flooding:
                    flood(state, publication, 0, out_)
            case Receive(src=src, message=message):
                receive(state, src, message, out_, flooding=self.flooding)
            case CheckTick():
                start_check(state, self.rng, out_)
        return out_


#: the publication layer's message classes, in the order a message is matched against them
PUBLICATION_MESSAGES: tuple[type[Message], ...] = (
    PublishNew,
    PublicationTransfer,
    CheckTrie,
    CheckAndPublish,
)
#: message class -> the first of PUBLICATION_MESSAGES it is a subclass of (None: none of them)
_KINDS: dict[type, type[Message] | None] = {cls: cls for cls in PUBLICATION_MESSAGES}


def receive(
    state: TopicState, src: NodeId, message: Message, out: list[Output], *, flooding: bool
) -> None:
    """A publication message from ``src``: :meth:`PublicationLayer.handle` of a
    ``Receive(src, message)``, which the subscriber calls directly. The message's class is
    mapped once to the first of the layer's message classes it is an instance of."""
    kind = message_kind(message, PUBLICATION_MESSAGES, _KINDS)
    m: Any = message  # the kind says which class it is
    if kind is PublishNew:
        publication = Publication(m.pub_id, m.publisher, m.payload)
        if accept(state, publication, m.hops, out) and flooding:
            flood(state, publication, m.hops, out, exclude=src)
    elif kind is CheckTrie:
        check_trie(state, m.node, m.pairs, out)
    elif kind is PublicationTransfer:
        accept(state, Publication(m.pub_id, m.publisher, m.payload), m.hops, out)
    elif kind is CheckAndPublish:
        check_and_publish(state, m.node, m.pairs, m.prefix, out)


def _valid_pair(pair: object) -> bool:
    return (
        isinstance(pair, tuple)
        and len(pair) == 2
        and is_bits(pair[0])
        and isinstance(pair[1], bytes)
        and len(pair[1]) == HASH_BYTES
    )


def accept(state: TopicState, publication: Publication, hops: int, out: list[Output]) -> bool:
    """Insert ``publication`` if it is new; deliver it to the application if the instance is
    subscribed. True if it was new."""
    if not state.trie.insert(publication, hops):
        return False
    if state.status is Status.ACTIVE:
        out.append(Deliver(state.topic, publication.pub_id, publication.payload, hops))
    return True


def flood(
    state: TopicState,
    publication: Publication,
    hops: int,
    out: list[Output],
    *,
    exclude: NodeId | None = None,
) -> None:
    """PublishNew(p) to every neighbour, ring and shortcuts, except ``exclude`` (§4.3)."""
    message = PublishNew(
        topic=state.topic,
        pub_id=publication.pub_id,
        publisher=publication.publisher,
        payload=publication.payload,
        hops=hops + 1,
    )
    for node in state.neighbours():
        if node != exclude:
            out.append(Send(node, message))


def check_trie(
    state: TopicState, sender: NodeId, pairs: tuple[TriePair, ...], out: list[Output]
) -> None:
    """CheckTrie(sender, pairs) at this subscriber: the three cases of §4.2."""
    trie = state.trie
    topic = state.topic
    me = state.me
    descend: list[TriePair] = []
    for pair in pairs:
        if not _valid_pair(pair):
            continue  # a corrupted message: nothing in it can be trusted
        name, digest = pair
        node = trie.find(name)
        if node is not None:
            if node.hash == digest:
                continue  # case 1: equal subtries
            if node.children is not None:
                descend.extend(child.pair() for child in node.children)  # case 2, inner
            elif node.publication is not None:
                out.append(Send(sender, _transfer(topic, node.publication, node.hops)))
            continue
        # case 3: no node labelled ``name``
        extension = trie.minimal_extension(name)
        if extension is not None and len(name) < KEY_BITS:
            bit = extension.label[len(name)]
            prefix = name + ("1" if bit == "0" else "0")
            message = CheckAndPublish(
                topic=topic, node=me, pairs=(extension.pair(),), prefix=prefix
            )
        else:
            message = CheckAndPublish(topic=topic, node=me, pairs=(), prefix=name)
        out.append(Send(sender, message))
    if descend:
        out.append(Send(sender, CheckTrie(topic=topic, node=me, pairs=tuple(descend))))


def check_and_publish(
    state: TopicState,
    sender: NodeId,
    pairs: tuple[TriePair, ...],
    prefix: str,
    out: list[Output],
) -> None:
    """CheckAndPublish(sender, pairs, p): CheckTrie(sender, pairs), then send ``sender`` every
    publication whose key starts with p (§4.2)."""
    check_trie(state, sender, pairs, out)
    if not is_bits(prefix):
        return
    for leaf in state.trie.leaves(prefix):
        assert leaf.publication is not None
        out.append(Send(sender, _transfer(state.topic, leaf.publication, leaf.hops)))


def start_check(state: TopicState, rng: random.Random, out: list[Output]) -> None:
    """Timeout: send the root's (label, hash) to a ring neighbour (left, right or ring) chosen
    uniformly, if the trie is not empty (spec §10.9)."""
    root = state.trie.root_pair()
    if root is None:
        return
    candidates = state.ring_nodes()
    if not candidates:
        return
    target = candidates[rng.randrange(len(candidates))]
    out.append(Send(target, CheckTrie(topic=state.topic, node=state.me, pairs=(root,))))


def _transfer(topic: str, publication: Publication, hops: int) -> PublicationTransfer:
    return PublicationTransfer(
        topic=topic,
        pub_id=publication.pub_id,
        publisher=publication.publisher,
        payload=publication.payload,
        hops=hops + 1,
    )
