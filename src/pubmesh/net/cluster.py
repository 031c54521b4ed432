"""``pubmesh cluster``: a local cluster of node processes, a workload, faults, one trace.

How it works
============
The controller starts N ``pubmesh node --control`` processes on 127.0.0.1 (any free ports;
each reports its address, which is its id), all with the same cluster key (``--key``,
``$PUBMESH_KEY`` or a fresh random one handed down through the environment). It drives them
through their stdin with JSON commands and follows their stdout (answers, stats lines every
half second), then:

1. boots the nodes at the start times of the workload plan (:mod:`pubmesh.net.workload`: the
   same draws as the simulator, so one scenario means one workload in both runtimes),
   infrastructure and contact nodes first, and subscribes them;
2. waits until the overlay is up (every booted subscriber reports a neighbour in each of its
   topics) before the first publication — if that takes longer than ``publish_start``, the
   publications are shifted later by the wait, and ``run.json`` says by how much;
3. issues the publications at their planned times from their planned publishers, SIGKILLs the
   planned victims at ``--kill FRACTION@SECONDS`` (and runs any ``[[faults]]`` of kind crash
   or leave), all while a live table shows every node's neighbours and deliveries;
4. at ``--duration`` tells every live node to stop (without leaving, as a simulation just
   ends), waits for them to write their partial traces, and gathers one run directory
   (:mod:`pubmesh.net.gather`): trace v1, ``runtime = "net"``, times from the run's start,
   node ids 0..N-1 in launch order — what ``pubmesh analyze`` reads.

No orphans, ever: every child runs in its own process group; Ctrl-C, SIGTERM, an error or a
normal exit of the controller ends them (SIGTERM, then SIGKILL after a grace period; an
``atexit`` hook kills any survivor), and a child whose controller is killed outright hears of
it twice — its stdin closes, and Linux sends it SIGTERM (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubmesh.errors import ScenarioError, UserError
from pubmesh.net.address import format_id
from pubmesh.net.security import KEY_ENV, ClusterKey, load_key
from pubmesh.net.workload import WorkloadPlan, plan
from pubmesh.sim.scenario import Scenario, parse_scenario
from pubmesh.stacks.base import get_stack

DESCRIPTION = """\
Start N node processes on 127.0.0.1, wait until their overlay is up, run a workload,
kill a fraction of the nodes if asked, stop everything and gather one run directory
(trace v1, runtime "net") that `pubmesh analyze` reads like a simulated run.

The workload file takes the keys of scenario files (`pubmesh sim --help`): [workload]
topics, subscriptions_per_node, subscribe_at, publications, publish_start, publish_rate,
publisher, payload_size, ...; [run] seed, duration, start_spread; [[faults]] of kind
crash or leave; [stack.<name>] parameters. The same file and seed make the same
subscriptions, publishers and victims as in the simulator.
Without a workload file: one topic, every node subscribed, 100 publications of 100 bytes
at 20 per second from t = 2 s.

A live table shows each node's neighbours and deliveries. Ctrl-C stops every node."""

EPILOG = """\
examples:
  pubmesh cluster --stack gossip --nodes 12
  pubmesh cluster --stack gossip --nodes 32 --kill 0.25@6 --duration 15 --out runs/net32
  pubmesh cluster --stack skipring --nodes 12 --workload scenarios/net_small.toml
  pubmesh analyze runs/net32
"""

DEFAULT_WORKLOAD = """\
[run]
start_spread = 0.0
[workload]
topics = 1
subscriptions_per_node = 1
publications = 100
publish_start = 2.0
publish_rate = 20.0
payload_size = 100
"""

