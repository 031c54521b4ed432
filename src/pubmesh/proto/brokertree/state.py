"""The brokertree node's shared vocabulary: where a node is in its life, and the check-out
state of a session with one peer (Kazemzadeh & Jacobsen, *Highly Available Distributed
Publish/Subscribe Systems* §3.2, §9; docs/protocols/brokertree.md §4). The node
(:mod:`.node`) and its parts (:mod:`.connections`, :mod:`.recovery`, :mod:`.flow`,
:mod:`.dack`, :mod:`.client`) all read them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pubmesh.proto.core import NodeId

__all__ = [
    "ACTIVATING",
    "ACTIVE",
    "IDLE",
    "INACTIVE",
    "LARGE",
    "LEAVING",
    "LEFT",
    "PENDING",
    "RUNNING",
    "Life",
    "Link",
    "LinkState",
]


class Life(enum.StrEnum):
    """Where a node is in its life (its ``state``)."""

    IDLE = "idle"
    RUNNING = "running"
    LEAVING = "leaving"
    LEFT = "left"


class LinkState(enum.StrEnum):
    """A link's state (spec §4): inactive (a closer node on the path is up), activating (LSeq
    asked), active (its pointer checks out)."""

    INACTIVE = "inactive"
    ACTIVATING = "activating"
    ACTIVE = "active"


IDLE, RUNNING, LEAVING, LEFT = Life  # by their short names, in order
INACTIVE, ACTIVATING, ACTIVE = LinkState
#: route states of a recipient's path
PENDING, LARGE = "pending", "large"


@dataclass(slots=True)
class Link:
    """Check-out state of the session with one peer (spec §4)."""

    peer: NodeId
    state: LinkState = INACTIVE
    pointer: int = -1
    gen: int = 0
    #: since when the session has been stalled (spec §4 head of line; -1: not since its
    #: activation): past ``stall_timeout`` the nodes it bypasses are presumed gone and it
    #: stops holding copies that would break legitimacy (``past_stall``)
    stalled_since: float = -1.0
