"""The narrow protocol between a relay-model group stack's node and its parts.

Build-Clique's rules (:class:`~pubmesh.proto.clique.build.BuildClique`), Leave's
(:class:`~pubmesh.proto.clique.leave.LeaveProtocol`) and Build-D2G's
(:class:`~pubmesh.proto.d2g.build.BuildD2G`) work on one topic's
:class:`~pubmesh.proto.clique.node.Instance` and change relays only through
:class:`RelayOps`: the few operations of the relay model (Scheideler's lecture chapter 9: send
over a relay, delete one, hand out an introduction) and the node's own steps they lead to (apply
what the relay layer decided, stop an instance, run LeaveTimeout). The node is handed to a
part's method as its first argument on each call, so a part holds no reference to its node
(no cycle between them, nothing to keep weak), and a stack built on the clique (d2g) plugs in
its own rules as a part that keeps :class:`BuildRules`, instead of overriding the node's
methods.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Protocol

from pubmesh.proto.core import Message, NodeId, Output
from pubmesh.proto.relay.layer import Outcome, Relay, RelayLayer

if TYPE_CHECKING:
    from pubmesh.proto.clique.instance import Instance
    from pubmesh.proto.clique.messages import Introduce
    from pubmesh.proto.clique.params import CliqueParams


class RelayOps(Protocol):
    """What a part may ask of its node: the relay model's operations and the node's steps."""

    @property
    def node_id(self) -> NodeId: ...

    @property
    def params(self) -> CliqueParams: ...

    @property
    def rng(self) -> random.Random: ...

    @property
    def layer(self) -> RelayLayer: ...

    def send(self, relay: Relay, message: Message, now: float, out: list[Output]) -> None:
        """``relay ← message`` (to one of our own IN relays: a local call, nothing sent)."""

    def delete(self, relay: Relay, now: float, out: list[Output]) -> None:
        """Delete ``relay`` and carry out what the relay layer decides with it."""

    def apply(self, outcome: Outcome, now: float, out: list[Output]) -> None:
        """Carry out a relay layer's outcome (sends, deliveries, relays gone)."""

    def introduction(self, instance: Instance, relay: Relay, introducer: NodeId) -> Introduce:
        """``Introduce(relay)`` for ``instance``, naming the member whose Timeout asked."""

    def stop(self, instance: Instance, now: float, out: list[Output]) -> None:
        """Every relay of ``instance`` goes, then the instance (spec §3 stop)."""

    def leave_timeout(self, instance: Instance, now: float, out: list[Output]) -> None:
        """LeaveTimeout of a leaving ``instance`` (its Leave part's)."""

    def count(self, name: str, by: int = 1) -> None:
        """Add ``by`` to the node's counter ``name``."""


class BuildRules(Protocol):
    """A group stack's joining rules (Build-Clique's, or Build-D2G's): the handlers of Join,
    AskForIntro, Introduce and Feedback, and Timeout, each given the node as ``ops``."""

    def on_join(
        self, ops: Any, instance: Instance, u: Relay, now: float, out: list[Output]
    ) -> None: ...

    def on_ask_for_intro(
        self,
        ops: Any,
        instance: Instance,
        u: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None: ...

    def on_introduce(
        self,
        ops: Any,
        instance: Instance,
        w: Relay,
        introducer: Any,
        now: float,
        out: list[Output],
    ) -> None: ...

    def on_feedback(self, ops: Any, instance: Instance, target: Any, new: Any) -> None: ...

    def timeout(self, ops: Any, instance: Instance, now: float, out: list[Output]) -> None: ...
