"""What a node lets in and out: the checks of :class:`pubmesh.net.runtime.NodeRuntime` on
publications and subscriptions, apart from the runtime's loop.

* The application's commands: a subscription's filter and a publication's attributes must
  suit the stack (content-based) and be valid, a publication must fit in a frame
  (:data:`PUBLICATION_HEADROOM`), and the ACL (:mod:`pubmesh.net.acl`) must let this node
  publish or subscribe on the topic.
* Room (flow control): the bytes the node holds in its queues and caches against its
  ``memory_budget``, and the fullest peer queue against ``max_queue_bytes``
  (:meth:`Admission.room`).
* Copies of publications (identity mode, :mod:`pubmesh.net.signing`): one received is verified
  and must come from a publisher the ACL lets publish on its topic; one sent goes out signed,
  and only to a neighbour the ACL lets receive its topic.

Every refusal is counted here (the runtime's statistics show the counters); the copies dropped
are traced by the runtime, rate-limited.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from pubmesh.errors import UserError
from pubmesh.net.address import format_id
from pubmesh.net.codec import MAX_TOPIC_BYTES, topic_too_long
from pubmesh.net.signing import Signed
from pubmesh.proto.content.filters import attributes_problem, filter_problem, topic_based
from pubmesh.proto.core import Carrier, Message, NodeId, topic_of

if TYPE_CHECKING:
    from pubmesh.net.runtime import NodeRuntime

#: Bytes of a frame a publication leaves to its stack's message fields (hop counts, session
#: vectors, tags), the frame header and the signature block with a certificate: a publication
#: (payload, topic and attributes) may take the rest of a frame (``NetConfig.max_frame``).
PUBLICATION_HEADROOM = 64 << 10


class InvalidCommand(UserError, ValueError):
    """A subscription or publication the node refuses as given, whoever asks (the API, the
    shell, the JSON control channel): a filter or attributes on a topic-based stack, an
    invalid filter, attributes that are not names to strings or numbers. The message says
    which, in the words every entry point uses."""


class PublicationTooLarge(ValueError):
    """A publication larger than the cluster's frames can carry (refused at ``publish``: a
    frame over its limit would be refused by the receiving node and cost the link)."""


class Admission:
    """The admission checks of one :class:`~pubmesh.net.runtime.NodeRuntime` (module
    docstring), and their counters. It reads the runtime's state as it is at each call (its
    node, transport, verifier and application queues are made when it starts)."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self.spec = runtime.spec
        self.config = runtime.config
        #: topic permissions (pubmesh.net.acl): they rest on signed publications
        self.acl = runtime.acl
        #: copies refused by the verifier, by reason
        self.forged: Counter[str] = Counter()
        #: payload messages not sent: their publication's signature was no longer kept
        self.unsigned_dropped = 0
        #: copies dropped by the ACL: "publish" (received from a publisher that may not),
        #: "subscribe" (not sent to a neighbour that may not receive them)
        self.denied: Counter[str] = Counter()
        #: publications refused for want of room (Receipt), by reason
        self.refused: Counter[str] = Counter()

    # ------------------------------------------------------------------ the application's
    def check_topic(self, topic: str) -> None:
        """Raise :class:`InvalidCommand` for a topic over :data:`MAX_TOPIC_BYTES` or empty."""
        if not topic or topic_too_long(topic):
            raise InvalidCommand(
                f"a topic is 1 to {MAX_TOPIC_BYTES} bytes of UTF-8, not {len(topic.encode()):,}"
            )

    def check_filter(self, filter: Mapping[str, Any] | None) -> None:
        """Raise :class:`InvalidCommand` for a filter on a topic-based stack or an invalid
        filter."""
        if filter is None:
            return
        self.need_content_based("filters")
        problem = filter_problem(filter)
        if problem is not None:
            raise InvalidCommand(f"subscribe: invalid filter: {problem}")

    def check_attributes(self, attributes: Mapping[str, Any] | None) -> None:
        """Raise :class:`InvalidCommand` for attributes this node would refuse at publish."""
        if attributes is None:
            return
        self.need_content_based("attributes")
        problem = attributes_problem(attributes)
        if problem is not None:
            raise InvalidCommand(f"publish: {problem}")

    def check_publication(
        self, topic: str, payload: bytes, attributes: Mapping[str, Any] | None
    ) -> None:
        """Raise for a publication the node refuses as given: :class:`InvalidCommand` for its
        attributes, a PermissionError where the ACL forbids it, :class:`PublicationTooLarge`
        over :attr:`max_publication` bytes."""
        self.check_topic(topic)
        self.check_attributes(attributes)
        self.permitted("publish", topic)
        size = len(payload) + len(topic.encode())
        if attributes is not None:
            size += len(json.dumps(attributes, default=repr).encode())
        limit = self.max_publication
        if size > limit:
            raise PublicationTooLarge(
                f"a publication of {size:,} bytes (payload, topic and attributes) is over this "
                f"cluster's limit of {limit:,} bytes (frames of {self.config.max_frame:,} bytes, "
                f"less {PUBLICATION_HEADROOM:,} for the stack's fields)"
            )

    @property
    def max_publication(self) -> int:
        """Bytes a publication (payload, topic and attributes) may take at most."""
        return self.config.max_frame - PUBLICATION_HEADROOM

    def need_content_based(self, what: str) -> None:
        """Refuse ``what`` (filters, attributes) on a topic-based stack: gossip would ignore a
        filter and deliver everything, the others nothing."""
        if not self.spec.content_based:
            raise InvalidCommand(topic_based(self.spec.name, what))

    def permitted(self, what: str, topic: str) -> None:
        """Raise a PermissionError if the ACL does not let this node ``what`` (publish,
        subscribe) on ``topic``."""
        acl = self.acl
        if acl is None:
            return
        allowed = acl.may_publish if what == "publish" else acl.may_subscribe
        node_id = self.runtime.node_id
        if not allowed(node_id, topic):
            raise PermissionError(
                f"{format_id(node_id)} may not {what} on {topic!r} (the ACL {acl.source})"
            )

    # ------------------------------------------------------------------ room
    def memory_used(self) -> int:
        """Bytes the node holds: every peer's queue (the transport's), the stack's caches
        (:meth:`~pubmesh.proto.core.StackNode.held_bytes`) and the application's queues
        (``NodeRuntime.application_queues``), what ``memory_budget`` bounds."""
        return self.memory()[0]

    def memory(self) -> tuple[int, NodeId | None, int]:
        """:meth:`memory_used`, and the fullest peer queue's peer and bytes (one walk)."""
        runtime = self.runtime
        transport, node = runtime.transport, runtime.node
        queued, peer, most = (0, None, 0) if transport is None else transport.usage()
        held = node.held_bytes() if node is not None else 0
        if runtime.verifier is not None:
            held += runtime.verifier.held_bytes()
        return queued + held + sum(count() for count in runtime.application_queues), peer, most

    def offered(
        self, topic: str, payload: bytes, attributes: Mapping[str, Any] | None
    ) -> str | None:
        """An application's publication offered: :class:`InvalidCommand` for attributes the
        node would refuse, whatever the room; then why it has no room (:meth:`room`), counted
        as refused, or None."""
        self.check_attributes(attributes)
        reason = self.room(topic, payload)
        if reason is not None:
            self.refused["no-room"] += 1
        return reason

    def room(self, topic: str, payload: bytes) -> str | None:
        """Why a publication of ``payload`` on ``topic`` has no room now, or None if it has:
        the node would go over its ``memory_budget``, or the fullest peer queue could not take
        a copy (a slow peer: :mod:`pubmesh.net.transport`, flow control)."""
        config = self.config
        size = len(payload) + len(topic.encode())
        used, peer, backlog = self.memory()
        if used + size > config.memory_budget:
            return (
                f"the node holds {used:,} bytes in its queues and caches, its memory budget is "
                f"{config.memory_budget:,}"
            )
        if peer is not None and backlog + size > config.max_queue_bytes:
            return (
                f"the queue to {format_id(peer)} holds {backlog:,} of "
                f"{config.max_queue_bytes:,} bytes (a slow peer)"
            )
        return None

    # ------------------------------------------------------------------ copies
    def send_publication(self, dst: NodeId, message: Message, t: float) -> None:
        """A copy of a publication goes out signed, and only to a neighbour the ACL lets
        receive its topic."""
        runtime = self.runtime
        verifier, transport = runtime.verifier, runtime.transport
        assert verifier is not None and transport is not None
        # the runtime sends only payload messages this way (signing.carries_payload)
        carried = cast(Carrier, message)
        acl = self.acl
        if acl is not None and not acl.may_subscribe(dst, carried.topic):
            self._denied(dst, message, None, "subscribe")
            return
        if verifier.signer.pending(message.publication()):
            # this node's own, not signed yet: signed with the others of this loop turn (one
            # batch, one signature) at its end, then sent
            runtime.hold_unsigned(dst, message, t)
            return
        signed = verifier.signature(message)
        if signed is None:
            self.unsigned_dropped += 1
            runtime.net_dropped(dst, message, t, "unsigned")
            return
        if verifier.stale_to_send(signed):  # a late repair: the receiver would refuse it
            runtime.net_dropped(dst, message, t, "stale")
            return
        transport.send(dst, message, t, signed)

    def may_name(self, src: NodeId, message: Message) -> bool:
        """Whether ``src`` may send ``message`` (not a publication's copy) about the topic it
        names: with an ACL, only a node that may publish or subscribe on a topic has any
        business asking for its swarm or joining it (the gossip contact's directory, which an
        insider could otherwise fill with topics of its own). Refused messages are counted
        (``denied``: ``topic``) and charged."""
        acl = self.acl
        topic = topic_of(message)
        if acl is None or topic is None:
            return True
        if acl.may_subscribe(src, topic) or acl.may_publish(src, topic):
            return True
        self.denied["topic"] += 1
        self._charge(src, "may-not-name-topic")
        return False

    def received(self, src: NodeId, message: Message, signed: Signed | None) -> bool:
        """Whether a copy of a publication received from ``src`` may go on to the protocol:
        its signature verifies and the ACL lets its publisher publish on its topic (a copy
        refused is counted and traced)."""
        verifier = self.runtime.verifier
        assert verifier is not None
        problem = verifier.check(message, signed)
        if problem is not None:
            self._forged(src, message, signed, problem)
            return False
        acl = self.acl
        assert signed is not None
        carried = cast(Carrier, message)  # a signature checked is a payload message's
        if acl is not None and not acl.may_publish(signed.publisher, carried.topic):
            self._denied(src, message, signed.publisher, "publish")
            return False
        return True

    def _denied(self, peer: NodeId, message: Message, publisher: NodeId | None, what: str) -> None:
        self.denied[what] += 1
        if what == "publish":  # an honest relay drops such a copy before sending it on
            self._charge(peer, "may-not-publish")
        self.runtime.events.rate_limited(
            "net.denied",
            peer,
            what,
            {
                "peer": peer,
                "address": format_id(peer),
                "reason": f"may-not-{what}",
                "topic": topic_of(message),
                "pub_id": message.publication(),
                "publisher": format_id(publisher) if publisher is not None else None,
            },
        )

    def _charge(self, peer: NodeId, reason: str) -> None:
        transport = self.runtime.transport
        if transport is not None:
            transport.invalid(peer, reason)

    def _forged(self, src: NodeId, message: Message, signed: Signed | None, reason: str) -> None:
        self.forged[reason] += 1
        self._charge(src, reason)
        claimed = signed.publisher if signed is not None else None
        self.runtime.events.rate_limited(
            "net.forged",
            src,
            reason,
            {
                "peer": src,
                "address": format_id(src),
                "reason": reason,
                "pub_id": message.publication(),
                "type": type(message).__name__,
                "claimed_publisher": format_id(claimed) if claimed is not None else None,
            },
        )
