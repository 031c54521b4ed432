"""The relay layer of the ``clique`` and ``d2g`` stacks (papers/002, specs/relay.md §2): the home
of the shared building block, which the clique/d2g issue fills.

What goes here, as specs/relay.md §2.3 recommends: one sans-IO relay layer per node, below both
stacks and shared by all their topic instances. A *relay* is held by exactly one process, its
owner; its ``next`` is the owner itself (an IN relay) or another relay (an OUT relay), and
following ``next`` ends at its *sink*. Passing a reference to one of my relays makes the
receiver a **new** OUT relay pointing at it (safe introduction); ``direct`` tells a one-hop relay
from an indirect one; a deleted relay that something still points at stays as a forwarding
zombie until its holders reach zero (Release / Probe / HoldCount / RelayGone / SinkFix). Over
TCP a relay is an endpoint multiplexed over the connection between consecutive owners.

It follows the contract of :mod:`pubmesh.proto.core` like every layer: one
``handle(event, now)`` over a closed input union, typed timers, messages registered under the
clique/d2g tag range 500-599 (docs/adding-a-stack.md). This package holds no code yet: no stack
of this build uses it, and a stub would only pretend.
"""
