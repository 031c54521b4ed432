"""One pub/sub interface for every stack.

A *stack* composes protocols from :mod:`pubmesh.proto` into a node that speaks the pub/sub
interface of docs/design.md: ``Subscribe(topic | filter)``, ``Unsubscribe``, ``Publish(topic |
attributes, payload)``, and ``Deliver`` outputs coming out. A runtime drives a node exactly as
it drives a single protocol (:mod:`pubmesh.proto.core`): ``node.handle(event, now)``.

A stack is described to the runtimes by a :class:`StackSpec`: its name, its parameter dataclass (the
``[stack.<name>]`` table of a scenario), a factory for nodes, which node ids play an infrastructure
role (the supervisor of Feldmann et al., brokers of Kazemzadeh & Jacobsen), and optional hooks for
corrupted initial states and a legitimacy predicate (self-stabilizing stacks).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pubmesh.errors import did_you_mean
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
    #: Warm start (``[init] overlay = "warm"``): ``warm_start(nodes, rng, params)`` rewrites the
    #: state of freshly started nodes, each already subscribed to its workload topics, into a
    #: legitimate overlay over those subscriptions, built by construction. The simulator keeps
    #: the timers the nodes set while starting and subscribing, and drops their messages (the
    #: joins the warm overlay replaces). None: the stack has no warm start.
    warm_start: Callable[[Mapping[NodeId, StackNode], random.Random, Any], None] | None = None
    #: Legitimacy predicate over all live nodes, for convergence_time; None if the stack has none.
    is_legitimate: Callable[[Mapping[NodeId, StackNode]], bool] | None = None
    #: Content-based stacks take filters and attributes instead of bare topics.
    content_based: bool = False
    description: str = ""
    #: The stack's colour in every figure of every report (a CSS colour); None: one of the
    #: spare colours, picked by name. The six stacks share the Okabe-Ito palette (colour-blind
    #: safe).
    colour: str | None = None
    #: The stack's scenario in ``scenarios/`` for ``pubmesh demo``; its first ``[[faults]]``
    #: entry must crash a ``fraction`` of the nodes (the demo sweeps it). None: not in the demo.
    demo_scenario: str | None = None
    #: Message roles for the cost tables: a payload message (registered ``payload=True``) is
    #: ``payload``; a non-payload message of one of these layers is ``repair`` (the
    #: dissemination layer's own control traffic: Plumtree's IHave/Graft/Prune, skipring's trie
    #: checks); every other message is ``maintenance`` (membership, ring, supervisor).
    repair_layers: tuple[str, ...] = ()
    #: Snapshot layers that are not overlay edges (left out of degree and diameter), such as a
    #: supervisor's database of the whole ring.
    non_overlay_layers: tuple[str, ...] = ()
    #: Parameter (of ``params_type``) holding the period of the stack's timeout action, for
    #: ``config_requests`` (requests per timeout interval); None if the stack has none.
    timeout_param: str | None = None
    #: Metric columns (trace-analysis names) that only this stack fills, shown in reports when a
    #: run of the stack is present (e.g. ``convergence_time`` for self-stabilizing stacks).
    extra_metrics: tuple[str, ...] = ()
    #: Why a node of ``role`` with these ``contacts`` (its own id ``me``) cannot work, in one
    #: line a person can act on; None if it can. The network runtime asks before Start, and a
    #: node that cannot work says so and stops (the CLI exits 2, the API raises a UserError)
    #: instead of retrying for ever or waiting without a word. None: every start works.
    start_problem: Callable[[str, tuple[NodeId, ...], NodeId], str | None] | None = None
    #: What a late subscriber's history request (``Subscribe.history``) gets on this stack, in
    #: one line (README's table); "" if the stack keeps no history, and then the request is
    #: refused where it is made (shell, API, control line, scenario) rather than ignored.
    history: str = ""

    def role_of(self, layer: str, payload: bool) -> str:
        """``payload``, ``repair`` or ``maintenance`` for a message of ``layer``."""
        if payload:
            return "payload"
        return "repair" if layer in self.repair_layers else "maintenance"

    def timeout_interval(self, table: Mapping[str, Any] | None) -> float | None:
        """The stack's timeout period under the ``[stack.<name>]`` table ``table`` (its default
        where the table does not set it), or None."""
        if self.timeout_param is None:
            return None
        value = (table or {}).get(self.timeout_param)
        if value is None:
            value = getattr(self.params_type(), self.timeout_param)
        return float(value) if isinstance(value, int | float) and value > 0 else None


STACKS: dict[str, StackSpec] = {}
#: The stacks of papers/ this project implements or will: named in errors and in
#: ``pubmesh stacks`` even before they exist.
KNOWN_STACKS = ("gossip", "skipring", "chord", "brokertree", "clique", "d2g")


def register(spec: StackSpec) -> StackSpec:
    """Add a stack to the registry (a spec module calls this at import)."""
    if spec.name in STACKS and STACKS[spec.name] is not spec:
        raise ValueError(f"stack {spec.name!r} is registered twice")
    STACKS[spec.name] = spec
    return spec


def get_stack(name: str) -> StackSpec:
    """The spec of a stack by name, importing the stack modules on first use.

    A stack of this package is found by its module alone, without importing the others: a
    node process runs one stack, and importing all six cost it a fifth of its start-up
    (~0.1 CPU s of ~0.5, times twelve processes per cluster)."""
    if name not in STACKS and not _LOADED and name.isidentifier() and name != "base":
        import importlib.util

        module = f"pubmesh.stacks.{name}"
        if importlib.util.find_spec(module) is not None:
            _note_spec(importlib.import_module(module))
    if name in STACKS:
        return STACKS[name]
    _load_all()
    try:
        return STACKS[name]
    except KeyError:
        have = ", ".join(sorted(STACKS)) or "none"
        if name in KNOWN_STACKS:
            raise KeyError(f"stack {name!r} is not implemented yet (available: {have})") from None
        hint = did_you_mean(name, STACKS)
        raise KeyError(f"unknown stack {name!r} (available: {have}){hint}") from None


def available_stacks() -> list[str]:
    """Every registered stack, including probe stacks a test module registers directly."""
    _load_all()
    return sorted(STACKS)


def discovered_stacks() -> list[str]:
    """The stacks of spec modules (each module of ``pubmesh.stacks``, and those named in
    ``$PUBMESH_STACK_MODULES``): the real pub/sub stacks every generated test runs over."""
    _load_all()
    return sorted(_DISCOVERED)


def all_stack_names() -> list[str]:
    """The known stacks in their usual order, then any other registered one."""
    _load_all()
    return [*KNOWN_STACKS, *sorted(set(STACKS) - set(KNOWN_STACKS))]


def _load_all() -> None:
    """Import every spec module, once per process: each module of this package but ``base``
    (a new stack is found by its file alone), and the modules named in
    ``$PUBMESH_STACK_MODULES``. Every registry query calls this, so it lists the package's
    files only the first time."""
    global _LOADED
    if _LOADED:
        return
    import importlib
    import pkgutil

    import pubmesh.stacks
    from pubmesh.errors import UserError
    from pubmesh.settings import STACK_MODULES_ENV, extra_stack_modules

    own = [
        f"pubmesh.stacks.{info.name}"
        for info in pkgutil.iter_modules(pubmesh.stacks.__path__)
        if info.name != "base"
    ]
    for module in own:
        _note_spec(importlib.import_module(module))
    for module in extra_stack_modules():
        try:
            loaded = importlib.import_module(module)
        except ImportError as error:
            raise UserError(
                f"${STACK_MODULES_ENV}: cannot load stack module {module!r} ({error})"
            ) from error
        _note_spec(loaded)
    _LOADED = True


_DISCOVERED: set[str] = set()
#: set once every spec module has loaded (a failed load is tried, and reported, again)
_LOADED = False


def _note_spec(module: Any) -> None:
    """Record the stack a spec module registers (its module-level ``SPEC``)."""
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, StackSpec):
        raise TypeError(
            f"stack module {module.__name__} defines no SPEC = register(StackSpec(...))"
        )
    _DISCOVERED.add(spec.name)


def parameter_docs(params_type: type) -> dict[str, str]:
    """What each field of a stack's parameter dataclass means: the ``#:`` comment above it
    in the class's source (its bases' too), on one line; fields without one are absent."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for cls in reversed(params_type.__mro__):
        if cls is object or not dataclasses.is_dataclass(cls):
            continue
        try:
            lines, _ = inspect.getsourcelines(cls)
        except (OSError, TypeError):
            continue
        source = textwrap.dedent("".join(lines))
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        text = source.splitlines()
        previous: tuple[int, str] | None = None  # (last line, doc) of the field above
        for node in body.body:
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                previous = None
                continue
            comment: list[str] = []
            row = node.lineno - 2
            while row >= 0 and text[row].strip().startswith("#:"):
                comment.insert(0, text[row].strip()[2:].strip())
                row -= 1
            doc = " ".join(comment)
            if not doc and previous is not None and previous[0] == node.lineno - 1:
                doc = previous[1]  # a field right under another shares its comment
            if doc:
                docs[node.target.id] = doc
            previous = (node.end_lineno or node.lineno, doc) if doc else None
    return docs
