"""Corrupted initial states of the d2g stack (docs/protocols/relay.md §6), for ``[init]
corruption``, and its warm start. The installer, the holder recount and the junk are the clique's
(:mod:`pubmesh.proto.clique.corruption`, whose module doc says what the hook may and may not do);
the kinds are d2g's:

* ``random_graph``: a random tree with random directions plus n/2 random edges (direct or
  chained, in N or D, 10% with a wrong sink or direct claim), as for the clique;
* ``line``: a directed path;
* ``star``: every member points at one centre, which points at one of them;
* ``sets``: a d2g of out-degree ≈ √(n ln n), then the clique's ``sets`` damage (N→D moves,
  twins, junk D relays, leavers with anchors, garbage anchors);
* ``junk``: a d2g of out-degree ≈ √(n ln n) and junk messages in flight, AskForConnect and
  Connect among them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from typing import Any

from pubmesh.proto.clique.corruption import Installer, Junk, install_state
from pubmesh.proto.core import Message, NodeId, StackNode
from pubmesh.proto.d2g.messages import AskForConnect, Connect
from pubmesh.proto.relay.messages import Ref

KINDS = ("random_graph", "line", "star", "sets", "junk")


def degree(n: int) -> int:
    """The out-degree an installed d2g gets: where Build-D2G settles, m ≈ √(n ln n) (spec §4)."""
    return max(1, min(n - 1, round(math.sqrt(n * math.log(max(n, 2))))))


def _digraph(installer: Installer) -> None:
    installer.random_digraph(degree(len(installer.members)))


def _sets(installer: Installer) -> None:
    _digraph(installer)
    installer.sets()


INSTALL: dict[str, Callable[[Installer], None]] = {
    "random_graph": Installer.random_graph,
    "line": Installer.line,
    "star": Installer.star,
    "sets": _sets,
    "junk": _digraph,
}
assert tuple(INSTALL) == KINDS


def _ask_for_connect(
    header: dict[str, Any], ref: Ref, nodes: list[NodeId], src: NodeId, rng: random.Random
) -> Message:
    return AskForConnect(**header, u=ref, ttl=rng.randrange(4))


def _connect(
    header: dict[str, Any], ref: Ref, nodes: list[NodeId], src: NodeId, rng: random.Random
) -> Message:
    return Connect(**header, w=ref)


def corrupt(
    kind: str,
    nodes: Mapping[NodeId, StackNode],
    rng: random.Random,
    params: Any = None,
    junk_messages: int = 0,
) -> list[Junk]:
    """StackSpec.corrupt: rewrite ``nodes`` in place into a corrupted state of ``kind`` and
    return the junk messages to put in flight."""
    extra = (_ask_for_connect, _connect)
    return install_state("d2g", INSTALL, kind, nodes, rng, junk_messages, extra)


def warm_start(nodes: Mapping[NodeId, StackNode], rng: random.Random, params: Any = None) -> None:
    """StackSpec.warm_start: every topic group a random digraph of out-degree ≈ √(n ln n),
    every relay direct."""
    install_state("d2g", {"warm": _digraph}, "warm", nodes, rng, 0)