DRAIN_SECONDS = 3.0
GRACE_SECONDS = 5.0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a local cluster of node processes with a workload and gather its trace",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="stack to run (see `pubmesh stacks`)")
    parser.add_argument(
        "--nodes", type=int, default=12, help="processes, infrastructure included (default 12)"
    )
    parser.add_argument("--workload", metavar="FILE", help="TOML with scenario keys (see above)")
    parser.add_argument(
        "--kill",
        action="append",
        default=[],
        metavar="FRACTION@SECONDS",
        help="SIGKILL that fraction of the live workload nodes at that time, e.g. 0.25@6 "
        "(repeatable)",
    )
    parser.add_argument("--duration", type=float, metavar="S", help="seconds the run lasts")
    parser.add_argument("--seed", type=int, help="seed of the workload and the nodes")
    parser.add_argument("--out", metavar="DIR", help="run directory (default runs/net-...)")
    parser.add_argument(
        "--key",
        metavar="FILE",
        help="cluster key (default: $PUBMESH_KEY, else a fresh random key for this run)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a scenario key, e.g. --set workload.publications=500 or "
        "--set stack.gossip.fanout=3 (repeatable)",
    )
    parser.add_argument(
        "--snapshot-interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds between overlay snapshots in the trace (default: [trace] of the file)",
    )
    parser.add_argument(
        "--overlay-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="longest wait for the overlay before publishing anyway (default 30)",
    )
    parser.add_argument(
        "--keep-partial",
        action="store_true",
        help="keep the nodes' partial traces (OUT/.partial) after gathering",
    )
    parser.add_argument(
        "--no-message-trace",
        action="store_true",
        help="leave frames out of the trace (for benchmarks; RMR and load need them)",
    )
    parser.add_argument("--quiet", action="store_true", help="no live table, no summary")
    parser.set_defaults(func=run)
    return parser


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------
@dataclass
class ClusterConfig:
    scenario: Scenario
    plan: WorkloadPlan
    out: Path
    key_file: Path | None
    key_text: str | None
    overlay_timeout: float = 30.0
    keep_partial: bool = False
    quiet: bool = False
    snapshot_interval: float = 0.0
    trace_messages: bool = True
    #: stack parameters as --set arguments for the node processes
    param_args: list[str] = field(default_factory=list)


def parse_kill(text: str) -> tuple[float, float]:
    fraction_text, sep, at_text = text.partition("@")
    try:
        if not sep:
            raise ValueError
        fraction, at = float(fraction_text), float(at_text)
    except ValueError:
        raise UserError(f"--kill {text!r}: write FRACTION@SECONDS, e.g. 0.25@6") from None
    if not 0 <= fraction <= 1:
        raise UserError(f"--kill {text!r}: the fraction must be in [0, 1]")
    if at < 0:
        raise UserError(f"--kill {text!r}: the time must be ≥ 0 seconds")
    return fraction, at


