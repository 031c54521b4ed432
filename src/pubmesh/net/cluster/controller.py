"""The cluster controller: one run, from the first process to ``run.json``.

:class:`Cluster` starts the node processes (:mod:`pubmesh.net.cluster.children`), waits until
each reports its address, and takes that moment as the run's time 0. It then plays the
workload plan as a typed timeline (:func:`timeline`): :class:`StartNode`,
:class:`SubscribeNode`, :class:`SubscribeLate`, :class:`PublishAt`, :class:`UnsubscribeAt`,
:class:`KillAt`, :class:`LeaveAt`, :class:`RecoverAt` and, last, :class:`StopAll`, in the
simulator's order for events at the same instant (starts, publications, unsubscriptions,
faults, delayed subscriptions):

1. it boots the nodes at the start times of the workload plan (:mod:`.workload`: the
   same draws as the simulator, so one scenario means one workload in both runtimes),
   infrastructure and contact nodes first, and subscribes them, except the late subscribers
   (``[workload] late_fraction``), which it subscribes at their planned ``late_at`` with the
   plan's history request (:func:`held_back`);
2. it keeps the workload file's clock: every event happens at its scenario time ``t`` from
   time 0, as in ``pubmesh sim``, so the two traces of one scenario line up. It watches whether
   the overlay is up (every subscriber planned to have started by the first publication
   reports a neighbour in each of its topics that another such subscriber shares); if it is
   not when the first publication is due, it says so in one line and records a
   ``cluster.overlay_not_ready`` event per node that was not ready. Only ``--wait-overlay S``
   departs from the clock, explicitly: it waits up to S seconds at the first publication and
   shifts the rest of the schedule by the wait (a ``cluster.schedule_shifted`` event and
   ``run.json`` say by how much);
3. it issues the publications at their planned times from their planned publishers, SIGKILLs
   the planned victims at ``--kill FRACTION@SECONDS`` (and runs any ``[[faults]]`` of kind
   crash or leave), all while a live table (:mod:`pubmesh.net.cluster.live`) shows every node's
   neighbours and deliveries; a ``recover`` fault starts each node it names that the
   controller killed again (:meth:`Cluster._restart`): a new process with the same arguments
   and listen port (so the same id), booted through the contacts and recorded as ``recover``
   in the nodes table. ``durable = true`` (which needs ``--data-dir``) restarts it on its data
   directory: it resubscribes by itself, asking the topics' history for what it missed, and
   the controller records the subscriptions it reports from its restart; ``durable = false``
   gives it a fresh empty directory (DIR/node-I.life-K) and the plan's subscriptions. Each
   life writes its partial trace to a directory of its own (node-I, node-I.life-2, ...), all
   gathered; commands for a node wait while it restarts;
4. at ``--duration`` it tells every live node to stop (without leaving, as a simulation just
   ends), waits for them to write their partial traces, and gathers one run directory
   (:mod:`pubmesh.net.cluster.gather`): trace v1, ``runtime = "net"``, times from the run's start,
   node ids 0..N-1 in launch order — what ``pubmesh analyze`` reads.

Times are run times: seconds since time 0, on the controller's monotonic clock for the
timeline and from the nodes' wall clocks (the ``t`` of their answers) for what they did.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pubmesh.errors import UserError
from pubmesh.net import control
from pubmesh.net.address import format_id
from pubmesh.net.cluster.children import GRACE_SECONDS, Child, ChildState, child_env, terminate
from pubmesh.net.cluster.children import wait_exit as _wait_exit
from pubmesh.net.cluster.gather import ControllerRecords, RunInfo, gather
from pubmesh.net.cluster.live import print_summary, start_live_table
from pubmesh.net.cluster.netns import NetnsLayout, remove_leftovers
from pubmesh.net.cluster.options import ClusterConfig, config_from_args
from pubmesh.net.identity import init_authority, issue
from pubmesh.private import private_dir, write_text
from pubmesh.scenario.workload import (
    FaultEvent,
    Heal,
    Partition,
    Publication,
    Subscription,
    Unsubscription,
    WorkloadPlan,
)
from pubmesh.trace.schema import TABLES

#: the ``node`` of a trace event about the run as a whole (``cluster.schedule_shifted``)
CONTROLLER = -1


def run(args: argparse.Namespace) -> int:
    """``pubmesh cluster ARGS``: validate everything, then run (exit status)."""
    return run_cluster(config_from_args(args))


def run_cluster(config: ClusterConfig) -> int:
    """Run one cluster to its end; the exit status (see :meth:`Cluster.main`)."""
    return asyncio.run(Cluster(config).main())


# --------------------------------------------------------------------------------------------
# The timeline
# --------------------------------------------------------------------------------------------
#: identity mode in network namespaces: every node has its own address, so one port serves
NETNS_PORT = 7000


@dataclass(frozen=True)
class StartNode:
    """Boot node ``node`` (its start command)."""

    ORDER: ClassVar[int] = 0
    t: float
    node: int

    @property
    def seq(self) -> int:
        return self.node


@dataclass(frozen=True)
class PublishAt:
    """Issue a planned publication from its publisher (shifted only under --wait-overlay)."""

    ORDER: ClassVar[int] = 1
    t: float
    publication: Publication

    @property
    def seq(self) -> int:
        return self.publication.pub_id


@dataclass(frozen=True)
class UnsubscribeAt:
    """A planned unsubscription (``unsubscribe_fraction``)."""

    ORDER: ClassVar[int] = 2
    t: float
    index: int
    unsubscription: Unsubscription

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class KillAt:
    """A planned crash: SIGKILL these nodes (``--kill`` or a ``[[faults]]`` crash)."""

    ORDER: ClassVar[int] = 3
    KIND: ClassVar[str] = "crash"
    t: float
    index: int
    nodes: tuple[int, ...]

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class LeaveAt:
    """A planned leave (a ``[[faults]]`` leave): these nodes run the leave protocol."""

    ORDER: ClassVar[int] = 3
    KIND: ClassVar[str] = "leave"
    t: float
    index: int
    nodes: tuple[int, ...]

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class RecoverAt:
    """A planned recovery (a ``[[faults]]`` recover): start these killed nodes again, each a
    new process with its arguments (same port, hence same id; same role), on its data
    directory if ``durable``, else on a fresh one (with ``--data-dir``)."""

    ORDER: ClassVar[int] = 3
    KIND: ClassVar[str] = "recover"
    t: float
    index: int
    nodes: tuple[int, ...]
    durable: bool

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class CutAt:
    """A planned partition (``--netns`` only): cut the links between these namespace groups
    (:meth:`.netns.NetnsLayout.partition`); ``sizes`` are the node groups' sizes, as the
    simulator traces them."""

    ORDER: ClassVar[int] = 3
    KIND: ClassVar[str] = "partition"
    t: float
    index: int
    groups: tuple[tuple[int, ...], ...]

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class HealAt:
    """A planned heal: every namespace link restored."""

    ORDER: ClassVar[int] = 3
    KIND: ClassVar[str] = "heal"
    t: float
    index: int

    @property
    def seq(self) -> int:
        return self.index


@dataclass(frozen=True)
class SubscribeNode:
    """Subscribe node ``node`` to its planned topics (``subscribe_at`` after its start)."""

    ORDER: ClassVar[int] = 4
    t: float
    node: int

    @property
    def seq(self) -> int:
        return self.node


@dataclass(frozen=True)
class SubscribeLate:
    """A late subscriber's planned first subscriptions (``[workload] late_fraction``): node
    ``node`` subscribes to ``topics`` at ``late_at``, not at its start, asking for the topics'
    ``history`` (its text; None: none)."""

    ORDER: ClassVar[int] = 4
    t: float
    node: int
    topics: tuple[str, ...]
    history: str | None

    @property
    def seq(self) -> int:
        return self.node


@dataclass(frozen=True)
class StopAll:
    """The end of the run (``--duration``; shifted with the rest under --wait-overlay)."""

    ORDER: ClassVar[int] = 5
    t: float

    @property
    def seq(self) -> int:
        return 0


TimelineEvent = (
    StartNode | SubscribeNode | SubscribeLate | PublishAt | UnsubscribeAt | KillAt | LeaveAt
    | RecoverAt | CutAt | HealAt | StopAll
)  # fmt: skip

#: seconds within which a planned subscription counts as made at its node's subscribe time
_ON_TIME = 1e-9


def held_back(plan: WorkloadPlan, late_fraction: float) -> frozenset[int]:
    """The initial workload nodes whose first subscriptions the plan does not make at their
    subscribe time (start + ``subscribe_at``): the late subscribers (``late_fraction`` of
    them; their subscriptions come at ``late_at`` in ``plan.subscriptions``, with the history
    request) and any node the plan never subscribes (gone before its subscriptions were
    due). The cluster subscribes these only as ``plan.subscriptions`` says
    (:class:`SubscribeLate`). None without late subscribers: every run without them is
    played as it always was."""
    if late_fraction <= 0:
        return frozenset()
    on_time = {
        s.node
        for s in plan.subscriptions
        if s.history is None
        and s.node < plan.nodes
        and s.t <= plan.subscribe_time(s.node) + _ON_TIME
    }
    return frozenset(n for n in plan.topics if n < plan.nodes and n not in on_time)


def late_subscriptions(plan: WorkloadPlan, held: frozenset[int]) -> list[SubscribeLate]:
    """The planned subscriptions of the ``held`` nodes (:func:`held_back`), one event per
    node and instant (their topics in plan order, one history request)."""
    grouped: dict[tuple[float, int, str | None], list[str]] = {}
    for sub in plan.subscriptions:
        if sub.node in held:
            key = (sub.t, sub.node, _history_text(sub))
            grouped.setdefault(key, []).append(sub.topic)
    return [SubscribeLate(t, node, tuple(topics), h) for (t, node, h), topics in grouped.items()]


def recovery_subscriptions(plan: WorkloadPlan, held: frozenset[int]) -> list[SubscribeLate]:
    """The planned subscriptions of recovered nodes' new lives (a recovered node resubscribes
    to its workload topics, at its recovery or ``subscribe_at`` after it), one event per node
    and instant, for the nodes not ``held`` (a held node's are in :func:`late_subscriptions`
    already). A subscription of a node at or after its first recovery belongs to a new life:
    the plan drops what an earlier life had scheduled."""
    first: dict[int, float] = {}
    for fault in plan.faults:
        if isinstance(fault, FaultEvent) and fault.kind == RecoverAt.KIND:
            for node in fault.nodes:
                first[node] = min(fault.t, first.get(node, fault.t))
    grouped: dict[tuple[float, int, str | None], list[str]] = {}
    for sub in plan.subscriptions:
        if sub.node in first and sub.node not in held and sub.t >= first[sub.node]:
            key = (sub.t, sub.node, _history_text(sub))
            grouped.setdefault(key, []).append(sub.topic)
    return [SubscribeLate(t, node, tuple(topics), h) for (t, node, h), topics in grouped.items()]


def _history_text(subscription: Subscription) -> str | None:
    return None if subscription.history is None else str(subscription.history)


def timeline(
    plan: WorkloadPlan, duration: float, held: frozenset[int] = frozenset()
) -> list[TimelineEvent]:
    """The plan as events in the order they run: by time, then as the simulator orders events
    at the same instant, then by node, publication or fault number; :class:`StopAll` last.
    ``held``: nodes subscribed only by their planned subscriptions (:func:`held_back`)."""
    events: list[TimelineEvent] = []
    for node in range(plan.nodes):
        events.append(StartNode(plan.starts[node], node))
        if plan.subscribe_at > 0 and node in plan.topics and node not in held:
            events.append(SubscribeNode(plan.subscribe_time(node), node))
    events.extend(late_subscriptions(plan, held))
    events.extend(recovery_subscriptions(plan, held))
    events.extend(PublishAt(p.t, p) for p in plan.publications)
    events.extend(UnsubscribeAt(u.t, i, u) for i, u in enumerate(plan.unsubscriptions))
    for i, fault in enumerate(plan.faults):
        if isinstance(fault, FaultEvent) and fault.kind == KillAt.KIND:
            events.append(KillAt(fault.t, i, tuple(fault.nodes)))
        elif isinstance(fault, FaultEvent) and fault.kind == LeaveAt.KIND:
            events.append(LeaveAt(fault.t, i, tuple(fault.nodes)))
        elif isinstance(fault, FaultEvent) and fault.kind == RecoverAt.KIND:
            events.append(RecoverAt(fault.t, i, tuple(fault.nodes), fault.durable))
        elif isinstance(fault, Partition):
            events.append(CutAt(fault.t, i, fault.groups))
        elif isinstance(fault, Heal):
            events.append(HealAt(fault.t, i))
        else:  # plan() refuses the other kinds
            raise ValueError(f"fault {fault!r} has no timeline event in the network runtime")
    events.sort(key=lambda e: (e.t, e.ORDER, e.seq))
    events.append(StopAll(duration))
    return events


# --------------------------------------------------------------------------------------------
# The controller
# --------------------------------------------------------------------------------------------
class Cluster:
    """One cluster run; see the module docstring."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.scenario = config.scenario
        self.plan = config.plan
        #: the late subscribers: not subscribed at their start (:func:`held_back`)
        self.held = held_back(self.plan, self.scenario.workload.late_fraction)
        #: when each held node's first subscription is planned (absent: never)
        self.late_at: dict[int, float] = {}
        for event in late_subscriptions(self.plan, self.held):
            self.late_at[event.node] = min(event.t, self.late_at.get(event.node, event.t))
        self.children: list[Child] = []
        self.records = ControllerRecords()
        self.partial = config.out / ".partial"
        self.t0_wall = 0.0
        self.t0_mono = 0.0
        self.publish_shift = 0.0
        self.overlay_up_at: float | None = None
        self.open_subscriptions: dict[tuple[int, str], float] = {}
        self.publications_done = 0
        #: publications a node refused for want of room (flow control), with the first reason
        self.publications_refused = 0
        self.first_refusal: str | None = None
        self.id_map: dict[int, int] = {}
        #: each node's id, for the contacts' list: a recovered node keeps its port, hence its
        #: id, but its new process reports it only once ready
        self.node_ids: dict[int, int] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.summary: dict[str, Any] = {
            # how the links were secured: certificates and TLS, or the shared cluster key
            "links": "identity" if config.identity else "shared-key"
        }
        if self.held:
            self.summary["late_subscribers"] = sorted(self.held)
        #: ``--netns K``: where the nodes run (None: all on 127.0.0.1)
        self.layout: NetnsLayout | None = None
        #: identity mode: each node's port, chosen before it starts (its certificate names it);
        #: a recovered node's too (the port it had: it comes back with its id)
        self.ports: dict[int, int] = {}
        #: each node's current life: 1 for its first process, one more at each recovery
        self.lives: dict[int, int] = {}
        #: the processes of earlier lives (killed), kept to close their readers at the end
        self.retired: list[Child] = []
        #: a recovery under way, per node: commands for the node wait for it
        self.restarting: dict[int, asyncio.Future[None]] = {}
        #: ``--data-dir``: each node's current data directory (a fresh recovery's is new)
        self.data_dirs: dict[int, Path] = {}

    @property
    def unexpected_exits(self) -> list[int]:
        return sorted({c.index for c in self.processes if c.unexpected_exit})

    @property
    def processes(self) -> list[Child]:
        """Every process of the run: the earlier lives of recovered nodes, then the current."""
        return [*self.retired, *self.children]

    def _life_name(self, index: int) -> str:
        """``node-I`` for a node's first life, ``node-I.life-K`` for its K-th: the name of its
        partial trace and log (and of a fresh recovery's data directory)."""
        life = self.lives.get(index, 1)
        return f"node-{index}" if life == 1 else f"node-{index}.life-{life}"

    def _trace_dir(self, index: int) -> Path:
        return self.partial / self._life_name(index)

    def _data_dir(self, index: int) -> Path | None:
        if self.config.data_dir is None:
            return None
        return self.data_dirs.get(index, self.config.data_dir / f"node-{index}")

    # ------------------------------------------------------------------ time
    def now(self) -> float:
        assert self.loop is not None
        return self.loop.time() - self.t0_mono

    def run_time(self, wall: float) -> float:
        return wall - self.t0_wall

    async def sleep_until(self, t: float) -> None:
        delay = t - self.now()
        if delay > 0:
            await asyncio.sleep(delay)

    # ------------------------------------------------------------------ main
    async def main(self) -> int:
        """Run the cluster; 0 when the run completed, 143 on SIGTERM (KeyboardInterrupt on
        Ctrl-C). An interrupted run still gathers what its nodes traced (run.json says so)."""
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        terminated = False
        stopping = False

        def on_signal(signum: int) -> None:
            # the first signal stops the run; later ones do not cut short the stop itself
            # (terminate() below is bounded: SIGTERM, grace, SIGKILL)
            nonlocal terminated, stopping
            if not stopping:
                stopping = True
                terminated = signum == signal.SIGTERM
                task.cancel()

        # Both installed here, not left to the interpreter: a controller started in the
        # background of a script inherits SIGINT ignored (POSIX shells do that), and a
        # `kill -INT` must still stop it and gather the trace, as it does `pubmesh node`
        # and `pubmesh sim`.
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, on_signal, signum)
        self._prepare_out()
        live = None
        interrupted = False
        try:
            if self.config.netns:
                self._make_namespaces()
            await self._launch()
            if not self.config.quiet and sys.stdout.isatty():
                live = start_live_table(self)
            await self._run_timeline()
            await self._stop_all()
        except asyncio.CancelledError:
            interrupted = True
        finally:
            if live is not None:
                live.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await live
            await terminate(self.processes)
            if self.layout is not None:
                self.layout.remove()
        if interrupted:
            self.summary["interrupted"] = True
            if self.t0_wall:
                with contextlib.suppress(Exception):
                    self._gather()
            if terminated:
                return 143
            raise KeyboardInterrupt
        stats = self._gather()
        if not self.config.quiet:
            print_summary(self.config.out, stats)
        return 0

    def _prepare_out(self) -> None:
        out = self.config.out
        private_dir(out)
        for table in TABLES:  # a previous run's tables in the same directory
            if (out / table).is_dir():
                shutil.rmtree(out / table)
        if self.partial.exists():
            shutil.rmtree(self.partial)
        private_dir(self.partial)

    # ------------------------------------------------------------------ launching
    def _make_namespaces(self) -> None:
        """``--netns K``: the namespaces, links and addresses (see :mod:`.netns`), after
        removing what a killed controller left behind."""
        removed = remove_leftovers()
        if removed:
            self._say(f"removed {len(removed)} network namespaces left by a killed cluster")
        self.layout = NetnsLayout.plan(self.config.netns, self.scenario.run.nodes)
        self.layout.create()

    def _command(self, index: int) -> list[str]:
        role = self.plan.roles.get(index, "peer")
        host = "127.0.0.1" if self.layout is None else self.layout.address(index)
        prefix = [] if self.layout is None else self.layout.exec_prefix(index)
        command = [
            *prefix,
            sys.executable,
            "-m",
            "pubmesh.net.node",
            "--stack",
            self.scenario.run.stack,
            "--listen",
            f"{host}:{self.ports.get(index, 0)}",
            "--control",
            "--stats-interval",
            "0.5",
            "--no-delivery-lines",
            "--trace-dir",
            str(self._trace_dir(index)),
            "--seed",
            str(self.scenario.run.seed),
            "--role",
            role,
            "--leave-linger",
            "1.0",
        ]
        if self.config.snapshot_interval > 0:
            command += ["--snapshot-interval", str(self.config.snapshot_interval)]
        if self.config.identity:
            command += ["--identity", str(self.config.out / "identity" / f"node-{index}")]
            if self.config.unsigned:
                command.append("--unsigned")
            if self.config.acl_file is not None:
                command += ["--acl", str(self.config.acl_file.resolve())]
        elif self.config.key_file is not None:
            command += ["--key", str(self.config.key_file)]
        if not self.config.trace_messages:
            command.append("--no-message-trace")
        if self.config.metrics:
            command += ["--metrics", f"{host}:0"]
        data_dir = self._data_dir(index)
        if data_dir is not None:
            command += ["--data-dir", str(data_dir)]
        for setting in self.config.param_args:
            command += ["--set", setting]
        for setting in self.config.net_args:
            command += ["--net", setting]
        return command

    def _issue_identities(self) -> None:
        """Identity mode: every node's address chosen now (a free loopback port, or a fixed
        one in its own namespace) and an identity issued for it, by the authority of
        ``--ca`` or a fresh one in OUT/identity/ca."""
        base = self.config.out / "identity"
        ca_dir = self.config.ca_dir
        if ca_dir is None:
            ca_dir = base / "ca"
            init_authority(ca_dir, force=True)
        count = self.scenario.run.nodes
        if self.layout is None:
            held = []
            for _ in range(count):  # all bound at once, so the ports differ
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                held.append(sock)
            self.ports = {i: s.getsockname()[1] for i, s in enumerate(held)}
            for sock in held:
                sock.close()
            hosts = ["127.0.0.1"] * count
        else:
            self.ports = dict.fromkeys(range(count), NETNS_PORT)
            hosts = [self.layout.address(i) for i in range(count)]
        for index in range(count):
            address = f"{hosts[index]}:{self.ports[index]}"
            issue(ca_dir, address, base / f"node-{index}", force=True)

    async def _launch(self) -> None:
        if self.config.identity:
            self._issue_identities()
        env = child_env(self.config.key_text)
        for index in range(self.scenario.run.nodes):
            child = await Child.spawn(
                index,
                self.plan.roles.get(index, "peer"),
                self._command(index),
                env=env,
                log_path=self.partial / f"node-{index}.log",
            )
            self.children.append(child)
        deadline = 60.0 + 0.5 * len(self.children)
        metrics: dict[int, str] = {}
        try:
            async with asyncio.timeout(deadline):
                for child in self.children:
                    ready = await child.wait_ready()
                    if ready.metrics is not None:
                        metrics[child.index] = ready.metrics
        except TimeoutError:
            raise UserError(
                f"the node processes did not all start within {deadline:.0f} s "
                f"(logs in {self.partial})"
            ) from None
        except ConnectionError as error:
            raise UserError(str(error)) from None
        if self.config.metrics:
            self._scrape_config(metrics)
        self.id_map = {child.node_id: child.index for child in self.children}
        self.node_ids = {child.index: child.node_id for child in self.children}
        self.t0_wall = time.time()
        self.t0_mono = asyncio.get_running_loop().time()
        # for tools and tests that watch a running cluster: every node is up, the run began
        write_text(
            self.partial / "started.json",
            json.dumps(
                {
                    "t0": self.t0_wall,
                    "nodes": {
                        c.index: {"pid": c.pid, "address": format_id(c.node_id)}
                        for c in self.children
                    },
                }
            ),
        )

    # ------------------------------------------------------------------ the timeline
    async def _run_timeline(self) -> None:
        plan = self.plan
        first_booted = [*sorted(plan.roles), *(c for c in plan.contacts if c not in plan.roles)]
        # boot infrastructure and contacts before anyone who joins through them
        pending: list[asyncio.Future[Any]] = []
        for node in first_booted:
            if plan.starts[node] == 0.0:
                await self._boot(node)
        watcher = None
        if plan.publications:
            first = min(p.t for p in plan.publications)
            watcher = asyncio.ensure_future(self._watch_overlay(first))
        checked = False
        for event in timeline(plan, self.scenario.run.duration, self.held):
            if isinstance(event, PublishAt) and not checked:
                checked = True
                await self._first_publication(event.t, watcher)
            await self.sleep_until(event.t + self.publish_shift)
            match event:
                case StartNode(node=node):
                    if self.children[node].booted_at is None:
                        pending.append(asyncio.ensure_future(self._boot(node)))
                case SubscribeNode(node=node):
                    pending.append(asyncio.ensure_future(self._subscribe(node)))
                case SubscribeLate(node=node, topics=topics, history=history):
                    pending.append(asyncio.ensure_future(self._subscribe(node, topics, history)))
                case PublishAt(publication=publication):
                    pending.append(asyncio.ensure_future(self._publish(publication)))
                case UnsubscribeAt(unsubscription=unsubscription):
                    pending.append(asyncio.ensure_future(self._unsubscribe(unsubscription)))
                case KillAt():
                    await self._kill(event)
                case LeaveAt():
                    await self._leave(event)
                case RecoverAt():
                    pending.append(asyncio.ensure_future(self._recover(event)))
                case CutAt():
                    self._cut(event)
                case HealAt():
                    self._heal()
                case StopAll():
                    if pending:
                        await asyncio.wait(pending, timeout=GRACE_SECONDS)
        if watcher is not None and not watcher.done():
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    def _contacts(self) -> tuple[int, ...]:
        """The plan's contacts' ids (the brokers, for brokertree: every node must list the
        same ones in the same order), whether or not a contact is restarting right now."""
        return tuple(self.node_ids[c] for c in self.plan.contacts)

    async def _boot(self, index: int) -> None:
        child = self.children[index]
        contacts = self._contacts()
        try:
            result = await child.request(control.Start(contacts), control.Started)
        except ConnectionError:
            return
        t = self.run_time(result.t)
        child.booted_at = t
        child.state = ChildState.RUNNING
        self.records.nodes.append((index, t, "up", child.role))
        if self.plan.subscribe_at <= 0 and index in self.plan.topics and index not in self.held:
            await self._subscribe(index)

    async def _subscribe(
        self, index: int, topics: tuple[str, ...] | None = None, history: str | None = None
    ) -> None:
        """Subscribe node ``index`` to ``topics`` (None: its planned topics), asking for
        their ``history`` (a late subscriber's request) if given."""
        await self._recovered(index)
        child = self.children[index]
        if topics is None:
            topics = self.plan.topics[index]
        # a node restarted on its data directory has subscribed again by itself (recorded
        # at its recovery): not a second time
        topics = tuple(t for t in topics if (index, t) not in self.open_subscriptions)
        commands = [control.Subscribe(topic, history=history) for topic in topics]
        futures = [child.send_nowait(command) for command in commands]
        for command, future in zip(commands, futures, strict=True):
            try:
                result = child.expect(await future, command, control.Subscribed)
            except ConnectionError:
                return
            self.open_subscriptions[(index, command.topic)] = self.run_time(result.t)

    async def _unsubscribe(self, what: Unsubscription) -> None:
        await self._recovered(what.node)
        child = self.children[what.node]
        try:
            result = await child.request(control.Unsubscribe(what.topic), control.Unsubscribed)
        except ConnectionError:
            return
        self._end_subscription(what.node, what.topic, self.run_time(result.t))

    def _end_subscription(self, index: int, topic: str, t: float) -> None:
        t_start = self.open_subscriptions.pop((index, topic), None)
        if t_start is not None:
            self.records.subscriptions.append((index, topic, t_start, t))

    def _end_subscriptions(self, index: int, t: float) -> None:
        """Every open subscription of node ``index`` ends at ``t`` (it crashed or left)."""
        for node, topic in sorted(self.open_subscriptions):
            if node == index:
                self._end_subscription(index, topic, t)

    async def _publish(self, publication: Publication) -> None:
        # a publisher drawn just after its recovery publishes once its new process runs
        await self._recovered(publication.publisher)
        child = self.children[publication.publisher]
        command = control.Publish(
            topic=publication.topic,
            # signed publications' ids are drawn by their publisher, bound to its identity
            pub_id=None if self.config.signed else publication.pub_id,
            payload_size=self.scenario.workload.payload_size,
        )
        try:
            result = await child.request(command, control.Published)
        except ConnectionError:
            return
        except control.PublishRefused as refusal:
            self.publications_refused += 1
            self.first_refusal = self.first_refusal or str(refusal)
            return
        self.publications_done += 1
        self.records.publications.append(
            (
                result.pub_id,
                publication.publisher,
                publication.topic,
                self.run_time(result.t),
                result.size,
            )
        )

    async def _kill(self, fault: KillAt) -> None:
        t = self.now()  # run time as it happened (shifted with the publications, if they were)
        for index in fault.nodes:
            await self._recovered(index)  # a node crashed again while it was restarting
            child = self.children[index]
            if not child.alive():
                continue
            # let answers to commands already sent come back first (a publication the node
            # made must be known), but not for long
            await child.settle(0.5)
            child.kill()
            t_kill = self.now()
            self.records.nodes.append((index, t_kill, "crash", child.role))
            self._end_subscriptions(index, t_kill)
        self.records.faults.append((t, fault.KIND, {"nodes": list(fault.nodes)}))

    async def _leave(self, fault: LeaveAt) -> None:
        t = self.now()
        for index in fault.nodes:
            await self._recovered(index)
            child = self.children[index]
            if not child.alive():
                continue
            try:
                result = await child.request(control.Leave(), control.Left)
            except ConnectionError:
                continue
            t_leave = self.run_time(result.t)
            child.state = ChildState.LEFT
            self.records.nodes.append((index, t_leave, "leave", child.role))
            self._end_subscriptions(index, t_leave)
        self.records.faults.append((t, fault.KIND, {"nodes": list(fault.nodes)}))

    # ------------------------------------------------------------------ recoveries
    async def _recovered(self, index: int) -> None:
        """Wait until a recovery of node ``index`` under way has ended (at once if none)."""
        restart = self.restarting.get(index)
        if restart is not None and not restart.done():
            await asyncio.shield(restart)

    async def _recover(self, fault: RecoverAt) -> None:
        """Start again each node of the fault that the controller killed (:meth:`_restart`),
        all at once; the fault row at the fault's run time."""
        t = self.now()
        victims = [i for i in fault.nodes if self.children[i].state is ChildState.KILLED]
        loop = asyncio.get_running_loop()
        for index in victims:  # before any await: commands for the node wait for it
            self.restarting[index] = loop.create_future()
        self.records.faults.append(
            (t, fault.KIND, {"nodes": list(fault.nodes), "durable": fault.durable})
        )
        await asyncio.gather(*(self._restart(index, fault.durable) for index in victims))

    async def _restart(self, index: int, durable: bool) -> None:
        """A node's next life: a new process with the arguments of the first (same listen
        port, so the same id; same role), on its data directory (``durable``) or a fresh
        empty one (``--data-dir`` without ``durable``: DIR/node-I.life-K), writing its partial
        trace to a directory of its own (partial/node-I.life-K: the gatherer reads every
        life's). Booted through the plan's contacts, recorded as ``recover`` in the nodes
        table at its start's answer; a durable one subscribes again by itself from its
        directory, so its subscriptions are taken from its stats and recorded from then."""
        done = self.restarting[index]
        try:
            old = self.children[index]
            await old.close_reader(2.0)
            self.retired.append(old)
            life = self.lives.get(index, 1) + 1
            self.lives[index] = life
            if self.config.data_dir is not None and not durable:
                fresh = self.config.data_dir / f"node-{index}.life-{life}"
                shutil.rmtree(fresh, ignore_errors=True)  # a previous run's, same name
                self.data_dirs[index] = fresh
            self.ports[index] = old.node_id & 0xFFFF  # the id is ip << 16 | port
            child = await Child.spawn(
                index,
                old.role,
                self._command(index),
                env=child_env(self.config.key_text),
                log_path=self.partial / f"{self._life_name(index)}.log",
            )
            self.children[index] = child
            try:
                async with asyncio.timeout(60.0):
                    ready = await child.wait_ready()
            except (TimeoutError, ConnectionError) as error:
                if child.running:
                    child.kill()
                self._recovery_failed(index, str(error) or "not ready within 60 s")
                return
            self.id_map.setdefault(ready.node, index)
            contacts = self._contacts()
            try:
                result = await child.request(control.Start(contacts), control.Started)
            except (ConnectionError, control.ControlError) as error:
                self._recovery_failed(index, str(error))
                return
            t = self.run_time(result.t)
            child.booted_at = t
            child.state = ChildState.RUNNING
            self.records.nodes.append((index, t, "recover", child.role))
            if self.config.data_dir is not None and durable:
                try:
                    report = await child.request(control.Stats(), control.StatsReport)
                except (ConnectionError, control.ControlError):
                    return
                for topic in report.stats.get("subscriptions", ()):
                    self.open_subscriptions.setdefault((index, topic), t)
        finally:
            if not done.done():
                done.set_result(None)

    def _recovery_failed(self, index: int, why: str) -> None:
        failed = self.summary.setdefault("recover_failures", {})
        failed[index] = why
        self._say(f"node {index} did not come back: {why}")

    def _cut(self, fault: CutAt) -> None:
        assert self.layout is not None  # config_from_args refuses partitions without --netns
        t = self.now()
        self.layout.partition(self.layout.namespace_groups(fault.groups))
        self.records.faults.append((t, fault.KIND, {"sizes": [len(g) for g in fault.groups]}))

    def _heal(self) -> None:
        assert self.layout is not None
        t = self.now()
        self.layout.heal()
        self.records.faults.append((t, HealAt.KIND, {}))

    async def _watch_overlay(self, publish_start: float) -> None:
        """Note when the overlay is first up (:meth:`_overlay_up`), from time 0 on."""
        while not self._overlay_up(publish_start):
            await asyncio.sleep(0.1)
        if self.overlay_up_at is None:  # the first publication may have seen it first
            self.overlay_up_at = self.now()

    async def _first_publication(self, t: float, watcher: asyncio.Future[None] | None) -> None:
        """At the first publication: with ``--wait-overlay S``, wait up to S seconds for the
        overlay and shift the rest of the schedule by the wait (explicit, recorded); without
        it, keep the clock and, if the overlay is not up, say so in one line and record a
        ``cluster.overlay_not_ready`` event for each node that is not ready."""
        wait = self.config.wait_overlay
        await self.sleep_until(t)
        if wait > 0 and watcher is not None and not watcher.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(watcher), wait)
            self.publish_shift = self.now() - t
            self.summary["overlay_timeout"] = not watcher.done()
            self.records.events.append(
                (t, CONTROLLER, "cluster.schedule_shifted", {"by": round(self.publish_shift, 6)})
            )
            if not watcher.done():
                self._say(
                    f"overlay not up after waiting {wait:g} s at the first publication "
                    f"(t = {t:g} s); publishing anyway, the schedule shifted by "
                    f"{self.publish_shift:.2f} s"
                )
            return
        if self.overlay_up_at is not None:
            return
        considered = self._considered(t)
        late = self._not_ready(considered)
        if not late:  # up at this very moment: the watcher has not looked yet
            self.overlay_up_at = self.now()
            return
        self.summary["overlay_not_ready"] = len(late)
        for index, topics in late:
            self.records.events.append(
                (t, index, "cluster.overlay_not_ready", {"topics": list(topics)})
            )
        self._say(
            f"overlay not ready at the first publication (t = {t:g} s): {len(late)} of "
            f"{len(considered)} started subscribers have no neighbour in a topic yet; publishing "
            f"on the workload's clock (--wait-overlay S waits and shifts the schedule)"
        )

    def _scrape_config(self, targets: dict[int, str]) -> None:
        """``--metrics``: the Prometheus configuration that scrapes every node, written to
        OUT/prometheus.yml and printed (pubmesh.net.metrics)."""
        text = scrape_config(targets)
        path = self.config.out / "prometheus.yml"
        write_text(path, text)
        self._say(
            f"metrics of {len(targets)} nodes; scrape them with: prometheus --config.file {path}"
        )
        if not self.config.quiet:
            print(text, end="", flush=True)

    def _say(self, line: str) -> None:
        print(f"pubmesh cluster: {line}", file=sys.stderr, flush=True)

    def _considered(self, publish_start: float) -> dict[int, list[str]]:
        """The subscribers the first publication is owed to: started by then, subscribed to
        these topics by then, and not killed, failed or stopped."""
        considered: dict[int, list[str]] = {}
        for index, topics in self.plan.topics.items():
            if self.plan.starts[index] > publish_start:
                continue
            if self._first_subscription(index) >= publish_start:
                continue
            child = self.children[index]
            if child.state in (ChildState.KILLED, ChildState.FAILED, ChildState.STOPPED):
                continue
            considered[index] = list(topics)
        return considered

    def _first_subscription(self, index: int) -> float:
        """When node ``index`` subscribes first: its subscribe time, or a late subscriber's
        planned time (infinity if the plan never subscribes it)."""
        if index in self.held:
            return self.late_at.get(index, float("inf"))
        return self.plan.subscribe_time(index)

    def _not_ready(self, considered: dict[int, list[str]]) -> list[tuple[int, list[str]]]:
        """The ``considered`` subscribers (:meth:`_considered`) that have not booted, or whose
        latest stats line (newer than their subscriptions) shows no neighbour in a topic that
        another considered subscriber shares (a subscriber alone in a topic needs none; the
        neighbours a stack reports for topic "" serve every topic)."""
        sharing: dict[str, int] = {}
        for topics in considered.values():
            for topic in topics:
                sharing[topic] = sharing.get(topic, 0) + 1
        late: list[tuple[int, list[str]]] = []
        for index, topics in considered.items():
            child = self.children[index]
            stats = child.stats
            if child.booted_at is None or stats is None or not stats.booted:
                late.append((index, topics))
                continue
            reported = self.run_time(stats.t)
            missing = []
            for topic in topics:
                if sharing[topic] < 2:
                    continue
                since = self.open_subscriptions.get((index, topic))
                # a stack with one overlay for all topics (chord's ring) reports it as ""
                near = stats.neighbors.get(topic) or stats.neighbors.get("")
                if since is None or reported <= since or not near:
                    missing.append(topic)
            if missing:
                late.append((index, missing))
        return late

    def _overlay_up(self, publish_start: float) -> bool:
        """Every subscriber the first publication is owed to has booted and reports, in a
        stats line newer than its subscriptions, a neighbour in each of its topics that another
        of them shares (:meth:`_not_ready`)."""
        return not self._not_ready(self._considered(publish_start))

    # ------------------------------------------------------------------ stopping
    async def _stop_all(self) -> None:
        for child in self.children:
            child.stop()
        await _wait_exit(self.children, GRACE_SECONDS * 3)

    # ------------------------------------------------------------------ the trace
    def _gather(self) -> dict[str, Any]:
        end = self.scenario.run.duration + self.publish_shift
        for (index, topic), t_start in sorted(self.open_subscriptions.items()):
            self.records.subscriptions.append((index, topic, t_start, None))
        self.open_subscriptions.clear()
        run = self.scenario.run
        run_id = self.config.out.name
        info = RunInfo(run_id, run.stack, run.nodes, run.seed, self.scenario.text, end)
        # every life's partial trace (a recovered node wrote one directory per life)
        names = [f"node-{c.index}" for c in self.children]
        for index, lives in sorted(self.lives.items()):
            names += [f"node-{index}.life-{life}" for life in range(2, lives + 1)]
        node_dirs = {i: self.partial / name for i, name in enumerate(names)}
        counts = gather(self.config.out, info, node_dirs, self.id_map, self.t0_wall, self.records)
        stats: dict[str, Any] = {
            "run_id": run_id,
            "stack": run.stack,
            "runtime": "net",
            "nodes": run.nodes,
            "seed": run.seed,
            "duration": end,
            "publications": len(self.records.publications),
            "publications_refused": self.publications_refused,
            "first_refusal": self.first_refusal,
            "deliveries": counts["deliveries"],
            "messages": counts["messages"],
            "killed": sorted(c.index for c in self.children if c.state is ChildState.KILLED),
            # each recovered node's lives (its processes, the first included)
            "recovered": {i: lives for i, lives in sorted(self.lives.items()) if lives > 1},
            "unexpected_exits": self.unexpected_exits,
            "overlay_up_at": self.overlay_up_at,
            "publish_shift": self.publish_shift,
            "node_addresses": {c.index: format_id(c.node_id) for c in self.children},
            # a node whose trace writes failed (a full disk): its rows are missing from then
            "trace_complete": not any(c.trace_error for c in self.processes),
            "trace_errors": {c.index: c.trace_error for c in self.processes if c.trace_error},
            **self.summary,
            **self._netns_summary(),
        }
        write_text(self.config.out / "run.json", json.dumps(stats, indent=2, sort_keys=True) + "\n")
        if not self.config.keep_partial:
            shutil.rmtree(self.partial, ignore_errors=True)
        return stats

    def _netns_summary(self) -> dict[str, Any]:
        if self.layout is None:
            return {}
        layout = self.layout
        return {
            "netns": {
                "namespaces": layout.count,
                "subnet": str(layout.subnet),
                "node_namespace": {c.index: layout.namespace_of(c.index) for c in self.children},
            }
        }


def scrape_config(targets: Mapping[Any, str], job: str = "pubmesh") -> str:
    """A Prometheus configuration that scrapes ``targets`` (label -> ``HOST:PORT``) every
    second, each target labelled with its node index: what ``pubmesh cluster --metrics``
    prints and writes."""
    lines = [
        "global:",
        "  scrape_interval: 1s",
        "  evaluation_interval: 1s",
        "scrape_configs:",
        f"  - job_name: {job}",
        "    static_configs:",
    ]
    for index, target in sorted(targets.items()):
        lines += [
            f"      - targets: ['{target}']",
            "        labels:",
            f"          index: '{index}'",
        ]
    return "\n".join(lines) + "\n"
