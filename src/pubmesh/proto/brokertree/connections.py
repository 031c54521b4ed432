"""The brokertree node's sessions and routes (Kazemzadeh & Jacobsen, *Highly Available
Distributed Publish/Subscribe Systems* §3.2–3.3, §4.1; docs/protocols/brokertree.md §4): which
nodes a node keeps sessions with, the active connection on the path to any node, what a session
coming up or going down changes, and which links are active.

A part of :class:`~pubmesh.proto.brokertree.node.BrokerTreeNode`, built on its
:class:`~.shared.TreeState` (the view, the sessions, ``down``, ``links`` and the routes cache
that :meth:`~.shared.TreeState.candidate` reads); the node calls it in the order its module
essay gives. A client that came back as a new incarnation is a
:class:`~.shared.ClientRestarted` for the node.
"""

from __future__ import annotations

from pubmesh.proto.brokertree.session import Down, Miswired, Up
from pubmesh.proto.brokertree.shared import ClientRestarted, TreeOut, TreeState
from pubmesh.proto.brokertree.state import ACTIVATING, INACTIVE, Link
from pubmesh.proto.core import NodeId, TraceRecord

__all__ = ["Connections"]

#: session ends that may be the detector's mistake (silence, a late frame, the peer's own
#: mistake): the peer is re-probed at once; a runtime PeerDown is taken at its word
_MISTAKABLE = frozenset({"silent", "gap", "reset", "redialed", "handshake"})


class Connections:
    """Sessions wanted, routes and link activation of one node (module docstring)."""

    __slots__ = ("peer_epochs", "s")

    def __init__(self, s: TreeState) -> None:
        self.s = s
        #: last incarnation epoch seen of each peer (spec §7.5 client restart)
        self.peer_epochs: dict[NodeId, float] = {}

    def wanted(self) -> set[NodeId]:
        """The nodes this node keeps sessions with (spec §4): its tree neighbours and, for each
        failed one, its neighbours on the far side within δ + 1 hops, recursively. A broker
        does not dial its own clients: they dial it."""
        view = self.s.view
        assert view is not None
        result: set[NodeId] = set()
        todo = [
            y for y in view.neighbours(self.s.node_id) if view.is_broker(y) or not self.s.is_broker
        ]
        while todo:
            y = todo.pop()
            if y in result:
                continue
            result.add(y)
            if y in self.s.down:
                todo.extend(view.far_side(y))
        result.discard(self.s.node_id)
        return result

    def ensure(
        self, now: float, out: TreeOut, *, probe: bool = False, initial: bool = False
    ) -> None:
        """Dial every wanted node without a session; failed ones only when probing [P §4.1]."""
        sessions, view = self.s.sessions, self.s.view
        assert sessions is not None and view is not None
        mine = view.ordinal.get(self.s.node_id, -1)
        for node in sorted(self.wanted()):
            if sessions.has(node) or (node in self.s.down and not probe):
                continue
            if initial and view.ordinal.get(node, -1) > mine >= 0:
                continue
            if node in self.s.down:
                self.s.count("probes")
            out.extend(sessions.connect(node, now))

    def session_event(self, ev: Up | Down | Miswired, now: float, out: TreeOut) -> None:
        view = self.s.view
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
                                f"{self.s.wiring:016x}): every broker and client must list the "
                                "same brokers in the same order, with the same "
                                "[stack.brokertree] delta, layout and topology parameters"
                            ),
                        },
                    )
                )
            case Up(peer=peer, epoch=epoch):
                self.s.down.discard(peer)
                known = self.peer_epochs.get(peer)
                self.peer_epochs[peer] = epoch
                self.s.knew[peer] = known is not None and epoch > known
                if not view.is_broker(peer):
                    view.learn_client(peer)
                    if known is not None and epoch > known:
                        out.route(ClientRestarted(peer, epoch))
                self.s.links[peer] = Link(peer)
                self.s.changed()
            case Down(peer=peer, reason=reason):
                self.s.links.pop(peer, None)
                for entry in self.s.queue.entries():
                    entry.out.discard(peer)
                if peer not in self.s.down:  # a failed probe of a failed node says nothing new
                    self.s.count(f"down_{reason}")
                    out.append(TraceRecord("brokertree.suspect", {"peer": peer, "reason": reason}))
                fresh = peer not in self.s.down
                self.s.down.add(peer)
                self.s.changed()
                self.ensure(now, out)
                if fresh and reason in _MISTAKABLE and peer in self.wanted():
                    # re-probe at once (Kazemzadeh & Jacobsen, Highly Available Distributed
                    # Publish/Subscribe Systems §4.1: the lead probes every probe_period): a
                    # node suspected by mistake (fn. 2: the detector "may err") answers within
                    # a round trip, before its bypass can add up with others' to more than δ ⊥
                    # in a 2δ + 1 window (§5.3) and stall copies behind it
                    self.s.count("reprobes")
                    out.extend(self.s.sessions.connect(peer, now) if self.s.sessions else ())

    def refresh_links(self, now: float, out: TreeOut) -> None:
        """Activate the sessions that became active and deactivate the others (spec §4)."""
        sessions = self.s.sessions
        assert sessions is not None
        for peer in sorted(self.s.links):
            link = self.s.links[peer]
            hop, _ = self.s.candidate(peer)
            should = hop == peer
            if should and link.state == INACTIVE:
                link.state = ACTIVATING
                link.gen += 1
                self.s.count("activations")
                self.s.send(peer, self.s.lseq_message(peer, request=True, gen=link.gen), now, out)
            elif not should and link.state != INACTIVE:
                link.state = INACTIVE
                link.pointer = -1
                self.s.recheck_all = True
