"""The Python API: a pubmesh node inside an asyncio application.

::

    import pubmesh

    async with pubmesh.Node(stack="gossip", listen="127.0.0.1:7001",
                            contact="127.0.0.1:7000", key=b"...") as node:
        news = await node.subscribe("news")
        await node.publish("news", b"hello")
        async for message in news:
            print(message.topic, message.payload, message.hops)

A :class:`Node` is one node of a cluster, run by the same runtime as ``pubmesh node``
(:class:`pubmesh.net.runtime.NodeRuntime`) on the application's event loop: it listens on
``listen`` (its address is its id), joins through ``contact`` and authenticates every
connection with the cluster key (``key``: bytes, the key text, a :class:`pathlib.Path` to a key
file, or None for ``$PUBMESH_KEY``) or, in identity mode, with its certificate (``identity``:
a directory from ``pubmesh ca issue`` or a loaded :class:`pubmesh.net.identity.Identity`; its
links are then TLS 1.3, ``listen`` must be the address the certificate names, and publications
are signed and every copy verified unless ``sign`` is False: :mod:`pubmesh.net.signing`;
``acl``, a file or a loaded :class:`pubmesh.net.acl.Acl`, adds topic permissions).

:meth:`Node.subscribe` returns a :class:`Subscription`, an async iterator of :class:`Delivery`
values (``replayed`` is true for those handed over from the topic's history, which
``subscribe(topic, history="5m")`` asks for on stacks that keep one, and ``published`` their
original publish time); each subscription has
its own bounded queue (``queue_size``; when the application falls that far behind, the oldest
deliveries are dropped and counted in ``Subscription.dropped``), so a slow consumer cannot
exhaust memory, and the next item the iterator yields is a
:class:`Lagged` saying how many were dropped since the last one (iroh-gossip's ``Lagged``):
loss is never silent. Several subscriptions to one topic each get every delivery; the node
leaves the topic when the last one is closed.

:meth:`Node.publish` returns a :class:`Receipt`: accepted, or refused because the node has no
room (its queues hold its ``memory_budget``, or a slow peer's queue is full). What a publisher
does then is its :class:`Congestion`: ``BLOCK`` (the default) waits for room, up to
``timeout``; ``DROP`` is refused at once. The README's flow-control table has the whole rule.

Leaving the ``async with`` block leaves the cluster gracefully (the stack's leave protocol,
then goodbyes on every connection).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pubmesh.errors import UserError
from pubmesh.net.acl import Acl, load_acl
from pubmesh.net.address import format_id, node_id, parse_hostport
from pubmesh.net.admission import InvalidCommand
from pubmesh.net.identity import Identity, load_identity
from pubmesh.net.runtime import Congestion, Delivery, NodeRuntime, Receipt, published_at
from pubmesh.net.runtime_stats import QueueStatistics, RuntimeStatistics
from pubmesh.net.security import ClusterKey, as_key
from pubmesh.net.transport import NetConfig
from pubmesh.proto.core import Deliver, HistoryRequest, NodeId
from pubmesh.proto.history import parse_history
from pubmesh.stacks.base import get_stack

if TYPE_CHECKING:
    from pubmesh.net.metrics import MetricsServer

__all__ = ["Congestion", "Delivery", "Lagged", "Node", "Receipt", "Subscription"]


@dataclass(frozen=True)
class Lagged:
    """Yielded by a :class:`Subscription` in place of what it had to drop: ``missed``
    deliveries of ``topic`` were dropped from its full queue since the last Lagged."""

    topic: str
    missed: int


class Subscription:
    """Deliveries of one topic, as an async iterator. Close it (or use ``async with``) to stop."""

    def __init__(self, node: Node, topic: str, queue_size: int) -> None:
        self.node = node
        self.topic = topic
        self.queue_size = queue_size
        self.dropped = 0
        self.closed = False
        self._items: deque[Delivery] = deque()
        #: payload bytes the queue holds (the node's memory budget counts them)
        self.bytes = 0
        #: dropped since the last Lagged was yielded
        self._unreported = 0
        self._ready = asyncio.Event()

    def _put(self, delivery: Delivery) -> None:
        if self.closed:
            return
        if len(self._items) >= self.queue_size:
            self.bytes -= len(self._items.popleft().payload)
            self.dropped += 1
            self._unreported += 1
        self._items.append(delivery)
        self.bytes += len(delivery.payload)
        self._ready.set()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Delivery | Lagged:
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        if self._unreported:
            missed, self._unreported = self._unreported, 0
            return Lagged(self.topic, missed)
        delivery = self._items.popleft()
        self.bytes -= len(delivery.payload)
        runtime = self.node.runtime
        if runtime.room_waiters:  # the memory budget counted what the queue held
            runtime.net_room()
        return delivery

    async def get(self, timeout: float | None = None) -> Delivery | Lagged:
        """The next delivery (``TimeoutError`` after ``timeout`` seconds)."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    def pending(self) -> int:
        return len(self._items)

    async def close(self) -> None:
        """Stop this subscription (the node unsubscribes if it was the topic's last)."""
        if self.closed:
            return
        self.closed = True
        self._ready.set()
        await self.node._release(self)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Node:
    """A pubmesh node on the running event loop. See the module docstring."""

    def __init__(
        self,
        stack: str = "gossip",
        *,
        listen: str | tuple[str, int] = "127.0.0.1:0",
        contact: str | Sequence[str] | None = None,
        key: ClusterKey | bytes | str | Path | None = None,
        identity: Identity | str | Path | None = None,
        sign: bool = True,
        acl: Acl | str | Path | None = None,
        role: str = "peer",
        params: Mapping[str, Any] | Any = None,
        seed: int | None = None,
        trace_dir: str | Path | None = None,
        config: NetConfig | None = None,
        queue_size: int = 10_000,
        metrics: str | tuple[str, int] | None = None,
        congestion: Congestion | str = Congestion.BLOCK,
        data_dir: str | Path | None = None,
    ) -> None:
        """``metrics="HOST:PORT"`` serves /metrics (OpenMetrics) and /healthz there while the
        node runs (:mod:`pubmesh.net.metrics`; port 0: any free one, see :attr:`metrics`).
        ``congestion``: what :meth:`publish` does without room, unless it is told otherwise.
        ``data_dir``: what the node remembers across restarts (:mod:`pubmesh.net.store`): its
        address, contacts, subscriptions (joined again at start; deliveries reach the
        application once it calls :meth:`subscribe` again) and the ids it delivered, never
        delivered twice."""
        self.congestion = _congestion(congestion)
        try:
            spec = get_stack(stack)
        except KeyError as error:
            raise UserError(f"stack: {error.args[0]}") from None
        if isinstance(listen, str):
            listen = parse_hostport(listen, what="listen", allow_port_zero=True)
        contacts = _contacts(contact)
        if isinstance(params, Mapping):
            from pubmesh.scenario.model import load_stack_params

            params = load_stack_params(spec, params, f"params for stack {spec.name}:")
        elif params is not None:  # the params dataclass itself: its own check still runs
            if not isinstance(params, spec.params_type):
                raise UserError(
                    f"params for stack {spec.name}: a {spec.params_type.__name__} or a mapping "
                    f"of its fields, not {type(params).__name__}"
                )
            check = getattr(params, "check", None)
            problem = check() if callable(check) else None
            if problem:
                raise UserError(f"params for stack {spec.name}: {problem}")
        self.queue_size = queue_size
        # identity mode (a directory from `pubmesh ca issue`, or a loaded Identity): TLS links,
        # no cluster key; otherwise the shared key (``key``, else $PUBMESH_KEY)
        if identity is not None and not isinstance(identity, Identity):
            identity = load_identity(identity)
        self.runtime = NodeRuntime(
            spec,
            key=None if identity is not None else as_key(key),
            identity=identity,
            sign=sign,
            acl=load_acl(acl) if isinstance(acl, str | Path) else acl,
            listen=listen,
            contacts=contacts,
            role=role,
            params=params,
            seed=seed,
            config=config,
            trace_dir=trace_dir,
            data_dir=data_dir,
        )
        self._subscriptions: dict[str, list[Subscription]] = {}
        self.runtime.delivery_callbacks.append(self._on_delivery)
        self.runtime.application_queues.append(self._queued_bytes)
        if isinstance(metrics, str):
            metrics = parse_hostport(metrics, what="metrics", allow_port_zero=True)
        self._metrics_at = metrics
        self._metrics: MetricsServer | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self, *, boot: bool = True) -> Node:
        """Listen and join the cluster. With ``boot=False`` the node listens (its
        :attr:`address` is known) and joins only at :meth:`boot`: brokers of a broker tree
        must each be given every broker's address, their own included, which ``listen`` port 0
        gives only once listening. Raises a :class:`UserError` when the stack cannot work with
        the role and contacts given (a broker tree of one broker, a skipring subscriber
        without a supervisor)."""
        await self.runtime.start(boot=boot)
        if self._metrics_at is not None:
            from pubmesh.net.metrics import MetricsServer  # prometheus-client: only when asked

            server = MetricsServer(self.runtime, *self._metrics_at, extra_drops=self._queue_drops)
            try:
                await server.start()
            except OSError:
                await self.runtime.close(leave=False)
                raise
            self._metrics = server
        return self

    def boot(self, contact: str | Sequence[str] | None = None) -> None:
        """Join the cluster, through ``contact`` if given (else the constructor's), after
        ``start(boot=False)``. A :class:`UserError` as :meth:`start` says."""
        self.runtime.boot(None if contact is None else _contacts(contact))

    @property
    def metrics(self) -> str | None:
        """``HOST:PORT`` of the /metrics server, once started with ``metrics=``."""
        return self._metrics.address if self._metrics is not None else None

    def _queued_bytes(self) -> int:
        return sum(s.bytes for subs in self._subscriptions.values() for s in subs)

    def _queue_drops(self) -> dict[str, int]:
        dropped = sum(s.dropped for subs in self._subscriptions.values() for s in subs)
        return {"subscription-queue": dropped}

    async def close(self, *, leave: bool = True) -> None:
        """Leave (unless ``leave=False``) and close every connection."""
        for subscriptions in list(self._subscriptions.values()):
            for subscription in subscriptions:
                subscription.closed = True
                subscription._ready.set()
        await self.runtime.close(leave=leave, linger=1.0)
        if self._metrics is not None:
            await self._metrics.close()

    async def __aenter__(self) -> Node:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close(leave=exc_type is None)

    # ------------------------------------------------------------------ identity
    @property
    def id(self) -> NodeId:
        """The node's id: its IPv4 address and port packed as ``ip << 16 | port``."""
        return self.runtime.node_id

    @property
    def address(self) -> str:
        return format_id(self.runtime.node_id)

    # ------------------------------------------------------------------ pub/sub
    async def subscribe(
        self,
        topic: str,
        filter: Mapping[str, Any] | None = None,
        *,
        history: HistoryRequest | str | int | None = None,
    ) -> Subscription:
        """Subscribe to ``topic``, on a content-based stack only to publications whose
        attributes match ``filter``. ``history`` asks for the topic's past too, as far as its
        members retain it: ``"all"``, a count (``50``), a duration (``"90s"``, ``"5m"``) or a
        :class:`pubmesh.proto.core.HistoryRequest`; those deliveries come first, marked
        ``replayed`` (a publication is delivered once, replayed or live). Only a topic's first
        subscription on this node gets its past: a second one to a topic the node already
        follows starts from now. Raises :class:`pubmesh.net.admission.InvalidCommand` (a
        :class:`UserError`) for a filter on a topic-based stack, an invalid filter, a history
        that is not one of those or one asked of a stack that keeps none, in the words the
        shell uses, and PermissionError where an ACL forbids it."""
        request = _history(history)
        self.runtime.check_history(request)
        if topic not in self._subscriptions:
            # first: the runtime may refuse (an ACL's PermissionError) before anything changes
            self.runtime.subscribe(topic, filter, request)
        subscription = Subscription(self, topic, self.queue_size)
        self._subscriptions.setdefault(topic, []).append(subscription)
        await asyncio.sleep(0)
        return subscription

    async def unsubscribe(self, topic: str) -> None:
        """Close every subscription to ``topic`` and leave it."""
        for subscription in list(self._subscriptions.get(topic, [])):
            await subscription.close()

    async def _release(self, subscription: Subscription) -> None:
        subscriptions = self._subscriptions.get(subscription.topic, [])
        if subscription in subscriptions:
            subscriptions.remove(subscription)
        if not subscriptions and subscription.topic in self._subscriptions:
            del self._subscriptions[subscription.topic]
            if not self.runtime.closed:
                self.runtime.unsubscribe(subscription.topic)
        await asyncio.sleep(0)

    async def publish(
        self,
        topic: str,
        payload: bytes | str,
        *,
        attributes: Mapping[str, Any] | None = None,
        congestion: Congestion | str | None = None,
        timeout: float | None = None,
    ) -> Receipt:
        """Publish on ``topic``; returns a :class:`Receipt` (``.pub_id`` once accepted).
        Without room (:meth:`pubmesh.net.runtime.NodeRuntime.room`), ``congestion`` BLOCK
        (the node's default unless given) waits for it, at most ``timeout`` seconds (None: as
        long as it takes), DROP is refused at once; a refused receipt says why. Raises
        :class:`pubmesh.net.admission.PublicationTooLarge` (a ValueError) for a publication
        over :attr:`max_publication` bytes, PermissionError where an ACL forbids it, and
        :class:`pubmesh.net.admission.InvalidCommand` (a :class:`UserError`) for attributes on a
        topic-based stack or attributes that are not names to strings or finite numbers, in
        the words the shell uses."""
        data = payload.encode() if isinstance(payload, str) else bytes(payload)
        mode = self.congestion if congestion is None else _congestion(congestion)
        runtime = self.runtime
        waited = 0.0
        if mode is Congestion.BLOCK and runtime.room(topic, data) is not None:
            runtime.check_attributes(attributes)  # refused before any wait for room
            started = time.monotonic()
            await runtime.wait_for_room(topic, data, timeout)
            waited = time.monotonic() - started
        receipt = runtime.offer(topic, data, attributes=attributes, waited=waited)
        await asyncio.sleep(0)
        return receipt

    @property
    def max_publication(self) -> int:
        """The most bytes a publication (payload, topic, attributes) may take: the cluster's
        frame limit less what the stacks' fields need."""
        return self.runtime.max_publication

    def _on_delivery(self, delivery: Deliver, t: float) -> None:
        subscriptions = self._subscriptions.get(delivery.topic)
        if not subscriptions:
            return
        item = Delivery(
            delivery.topic,
            delivery.pub_id,
            delivery.payload,
            delivery.hops,
            delivery.attributes,
            t,
            delivery.replayed,
            published_at(delivery, t) if delivery.replayed else None,
        )
        for subscription in subscriptions:
            subscription._put(item)

    # ------------------------------------------------------------------ introspection
    def statistics(self) -> RuntimeStatistics:
        """Counters, as one frozen object with named fields: ``deliveries``, ``published``,
        ``transport`` (frames, drops, rejections), ``protocol`` (the stack's own) and
        ``subscription_queues`` (pending and dropped per topic). ``.as_dict()`` for JSON."""
        queues = {
            topic: QueueStatistics(
                pending=sum(s.pending() for s in subs), dropped=sum(s.dropped for s in subs)
            )
            for topic, subs in sorted(self._subscriptions.items())
        }
        return dataclasses.replace(self.runtime.statistics(), subscription_queues=queues)

    def neighbors(self) -> dict[str, list[str]]:
        """Overlay neighbours per topic, as addresses; an overlay every topic shares
        (brokertree's broker tree, chord's ring) under ``"*"``."""
        return {
            topic: [format_id(n) for n in ids] for topic, ids in self.runtime.neighbors().items()
        }


def _contacts(contact: str | Sequence[str] | None) -> list[NodeId]:
    """Node ids of ``contact`` (one ``HOST:PORT`` or several)."""
    contacts: list[NodeId] = []
    for text in [contact] if isinstance(contact, str) else list(contact or []):
        host, port = parse_hostport(text, what="contact")
        contacts.append(node_id(host, port))
    return contacts


def _history(value: HistoryRequest | str | int | None) -> HistoryRequest | None:
    """``Node.subscribe``'s ``history`` as a request (None: none asked)."""
    if value is None or isinstance(value, HistoryRequest):
        return value
    try:
        return parse_history(value)
    except ValueError as error:
        raise InvalidCommand(f"subscribe: {error}") from None


def _congestion(value: Congestion | str) -> Congestion:
    try:
        return Congestion(value)
    except ValueError:
        raise UserError(f"congestion: {value!r} is not one of block, drop") from None
