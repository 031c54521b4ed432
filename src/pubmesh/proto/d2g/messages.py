"""Group messages of Build-D2G (Scheideler's lecture §9.3; docs/protocols/relay.md §4 and §8, tags
517–518). AskForIntro, Introduce, AskToReverse, Reverse, Search and Pub are the clique's
(:mod:`pubmesh.proto.clique.messages`): Build-D2G gives AskForIntro and Introduce other handlers,
not other fields."""

from __future__ import annotations

from dataclasses import dataclass

from pubmesh.proto.clique.messages import OVERLAY, GroupMessage
from pubmesh.proto.core import register_message
from pubmesh.proto.relay.layer import routed
from pubmesh.proto.relay.messages import Ref


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class AskForConnect(GroupMessage):
    """``AskForConnect(u, ttl)``: connect to u (send it a relay to your ``in``), or, with the
    in-degree cap (spec §4 [R]), pass the request on at most ``ttl`` more times."""

    u: Ref
    ttl: int


register_message(AskForConnect, 517, layer=OVERLAY)


@routed
@dataclass(frozen=True, slots=True, kw_only=True)
class Connect(GroupMessage):
    """``Connect(w)``: here is a relay to my ``in``; enqueue it in N (Scheideler's lecture §9.3)."""

    w: Ref


register_message(Connect, 518, layer=OVERLAY)
