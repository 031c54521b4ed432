"""A node runtime's own events (``net.*``: a peer down, a slow peer, a handler error, a copy
dropped or refused, a connection rejected): each a row of the trace's ``events`` table and a
call of the runtime's event callbacks (:attr:`pubmesh.net.runtime.NodeRuntime.event_callbacks`).

Events a peer can provoke at will are rate-limited, so a flood cannot flood the trace or the
log: drops and refusals of one kind toward one peer (:meth:`NodeEvents.rate_limited`) and
rejected frames and connections (:meth:`NodeEvents.rejected`); the rows left out are counted
into the next one (``suppressed``), not lost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pubmesh.net.address import format_id
from pubmesh.proto.core import NodeId

if TYPE_CHECKING:
    from pubmesh.net.runtime import NodeRuntime

log = logging.getLogger("pubmesh.net")

#: a log record's attribute naming the event it repeats (the node process reports the event
#: itself, once, and drops such records: pubmesh.net.node_cli)
EVENT_LOGGED = "pubmesh_event"
#: Drops and rejections of one kind toward one peer are traced at most this often; the rows in
#: between are counted into the next one (``suppressed``), so a flood cannot flood the trace.
TRACE_RATE_INTERVAL = 1.0
#: Rejections traced (and logged) per second at most; the rest are counted, not lost.
REJECTIONS_TRACED_PER_SECOND = 50


class NodeEvents:
    """The events of one :class:`~pubmesh.net.runtime.NodeRuntime` (module docstring): to its
    trace, when it keeps one, and to its event callbacks."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self._rate: dict[tuple[str, NodeId | str], tuple[float, int]] = {}
        self._reject_window = -1.0
        self._rejections_in_window = 0
        self._rejections_suppressed = 0

    def _now(self) -> float:
        runtime = self.runtime
        return runtime.now() if runtime._loop is not None else 0.0

    def event(self, kind: str, detail: Mapping[str, Any]) -> None:
        """Trace ``kind`` now and hand it to the event callbacks."""
        runtime = self.runtime
        if runtime.trace is not None:
            runtime.trace.event(runtime.wall(), kind, detail)
        for callback in runtime.event_callbacks:
            callback(kind, detail)

    def rate_limited(
        self, kind: str, peer: NodeId | str, reason: str, detail: dict[str, Any]
    ) -> None:
        """:meth:`event` ``kind`` toward ``peer`` for ``reason`` at most once per
        ``TRACE_RATE_INTERVAL``; the rows in between are counted into the next one
        (``suppressed``)."""
        key = (f"{kind}:{reason}", peer)
        now = self._now()
        last, suppressed = self._rate.get(key, (-TRACE_RATE_INTERVAL, 0))
        if now - last < TRACE_RATE_INTERVAL:
            self._rate[key] = (last, suppressed + 1)
            return
        self._rate[key] = (now, 0)
        if suppressed:
            detail = {**detail, "suppressed": suppressed}
        self.event(kind, detail)

    def rejected(self, peer: NodeId | None, remote: str, reason: str, detail: str) -> None:
        """A frame or connection refused: one ``net.rejected`` row per refusal, up to
        ``REJECTIONS_TRACED_PER_SECOND``; beyond that they are counted into the next row
        (``suppressed``), so a flood of bad connections cannot flood the trace or the log."""
        now = self._now()
        if now - self._reject_window >= 1.0:
            self._reject_window = now
            self._rejections_in_window = 0
        if self._rejections_in_window >= REJECTIONS_TRACED_PER_SECOND:
            self._rejections_suppressed += 1
            return
        self._rejections_in_window += 1
        record: dict[str, Any] = {
            "peer": peer,
            "remote": remote,
            "reason": reason,
            "detail": detail,
        }
        if self._rejections_suppressed:
            record["suppressed"] = self._rejections_suppressed
            self._rejections_suppressed = 0
        log.warning(
            "%s: refused %s (%s): %s",
            format_id(self.runtime.node_id),
            remote,
            reason,
            detail,
            extra={EVENT_LOGGED: "net.rejected"},
        )
        self.event("net.rejected", record)
