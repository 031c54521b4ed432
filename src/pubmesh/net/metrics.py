"""Live metrics of a running node: OpenMetrics over HTTP, for Prometheus.

``pubmesh node --metrics HOST:PORT`` (and ``pubmesh.Node(metrics="HOST:PORT")``) serves

* ``GET /metrics``: the node's counters in the Prometheus text format, or OpenMetrics when the
  scraper asks for it (``Accept: application/openmetrics-text``, as Prometheus does), written
  by ``prometheus-client``;
* ``GET /healthz``: ``200 ok`` while the node runs, ``503`` once it is closing.

Nothing is counted twice: a scrape reads the counters the runtime keeps anyway (the ones
``stats`` shows) through a custom collector, so serving metrics costs the node nothing between
scrapes. The server runs on the node's event loop: a scrape sees one consistent state, and no
thread reads the runtime's dictionaries while the loop changes them.

Metrics (all per node; ``_total`` ones are counters):

========================================== =================================================
``pubmesh_info{node,address,stack,role,``  1; ``node`` is the node's address (``127.0.0.1:
``links,signed,acl,data_dir}``             7000``), as a person names it, ``links`` its
                                           security (``identity``: certificates, TLS 1.3;
                                           ``shared-key``), ``signed`` whether its
                                           publications are, ``acl`` the ACL file and
                                           ``data_dir`` the data directory (empty: none)
``pubmesh_deliveries_total``               publications delivered to the application
``pubmesh_topic_deliveries_total{topic}``  the same, per subscribed topic
``pubmesh_publications_total``             publications this node published
``pubmesh_dropped_total{cause}``           messages or lines dropped: the transport's
                                           causes (``queue-full``, ``unreachable``,
                                           ``oversized``, ...), ``stdout`` (lines a reader
                                           did not take), ``subscription-queue`` (the API)
``pubmesh_forged_total{reason}``           signed copies refused (identity mode)
``pubmesh_denied_total{action}``           copies the ACL dropped
``pubmesh_signature_checks_total``         Ed25519 checks of received batches (identity
                                           mode: one a batch of publications)
``pubmesh_signatures_total``               signatures made over own batches
``pubmesh_peers``                          peers with an open connection now
``pubmesh_peer_failures_total``            peers declared down to the stack
``pubmesh_rejections_total{reason}``       connections and frames refused
``pubmesh_handshake_rejections_total``     those refused before their handshake completed
``{reason}``                               (strangers, wrong keys, silent sockets)
``pubmesh_frames_{sent,received}_total``   frames on the wire
``pubmesh_bytes_{sent,received}_total``    bytes on the wire
``pubmesh_trace_rows_lost_total``          trace rows lost to write errors (a full disk)
``pubmesh_publications_refused_total``     publications refused for want of room (flow
                                           control: pubmesh.net.runtime.Receipt)
``pubmesh_slow_peers_total``               peers found slow (queue over half full 2 s)
``pubmesh_bans_total``                     members cut off for sending junk (identity
                                           mode: forged, malformed or replayed copies)
``pubmesh_banned_peers``                   members refused now for that
``pubmesh_revoked_certificates``           certificates on the revocation list the node
                                           holds (absent without one)
``pubmesh_memory_used_bytes``              bytes in the node's queues (peers' and the
                                           application's) ...
``pubmesh_memory_budget_bytes``            ... and the budget they are held to
``process_*``                              prometheus-client's process collector (resident
                                           memory, CPU seconds, open descriptors)
========================================== =================================================

Who may read them: anyone who can connect. The endpoint has no authentication, and it tells
the node's subscribed topics and its traffic: bind it to loopback or to a monitoring network
(``--metrics 127.0.0.1:9464``). A stranger's connections cost little and cannot keep a
scraper or a liveness probe out: a request of at most 8 KiB must arrive
whole within ``REQUEST_TIMEOUT`` (1 s), its answer be taken within ``ANSWER_TIMEOUT``; at
most ``MAX_PER_SOURCE`` connections from one address and ``MAX_CLIENTS`` in all, and a new
connection that finds either full closes the *oldest* there, preferring one that has sent
nothing, rather than being refused itself (as the node's own door does for unproven
connections, :mod:`pubmesh.net.transport`). A probe sends its request at once, so silent
sockets go before it, however many a stranger opens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

if TYPE_CHECKING:
    from pubmesh.net.runtime import NodeRuntime

#: connections served at once, and from one source address (module docstring)
MAX_CLIENTS = 16
MAX_PER_SOURCE = 4
#: bytes of a request (line and headers), and the seconds it may take to arrive whole
MAX_REQUEST = 8192
REQUEST_TIMEOUT = 1.0
#: seconds a client may take to read its answer
ANSWER_TIMEOUT = 5.0


@dataclass(eq=False)
class _Client:
    """One connection to the metrics port: its source address, its writer, whether it has
    sent a byte yet (a silent one is evicted first)."""

    source: str
    writer: asyncio.StreamWriter
    heard: bool = False


class NodeCollector:
    """The runtime's counters as metric families, read at each scrape (module docstring).
    ``extra_drops`` adds drops the runtime does not see (stdout lines, API queues)."""

    def __init__(
        self,
        runtime: NodeRuntime,
        extra_drops: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.extra_drops = extra_drops

    def collect(self) -> Iterator[Metric]:
        runtime = self.runtime
        stats = runtime.statistics()
        transport = stats.transport
        info = GaugeMetricFamily(
            "pubmesh_info",
            "The node: its address, stack, role, security, ACL and data directory.",
            labels=["node", "address", "stack", "role", "links", "signed", "acl", "data_dir"],
        )
        mode = stats.mode
        info.add_metric(
            [
                # the node by its address, as a person knows it (its id, ip << 16 | port,
                # is a number nobody recognises)
                stats.address,
                stats.address,
                stats.stack,
                stats.role,
                mode.links if mode is not None else "",
                str(mode is not None and mode.signed).lower(),
                (mode.acl or "") if mode is not None else "",
                (mode.data_dir or "") if mode is not None else "",
            ],
            1,
        )
        yield info
        yield _counter("pubmesh_deliveries", "Publications delivered.", stats.deliveries)
        yield _labelled(
            "pubmesh_topic_deliveries", "Publications delivered, per topic.", "topic",
            runtime.delivered_by_topic,
        )  # fmt: skip
        yield _counter("pubmesh_publications", "Publications published.", stats.published)
        drops = dict(transport.dropped)
        if self.extra_drops is not None:
            for cause, count in self.extra_drops().items():
                drops[cause] = drops.get(cause, 0) + count
        yield _labelled("pubmesh_dropped", "Messages or lines dropped.", "cause", drops)
        yield _labelled(
            "pubmesh_forged", "Signed copies refused, by reason.", "reason", stats.forged
        )
        yield _labelled("pubmesh_denied", "Copies the ACL dropped.", "action", stats.denied)
        yield _counter(
            "pubmesh_signature_checks",
            "Ed25519 checks of received batches of publications (identity mode).",
            stats.signature_checks,
        )
        yield _counter(
            "pubmesh_signatures", "Signatures made over own batches.", stats.signatures_made
        )
        yield _gauge(
            "pubmesh_peers", "Peers with an open connection.", len(transport.peers_connected)
        )
        yield _counter(
            "pubmesh_peer_failures", "Peers declared down to the stack.", stats.peer_down_notices
        )
        yield _labelled(
            "pubmesh_rejections", "Connections and frames refused.", "reason", transport.rejected
        )
        yield _labelled(
            "pubmesh_handshake_rejections", "Connections refused before their handshake.",
            "reason", transport.handshake_rejected,
        )  # fmt: skip
        yield _counter("pubmesh_frames_sent", "Frames sent.", transport.frames_sent)
        yield _counter("pubmesh_frames_received", "Frames received.", transport.frames_received)
        yield _counter("pubmesh_bytes_sent", "Bytes sent.", transport.bytes_sent)
        yield _counter("pubmesh_bytes_received", "Bytes received.", transport.bytes_received)
        lost = stats.trace.rows_lost if stats.trace is not None else 0
        yield _counter("pubmesh_trace_rows_lost", "Trace rows lost to write errors.", lost)
        yield _counter(
            "pubmesh_publications_refused", "Publications refused for want of room.",
            sum(stats.refused.values()),
        )  # fmt: skip
        yield _counter("pubmesh_slow_peers", "Peers found slow.", transport.slow_peers)
        yield _counter("pubmesh_bans", "Members cut off for sending junk.", transport.bans)
        yield _gauge("pubmesh_banned_peers", "Members refused now for junk.", transport.banned_now)
        revocations = runtime.transport.revocations if runtime.transport is not None else None
        if revocations is not None:
            yield _gauge(
                "pubmesh_revoked_certificates", "Certificates on the revocation list held.",
                len(revocations.serials),
            )  # fmt: skip
        if stats.memory is not None:
            for name, value, what in (
                ("used", stats.memory.used, "Bytes in the node's queues."),
                ("budget", stats.memory.budget, "The bytes its queues may hold."),
            ):
                yield _gauge(f"pubmesh_memory_{name}_bytes", what, value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, documentation)
    gauge.add_metric([], value)
    return gauge


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


def _labelled(
    name: str, documentation: str, label: str, values: Mapping[str, int]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


class MetricsServer:
    """``/metrics`` and ``/healthz`` on the node's event loop (module docstring)."""

    def __init__(
        self,
        runtime: NodeRuntime,
        host: str,
        port: int,
        extra_drops: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(runtime, extra_drops))
        self.registry.register(ProcessCollector(registry=None))
        self._server: asyncio.Server | None = None
        #: open connections, oldest first (a dict for its order)
        self._clients: dict[_Client, None] = {}

    @property
    def address(self) -> str:
        """``HOST:PORT`` it listens on (the port the system chose, for port 0)."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=MAX_REQUEST
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = _Client(peer[0] if peer else "?", writer)
        self._admit(client)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await self._read_head(reader, client)
            status, content_type, body = self._answer(head)
            reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not"
                      " Allowed", 503: "Service Unavailable"}[status]  # fmt: skip
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            async with asyncio.timeout(ANSWER_TIMEOUT):
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ValueError, OSError):
            pass  # a slow, oversized, evicted or vanished request: closed without an answer
        finally:
            self._clients.pop(client, None)
            writer.close()

    def _admit(self, client: _Client) -> None:
        """Room for a new connection: the oldest of its source's (past ``MAX_PER_SOURCE``)
        or of all (past ``MAX_CLIENTS``) is closed, a silent one first (module docstring)."""
        same = [c for c in self._clients if c.source == client.source]
        if len(same) >= MAX_PER_SOURCE:
            self._evict(same)
        if len(self._clients) >= MAX_CLIENTS:
            self._evict(list(self._clients))
        self._clients[client] = None

    def _evict(self, clients: list[_Client]) -> None:
        victim = next((c for c in clients if not c.heard), clients[0])
        self._clients.pop(victim, None)
        victim.writer.close()  # its reader sees the end: its _serve returns

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader, client: _Client) -> bytes:
        """The request line and headers, up to the blank line (ValueError past
        ``MAX_REQUEST`` bytes; IncompleteReadError if the connection ends first)."""
        head = bytearray()
        while (end := head.find(b"\r\n\r\n")) < 0:
            if len(head) > MAX_REQUEST:
                raise ValueError("request too large")
            chunk = await reader.read(MAX_REQUEST)
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(head), None)
            client.heard = True
            head += chunk
        return bytes(head[: end + 4])

    def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method != "GET":
            return 405, "text/plain", b"GET only\n"
        if target == "/healthz":
            if self.runtime.started and not self.runtime.closed:
                return 200, "text/plain", b"ok\n"
            return 503, "text/plain", b"closing\n"
        if target != "/metrics":
            return 404, "text/plain", b"try /metrics or /healthz\n"
        accept = next(
            (line.split(":", 1)[1] for line in lines[1:] if line.lower().startswith("accept:")),
            "",
        )
        if "application/openmetrics-text" in accept:
            openmetrics: bytes = generate_openmetrics(self.registry)  # type: ignore[no-untyped-call]
            return 200, OPENMETRICS_TYPE, openmetrics
        return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)


__all__ = ["MetricsServer", "NodeCollector"]
