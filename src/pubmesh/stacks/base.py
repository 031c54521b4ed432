"""One pub/sub interface for every stack.

A *stack* composes protocols from :mod:`pubmesh.proto` into a node that speaks the pub/sub
interface of DESIGN.md: ``Subscribe(topic | filter)``, ``Unsubscribe``, ``Publish(topic |
attributes, payload)``, and ``Deliver`` outputs coming out. A runtime drives a node exactly as
it drives a single protocol (:mod:`pubmesh.proto.core`): ``node.handle(event, now)``.

A stack is described to the runtimes by a :class:`StackSpec`: its name, its parameter
dataclass (the ``[stack.<name>]`` table of a scenario), a factory for nodes, which node ids play
an infrastructure role (the supervisor of papers/000, brokers of papers/001), and optional
hooks for corrupted initial states and a legitimacy predicate (self-stabilizing stacks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.proto.core import NodeContext, NodeId, StackNode


@dataclass(frozen=True)
class StackSpec:
    """How runtimes learn about a stack."""

    name: str
    #: Dataclass type of the stack's parameters; every field has a default. Scenario key
    #: ``[stack.<name>]`` is validated against it.
    params_type: type
    #: Build a node from its context (``ctx.params`` is an instance of ``params_type``).
    create: Callable[[NodeContext], StackNode]
    #: Roles of infrastructure nodes by id for a run of ``n`` nodes (e.g. ``{0: "supervisor"}``);
    #: every other node is a ``"peer"`` that takes part in the workload.
    infrastructure: Callable[[int, Any], Mapping[NodeId, str]] = lambda n, params: {}
    #: Contacts handed to every node in ``Start`` (the cluster's well-known nodes).
    contacts: Callable[[int, Any], tuple[NodeId, ...]] = lambda n, params: (0,)
    #: Corrupted initial states: ``corrupt(kind, nodes, rng, params)`` rewrites the nodes'
    #: state in place and returns junk messages to put in flight as (src, dst, message).
    corrupt: Callable[..., list[tuple[NodeId, NodeId, Any]]] | None = None
    #: Names of corruption kinds ``corrupt`` accepts.
    corruption_kinds: tuple[str, ...] = ()
    #: Legitimacy predicate over all live nodes, for convergence_time; None if the stack has none.
    is_legitimate: Callable[[Mapping[NodeId, StackNode]], bool] | None = None
    #: Content-based stacks take filters and attributes instead of bare topics.
    content_based: bool = False
    description: str = ""


STACKS: dict[str, StackSpec] = {}
KNOWN_STACKS = ("gossip", "skipring", "chord", "brokertree", "clique", "d2g")


def register(spec: StackSpec) -> StackSpec:
    STACKS[spec.name] = spec
    return spec


def get_stack(name: str) -> StackSpec:
    """The spec of a stack by name, importing the stack modules on first use."""
    _load_all()
    try:
        return STACKS[name]
    except KeyError:
        have = ", ".join(sorted(STACKS)) or "none"
        if name in KNOWN_STACKS:
            raise KeyError(f"stack {name!r} is not implemented yet (available: {have})") from None
        raise KeyError(f"unknown stack {name!r} (available: {have})") from None


def available_stacks() -> list[str]:
    _load_all()
    return sorted(STACKS)


def _load_all() -> None:
    import importlib

    for name in KNOWN_STACKS:
        try:
            importlib.import_module(f"pubmesh.stacks.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"pubmesh.stacks.{name}":
                raise