def build_scenario(
    stack: str,
    nodes: int,
    *,
    workload_file: str | None = None,
    kills: list[tuple[float, float]] | None = None,
    duration: float | None = None,
    seed: int | None = None,
    settings: list[str] | None = None,
) -> Scenario:
    """The scenario a cluster runs: the workload file (or the default workload) with the
    command line's stack, nodes, kills, duration and seed."""
    if workload_file is not None:
        path = Path(workload_file)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ScenarioError(f"--workload {path}: no such file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ScenarioError(f"--workload {path}: cannot read it ({error})") from None
        source = str(path)
        name = path.stem
    else:
        text, source, name = DEFAULT_WORKLOAD, "<default workload>", "cluster"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ScenarioError(f"{source}: not valid TOML: {error}") from None
    for fraction, at in kills or []:
        text += f'\n[[faults]]\nat = {at!r}\nkind = "crash"\nfraction = {fraction!r}\n'
    overrides = [f'run.stack="{stack}"', f"run.nodes={nodes}", *(settings or [])]
    if seed is not None:
        overrides.append(f"run.seed={seed}")
    if not any(o.startswith("run.name=") for o in overrides) and "name" not in data.get("run", {}):
        overrides.append(f'run.name="{name}"')
    scenario = parse_scenario(text, source=source, overrides=overrides)
    if (
        duration is None
        and "duration" not in data.get("run", {})
        and not any(o.startswith("run.duration=") for o in settings or [])
    ):
        w = scenario.workload
        end = w.publish_start + max(0, w.publications - 1) / w.publish_rate
        last_fault = max((f.at for f in scenario.faults), default=0.0)
        duration = round(max(end, last_fault) + DRAIN_SECONDS, 3)
    if duration is not None:
        if duration <= 0:
            raise UserError(f"--duration {duration}: must be > 0 seconds")
        scenario = scenario.with_overrides([*overrides, f"run.duration={duration!r}"])
    return scenario


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    try:
        spec = get_stack(args.stack)
    except KeyError as error:
        raise UserError(f"--stack: {error.args[0]}") from None
    infrastructure = len(spec.infrastructure(args.nodes, spec.params_type()))
    if args.nodes < infrastructure + 2:
        raise UserError(
            f"--nodes {args.nodes}: a {spec.name} cluster needs at least {infrastructure + 2}"
        )
    if args.nodes > 512:
        raise UserError(f"--nodes {args.nodes}: at most 512 processes on one machine")
    kills = [parse_kill(k) for k in args.kill]
    scenario = build_scenario(
        spec.name,
        args.nodes,
        workload_file=args.workload,
        kills=kills,
        duration=args.duration,
        seed=args.seed,
        settings=args.set,
    )
    workload_plan = plan(scenario)
    key_file = Path(args.key) if args.key else None
    key_text: str | None = None
    if key_file is not None:
        load_key(key_file)  # validate now: one line and exit 2 if it is missing or short
    elif os.environ.get(KEY_ENV):
        load_key(None)
    else:
        _key, key_text = ClusterKey.generate()
    out = (
        Path(args.out)
        if args.out
        else Path("runs")
        / (f"net-{spec.name}-n{args.nodes}-s{scenario.run.seed}-{time.strftime('%Y%m%dT%H%M%S')}")
    )
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a directory")
    snapshot = (
        args.snapshot_interval
        if args.snapshot_interval is not None
        else scenario.trace.snapshot_interval
    )
    if snapshot < 0 or args.overlay_timeout < 0:
        raise UserError("--snapshot-interval and --overlay-timeout must be ≥ 0")
    defaults = spec.params_type()
    param_args = [
        f"{f.name}={_toml(getattr(scenario.stack_params, f.name))}"
        for f in dataclasses.fields(scenario.stack_params)
        if getattr(scenario.stack_params, f.name) != getattr(defaults, f.name)
    ]
    return ClusterConfig(
        scenario=scenario,
        plan=workload_plan,
        out=out,
        key_file=key_file,
        key_text=key_text,
        overlay_timeout=args.overlay_timeout,
        keep_partial=args.keep_partial,
        quiet=args.quiet,
        snapshot_interval=snapshot,
        trace_messages=not args.no_message_trace,
        param_args=param_args,
    )


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise UserError(f"cannot pass stack parameter value {value!r} to a node")


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    cluster = Cluster(config)
    return asyncio.run(cluster.main())


# --------------------------------------------------------------------------------------------
# Children
# --------------------------------------------------------------------------------------------
_LIVE_CHILDREN: dict[int, subprocess.Popen[bytes] | asyncio.subprocess.Process] = {}


def _kill_survivors() -> None:
    """atexit: no child outlives its controller."""
    for pid in list(_LIVE_CHILDREN):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _LIVE_CHILDREN.pop(pid, None)


atexit.register(_kill_survivors)


@dataclass
class Child:
    index: int
    role: str
    process: asyncio.subprocess.Process
    log_path: Path
    node_id: int = 0
    state: str = "launching"
    ready: asyncio.Future[dict[str, Any]] | None = None
    waiting: deque[asyncio.Future[dict[str, Any]]] = field(default_factory=deque)
    stats: dict[str, Any] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None
    booted_at: float | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.state in ("ready", "up", "left")

    async def request(self, op: dict[str, Any]) -> dict[str, Any]:
        """Send a command; the answer is the next result line (a node answers in order)."""
        stdin = self.process.stdin
        if stdin is None or not self.alive():
            raise ConnectionError(f"node {self.index} is not running")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        stdin.write((json.dumps(op) + "\n").encode())
        with contextlib.suppress(ConnectionError):
            await stdin.drain()
        return await future

    def send_nowait(self, op: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        stdin = self.process.stdin
        if stdin is None or not self.alive() or stdin.is_closing():
            future.set_exception(ConnectionError(f"node {self.index} is not running"))
            future.exception()
            return future
        self.waiting.append(future)
        stdin.write((json.dumps(op) + "\n").encode())
        return future


# --------------------------------------------------------------------------------------------
# The controller
# --------------------------------------------------------------------------------------------
class Cluster:
    """One cluster run; see the module docstring."""

    def __init__(self, config: ClusterConfig) -> None:
        from pubmesh.net.gather import ControllerRecords

        self.config = config
        self.scenario = config.scenario
        self.plan = config.plan
        self.children: list[Child] = []
        self.records = ControllerRecords()
        self.partial = config.out / ".partial"
        self.t0_wall = 0.0
        self.t0_mono = 0.0
        self.publish_shift = 0.0
        self.overlay_up_at: float | None = None
        self.open_subscriptions: dict[tuple[int, str], float] = {}
        self.publications_done = 0
        self.unexpected_exits: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.summary: dict[str, Any] = {}

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

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            task.cancel()

        self.loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        self._prepare_out()
        live = None
        interrupted = False
        try:
            await self._launch()
            live = self._start_live_table()
            await self._run_timeline()
            await self._stop_all()
        except asyncio.CancelledError:
            interrupted = True
        finally:
            if live is not None:
                live.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await live
            await self._terminate_all()
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
            self._print_summary(stats)
        return 0

    def _prepare_out(self) -> None:
        from pubmesh.trace.schema import TABLES

        out = self.config.out
        out.mkdir(parents=True, exist_ok=True)
        for table in TABLES:  # a previous run's tables in the same directory
            if (out / table).is_dir():
                shutil.rmtree(out / table)
        if self.partial.exists():
            shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True)

    # ------------------------------------------------------------------ launching
    def _command(self, index: int) -> list[str]:
        role = self.plan.roles.get(index, "peer")
        command = [
            sys.executable,
            "-m",
            "pubmesh.net.node_cli",
            "--stack",
            self.scenario.run.stack,
            "--listen",
            "127.0.0.1:0",
            "--control",
            "--stats-interval",
            "0.5",
            "--no-delivery-lines",
            "--trace-dir",
            str(self.partial / f"node-{index}"),
            "--seed",
            str(self.scenario.run.seed),
            "--role",
            role,
            "--leave-linger",
            "1.0",
        ]
        if self.config.snapshot_interval > 0:
            command += ["--snapshot-interval", str(self.config.snapshot_interval)]
        if self.config.key_file is not None:
            command += ["--key", str(self.config.key_file)]
        if not self.config.trace_messages:
            command.append("--no-message-trace")
        for setting in self.config.param_args:
            command += ["--set", setting]
        return command

    async def _launch(self) -> None:
        env = dict(os.environ)
        env["PUBMESH_PARENT_PID"] = str(os.getpid())
        if self.config.key_text is not None:
            env[KEY_ENV] = self.config.key_text
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        loop = asyncio.get_running_loop()
        for index in range(self.scenario.run.nodes):
            log_path = self.partial / f"node-{index}.log"
            with open(log_path, "wb") as log_file:
                process = await asyncio.create_subprocess_exec(
                    *self._command(index),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log_file,
                    env=env,
                    start_new_session=True,
                    limit=1 << 22,
                )
            _LIVE_CHILDREN[process.pid] = process
            child = Child(index, self.plan.roles.get(index, "peer"), process, log_path)
            child.ready = loop.create_future()
            child.reader = loop.create_task(self._read(child))
            self.children.append(child)
        deadline = 60.0 + 0.5 * len(self.children)
        try:
            async with asyncio.timeout(deadline):
                for child in self.children:
                    assert child.ready is not None
                    info = await child.ready
                    child.node_id = int(info["node"])
                    child.state = "ready"
        except TimeoutError:
            raise UserError(
                f"the node processes did not all start within {deadline:.0f} s "
                f"(logs in {self.partial})"
            ) from None
        except ConnectionError as error:
            raise UserError(str(error)) from None
        self.id_map = {child.node_id: child.index for child in self.children}
        self.t0_wall = time.time()
        self.t0_mono = loop.time()
        # for tools and tests that watch a running cluster: every node is up, the run began
        (self.partial / "started.json").write_text(
            json.dumps(
                {
                    "t0": self.t0_wall,
                    "nodes": {
                        c.index: {"pid": c.pid, "address": format_id(c.node_id)}
                        for c in self.children
                    },
                }
            )
        )

    async def _read(self, child: Child) -> None:
        stdout = child.process.stdout
        assert stdout is not None
        async for raw in stdout:
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict):
                continue
            event = record.get("event")
            if event == "ready" and child.ready is not None and not child.ready.done():
                child.ready.set_result(record)
            elif event == "result":
                if child.waiting:
                    future = child.waiting.popleft()
                    if not future.done():
                        future.set_result(record)
            elif event == "stats":
                child.stats = record
            elif event == "bye":
                child.stats = {**child.stats, "bye": record}
        # stdout closed: the process is gone (or going)
        await child.process.wait()
        if child.state not in ("killed", "stopping", "exited"):
            if child.state != "launching":
                self.unexpected_exits.append(child.index)
            child.state = "failed"
        elif child.state == "stopping":
            child.state = "exited"
        _LIVE_CHILDREN.pop(child.pid, None)
        if child.ready is not None and not child.ready.done():
            tail = _tail(child.log_path)
            child.ready.set_exception(
                ConnectionError(f"node {child.index} exited before it was ready: {tail}")
            )
        while child.waiting:
            future = child.waiting.popleft()
            if not future.done():
                future.set_exception(ConnectionError(f"node {child.index} exited"))
                future.exception()

    # ------------------------------------------------------------------ the timeline
    async def _run_timeline(self) -> None:
        plan = self.plan
        actions: list[tuple[float, int, int, Any]] = []
        first_booted = [i for i in sorted(plan.roles)] + [
            c for c in plan.contacts if c not in plan.roles
        ]
        for node in range(plan.nodes):
            actions.append((plan.starts[node], 0, node, ("start", node)))
            if plan.subscribe_at > 0 and node in plan.topics:
                actions.append((plan.subscribe_time(node), 4, node, ("subscribe", node)))
        for publication in plan.publications:
            actions.append((publication.t, 1, publication.pub_id, ("publish", publication)))
        for i, unsubscription in enumerate(plan.unsubscriptions):
            actions.append((unsubscription.t, 2, i, ("unsubscribe", unsubscription)))
        for i, fault in enumerate(plan.faults):
            actions.append((fault.t, 3, i, ("fault", fault)))
        actions.sort(key=lambda a: (a[0], a[1], a[2]))

        # boot infrastructure and contacts before anyone who joins through them
        pending: list[asyncio.Future[Any]] = []
        for node in first_booted:
            if plan.starts[node] == 0.0:
                await self._boot(node)
        for t, _order, _seq, (kind, what) in actions:
            if kind == "publish" and self.overlay_up_at is None:
                await self._wait_overlay(t)
            await self.sleep_until(t + (self.publish_shift if kind != "start" else 0.0))
            if kind == "start":
                if self.children[what].booted_at is None:
                    pending.append(asyncio.ensure_future(self._boot(what)))
            elif kind == "subscribe":
                pending.append(asyncio.ensure_future(self._subscribe(what)))
            elif kind == "publish":
                pending.append(asyncio.ensure_future(self._publish(what)))
            elif kind == "unsubscribe":
                pending.append(asyncio.ensure_future(self._unsubscribe(what)))
            elif kind == "fault":
                await self._fault(what)
        await self.sleep_until(self.scenario.run.duration + self.publish_shift)
        if pending:
            await asyncio.wait(pending, timeout=GRACE_SECONDS)

    async def _boot(self, index: int) -> None:
        child = self.children[index]
        contacts = [self.children[c].node_id for c in self.plan.contacts]
        try:
            result = await child.request({"op": "start", "contacts": contacts})
        except ConnectionError:
            return
        t = self.run_time(float(result["t"]))
        child.booted_at = t
        child.state = "up"
        self.records.nodes.append((index, t, "up", child.role))
        if self.plan.subscribe_at <= 0 and index in self.plan.topics:
            await self._subscribe(index)

    async def _subscribe(self, index: int) -> None:
        child = self.children[index]
        futures = [
            child.send_nowait({"op": "subscribe", "topic": topic})
            for topic in self.plan.topics[index]
        ]
        for topic, future in zip(self.plan.topics[index], futures, strict=True):
            try:
                result = await future
            except ConnectionError:
                return
            self.open_subscriptions[(index, topic)] = self.run_time(float(result["t"]))

    async def _unsubscribe(self, what: Any) -> None:
        child = self.children[what.node]
        try:
            result = await child.request({"op": "unsubscribe", "topic": what.topic})
        except ConnectionError:
            return
        self._end_subscription(what.node, what.topic, self.run_time(float(result["t"])))

    def _end_subscription(self, index: int, topic: str, t: float) -> None:
        t_start = self.open_subscriptions.pop((index, topic), None)
        if t_start is not None:
            self.records.subscriptions.append((index, topic, t_start, t))

    async def _publish(self, publication: Any) -> None:
        child = self.children[publication.publisher]
        size = self.scenario.workload.payload_size
        try:
            result = await child.request(
                {
                    "op": "publish",
                    "topic": publication.topic,
                    "pub_id": publication.pub_id,
                    "payload_size": size,
                }
            )
        except ConnectionError:
            return
        self.publications_done += 1
        self.records.publications.append(
            (
                publication.pub_id,
                publication.publisher,
                publication.topic,
                self.run_time(float(result["t"])),
                int(result["size"]),
            )
        )

    async def _fault(self, fault: Any) -> None:
        t = self.now()  # run time as it happened (shifted with the publications, if they were)
        if fault.kind == "crash":
            for index in fault.nodes:
                child = self.children[index]
                if not child.alive():
                    continue
                # let answers to commands already sent come back first (a publication the
                # node made must be known), but not for long
                if child.waiting:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await asyncio.gather(*child.waiting, return_exceptions=True)
                child.state = "killed"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                t_kill = self.now()
                self.records.nodes.append((index, t_kill, "crash", child.role))
                for topic in self.plan.topics.get(index, []):
                    self._end_subscription(index, topic, t_kill)
        else:
            for index in fault.nodes:
                child = self.children[index]
                if not child.alive():
                    continue
                try:
                    result = await child.request({"op": "leave"})
                except ConnectionError:
                    continue
                t_leave = self.run_time(float(result["t"]))
                child.state = "left"
                self.records.nodes.append((index, t_leave, "leave", child.role))
                for topic in self.plan.topics.get(index, []):
                    self._end_subscription(index, topic, t_leave)
        self.records.faults.append((t, fault.kind, {"nodes": list(fault.nodes)}))

    async def _wait_overlay(self, publish_start: float) -> None:
        """Wait until every booted subscriber has a neighbour in each of its topics."""
        limit = self.now() + self.config.overlay_timeout
        while self.now() < limit:
            if self._overlay_up(publish_start):
                self.overlay_up_at = self.now()
                break
            await asyncio.sleep(0.1)
        else:
            self.overlay_up_at = self.now()
            self.summary["overlay_timeout"] = True
        self.publish_shift = max(0.0, self.overlay_up_at - publish_start)

    def _overlay_up(self, publish_start: float) -> bool:
        """Every node planned to have started and subscribed before the first publication has
        done so and reports (in a stats line newer than its subscriptions) a neighbour in each
        of its topics."""
        for index, topics in self.plan.topics.items():
            if self.plan.starts[index] > publish_start:
                continue
            child = self.children[index]
            if child.state in ("killed", "failed", "exited"):
                continue
            if child.booted_at is None:
                return False
            stats = child.stats
            if not stats.get("booted") or "t" not in stats:
                return False
            reported = self.run_time(float(stats["t"]))
            neighbors = stats.get("neighbors", {})
            for topic in topics:
                if self.plan.subscribe_time(index) >= publish_start:
                    continue
                since = self.open_subscriptions.get((index, topic))
                if since is None or reported <= since or not neighbors.get(topic):
                    return False
        return True

    # ------------------------------------------------------------------ stopping
    async def _stop_all(self) -> None:
        for child in self.children:
            if child.alive():
                child.send_nowait({"op": "exit"})
                child.state = "stopping"
        waits = [c.process.wait() for c in self.children if c.process.returncode is None]
        if waits:
            await asyncio.wait([asyncio.ensure_future(w) for w in waits], timeout=GRACE_SECONDS * 3)

    async def _terminate_all(self) -> None:
        """SIGTERM every child still running, then SIGKILL after the grace period."""
        running = [c for c in self.children if c.process.returncode is None]
        for child in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
        if running:
            await asyncio.wait(
                [asyncio.ensure_future(c.process.wait()) for c in running],
                timeout=GRACE_SECONDS,
            )
        for child in running:
            if child.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(child.process.wait(), 2.0)
        for child in self.children:
            if child.reader is not None and not child.reader.done():
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(child.reader, 2.0)
            _LIVE_CHILDREN.pop(child.pid, None)

    # ------------------------------------------------------------------ the trace
    def _gather(self) -> dict[str, Any]:
        from pubmesh.net.gather import RunInfo, gather

        end = self.scenario.run.duration + self.publish_shift
        for (index, topic), t_start in sorted(self.open_subscriptions.items()):
            self.records.subscriptions.append((index, topic, t_start, None))
        self.open_subscriptions.clear()
        run = self.scenario.run
        run_id = self.config.out.name
        info = RunInfo(run_id, run.stack, run.nodes, run.seed, self.scenario.text, end)
        node_dirs = {c.index: self.partial / f"node-{c.index}" for c in self.children}
        counts = gather(self.config.out, info, node_dirs, self.id_map, self.t0_wall, self.records)
        stats: dict[str, Any] = {
            "run_id": run_id,
            "stack": run.stack,
            "runtime": "net",
            "nodes": run.nodes,
            "seed": run.seed,
            "duration": end,
            "publications": len(self.records.publications),
            "deliveries": counts["deliveries"],
            "messages": counts["messages"],
            "killed": sorted(c.index for c in self.children if c.state == "killed"),
            "unexpected_exits": sorted(self.unexpected_exits),
            "overlay_up_at": self.overlay_up_at,
            "publish_shift": self.publish_shift,
            "node_addresses": {c.index: format_id(c.node_id) for c in self.children},
            **self.summary,
        }
        (self.config.out / "run.json").write_text(
            json.dumps(stats, indent=2, sort_keys=True) + "\n"
        )
        if not self.config.keep_partial:
            shutil.rmtree(self.partial, ignore_errors=True)
        return stats

    # ------------------------------------------------------------------ the live table
    def _start_live_table(self) -> asyncio.Task[None] | None:
        if self.config.quiet or not sys.stdout.isatty():
            return None
        return asyncio.ensure_future(self._live_table())

    async def _live_table(self) -> None:
        from rich.live import Live

        with Live(self._table(), refresh_per_second=4, transient=False) as live:
            while True:
                await asyncio.sleep(0.25)
                live.update(self._table())

    def _table(self) -> Any:
        from rich.table import Table

        run = self.scenario.run
        shown = min(self.now(), run.duration + self.publish_shift) if self.loop else 0.0
        title = (
            f"pubmesh cluster: {run.stack}, {run.nodes} nodes, t = {shown:5.1f} / "
            f"{run.duration:.0f} s, {self.publications_done} publications"
        )
        table = Table(title=title)
        for column in (
            "node",
            "address",
            "role",
            "state",
            "topics",
            "neighbours",
            "deliveries",
            "frames out",
            "frames in",
            "dropped",
            "refused",
        ):
            table.add_column(
                column, justify="right" if column not in ("address", "role", "state") else "left"
            )
        for child in self.children:
            stats = child.stats
            neighbours = {n for ids in stats.get("neighbors", {}).values() for n in ids}
            table.add_row(
                str(child.index),
                format_id(child.node_id) if child.node_id else "-",
                child.role,
                child.state,
                str(len(stats.get("subscriptions", []))),
                " ".join(
                    str(self.id_map.get(n, "?"))
                    for n in sorted(neighbours, key=lambda n: self.id_map.get(n, 1 << 60))[:8]
                )
                + (" ..." if len(neighbours) > 8 else ""),
                str(stats.get("deliveries", 0)),
                str(stats.get("frames_sent", 0)),
                str(stats.get("frames_received", 0)),
                str(stats.get("dropped", 0)),
                str(stats.get("rejected", 0)),
            )
        return table

    def _print_summary(self, stats: dict[str, Any]) -> None:
        from rich.console import Console
        from rich.table import Table

        from pubmesh.net.gather import summarize

        figures = summarize(self.config.out)
        table = Table(title=f"pubmesh cluster: {stats['stack']}, {stats['nodes']} nodes")
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_row("publications", f"{stats['publications']:,}")
        table.add_row("deliveries", f"{stats['deliveries']:,}")
        table.add_row("reliability (expected pairs delivered)", f"{figures['reliability']:.4f}")
        table.add_row(
            "latency p50 / p99 (ms)",
            f"{figures['latency_p50'] * 1000:.1f} / {figures['latency_p99'] * 1000:.1f}",
        )
        table.add_row("messages", f"{stats['messages']:,}")
        table.add_row("nodes killed", str(len(stats["killed"])))
        table.add_row("overlay up after (s)", f"{stats['overlay_up_at'] or 0:.2f}")
        if stats["publish_shift"]:
            table.add_row("publications shifted by (s)", f"{stats['publish_shift']:.2f}")
        console = Console()
        console.print(table)
        if stats["unexpected_exits"]:
            console.print(f"[red]nodes that exited on their own: {stats['unexpected_exits']}[/]")
        console.print(f"trace: [bold]{self.config.out}[/]; next: pubmesh analyze {self.config.out}")


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
