"""The brokertree node's sessions and routes (Kazemzadeh & Jacobsen, *Highly Available
Distributed Publish/Subscribe Systems* §3.2–3.3, §4.1; docs/protocols/brokertree.md §4): which
nodes a node keeps sessions with, the active connection on the path to any node, what a session
coming up or going down changes, and which links are active.

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode` (the node composes it and
holds the state its parts share: the view, the sessions, ``down`` and ``links``); its
methods are called by the node and its other parts, in the order the node's module essay
gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubmesh.proto.brokertree.messages import LSeq
from pubmesh.proto.brokertree.session import Down, Miswired, Up
from pubmesh.proto.brokertree.state import ACTIVATING, ACTIVE, INACTIVE, LARGE, PENDING, Link
from pubmesh.proto.core import NodeId, Output, Part, TraceRecord

if TYPE_CHECKING:
    from pubmesh.proto.brokertree.node import BrokerTreeNode

__all__ = ["Connections"]

#: session ends that may be the detector's mistake (silence, a late frame, the peer's own
#: mistake): the peer is re-probed at once; a runtime PeerDown is taken at its word
_MISTAKABLE = frozenset({"silent", "gap", "reset", "redialed", "handshake"})


class Connections(Part["BrokerTreeNode"]):
    """Sessions wanted, routes and link activation of one node (module docstring)."""

    __slots__ = ("knew", "peer_epochs", "routes", "topology_changed")

    def __init__(self, node: BrokerTreeNode) -> None:
        super().__init__(node)
        #: last incarnation epoch seen of each peer (spec §7.5 client restart), and whether
        #: the current one is a restart of one we knew
        self.peer_epochs: dict[NodeId, float] = {}
        self.knew: dict[NodeId, bool] = {}
        #: the active connection (or why none) on the path to each node, until a change
        self.routes: dict[NodeId, tuple[NodeId | None, str]] = {}
        self.topology_changed = True

    def wanted(self) -> set[NodeId]:
        """The nodes this node keeps sessions with (spec §4): its tree neighbours and, for each
        failed one, its neighbours on the far side within δ + 1 hops, recursively. A broker
        does not dial its own clients: they dial it."""
        view = self.n.view
        assert view is not None
        result: set[NodeId] = set()
        todo = [
            y for y in view.neighbours(self.n.node_id) if view.is_broker(y) or not self.n.is_broker
        ]
        while todo:
            y = todo.pop()
            if y in result:
                continue
            result.add(y)
            if y in self.n.down:
                todo.extend(view.far_side(y))
        result.discard(self.n.node_id)
        return result

    def ensure(
        self, now: float, out: list[Output], *, probe: bool = False, initial: bool = False
    ) -> None:
        """Dial every wanted node without a session; failed ones only when probing [P §4.1]."""
        sessions, view = self.n.sessions, self.n.view
        assert sessions is not None and view is not None
        mine = view.ordinal.get(self.n.node_id, -1)
        for node in sorted(self.wanted()):
            if sessions.has(node) or (node in self.n.down and not probe):
                continue
            if initial and view.ordinal.get(node, -1) > mine >= 0:
                continue
            if node in self.n.down:
                self.n.count("probes")
            out.extend(sessions.connect(node, now))

    def candidate(self, target: NodeId) -> tuple[NodeId | None, str]:
        """The active connection on the path to ``target`` (Kazemzadeh & Jacobsen §3.2): the first
        node of the path's first δ + 1 that is up and has an open session, all before it failed.
        (None, PENDING) if the first live node has no open session yet; (None, LARGE) if the δ + 1
        first nodes, or all nodes, of the path failed: a large fragment."""
        cached = self.routes.get(target)
        if cached is not None:
            return cached
        view, sessions = self.n.view, self.n.sessions
        assert view is not None and sessions is not None
        result: tuple[NodeId | None, str] = (None, LARGE)
        for hop in view.path(target)[: view.reach]:
            if hop in self.n.down:
                continue
            result = (hop, ACTIVE) if sessions.is_open(hop) else (None, PENDING)
            break
        self.routes[target] = result
        return result

    def changed(self) -> None:
        self.routes.clear()
        self.topology_changed = True
        self.n.flow.all_dirty = True

    def session_event(self, ev: Up | Down | Miswired, now: float, out: list[Output]) -> None:
        view = self.n.view
        assert view is not None
        match ev:
            case Miswired(peer=peer, wiring=theirs):
                # said once per peer, for the operator of either side (the runtime shows a
                # "miswired" record as one line; pubmesh.net.node.process)
                role = "broker" if view.is_broker(peer) else "client"
                out.append(
                    TraceRecord(
                        "miswired",
                        {
                            "peer": peer,
                            "problem": (
                                f"a {role} with a broker list or tree other than this "
                                f"node's (its wiring {theirs:016x}, ours "
                                f"{self.n.wiring:016x}): every broker and client must list the "
                                "same brokers in the same order, with the same "
                                "[stack.brokertree] delta, layout and topology parameters"
                            ),
                        },
                    )
                )
            case Up(peer=peer, epoch=epoch):
                self.n.down.discard(peer)
                known = self.peer_epochs.get(peer)
                self.peer_epochs[peer] = epoch
                self.knew[peer] = known is not None and epoch > known
                if not view.is_broker(peer):
                    view.learn_client(peer)
                    if known is not None and epoch > known:
                        self.n.client_restarted(peer, epoch, now, out)
                self.n.links[peer] = Link(peer)
                self.changed()
            case Down(peer=peer, reason=reason):
                self.n.links.pop(peer, None)
                self.n.recovery.answered.pop(peer, None)
                self.n.recovery.peer_recovering.discard(peer)
                for entry in self.n.queue.entries():
                    entry.out.discard(peer)
                if peer not in self.n.down:  # a failed probe of a failed node says nothing new
                    self.n.count(f"down_{reason}")
                    out.append(TraceRecord("brokertree.suspect", {"peer": peer, "reason": reason}))
                fresh = peer not in self.n.down
                self.n.down.add(peer)
                self.changed()
                self.ensure(now, out)
                if fresh and reason in _MISTAKABLE and peer in self.wanted():
                    # re-probe at once (Kazemzadeh & Jacobsen, Highly Available Distributed
                    # Publish/Subscribe Systems §4.1: the lead probes every probe_period): a
                    # node suspected by mistake (fn. 2: the detector "may err") answers within
                    # a round trip, before its bypass can add up with others' to more than δ ⊥
                    # in a 2δ + 1 window (§5.3) and stall copies behind it
                    self.n.count("reprobes")
                    out.extend(self.n.sessions.connect(peer, now) if self.n.sessions else ())

    def refresh_links(self, now: float, out: list[Output]) -> None:
        """Activate the sessions that became active and deactivate the others (spec §4)."""
        sessions = self.n.sessions
        assert sessions is not None
        for peer in sorted(self.n.links):
            link = self.n.links[peer]
            hop, _ = self.candidate(peer)
            should = hop == peer
            if should and link.state == INACTIVE:
                link.state = ACTIVATING
                link.gen += 1
                self.n.count("activations")
                self.n.send(peer, self.lseq_message(peer, request=True, gen=link.gen), now, out)
            elif not should and link.state != INACTIVE:
                link.state = INACTIVE
                link.pointer = -1
                self.n.flow.all_dirty = True

    def lseq_message(self, peer: NodeId, *, request: bool, gen: int) -> LSeq:
        return LSeq(
            sid=0,
            n=0,
            request=request,
            gen=gen,
            lseq_sub=self.n.sub_high.get(peer),
            lseq_msg=self.n.high.get(peer),
            knew=self.knew.get(peer, False),
            recovering=self.n.recovery.recovering is not False,
        )
