"""Run one scenario end to end: simulate, write the trace and ``run.json``, show progress."""

from __future__ import annotations

import gc
import json
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubmesh.private import private_dir, write_text
from pubmesh.scenario.model import Scenario
from pubmesh.sim.engine import Simulation


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: Path
    stats: dict[str, Any]


def peak_memory_bytes() -> int:
    """Peak resident set size of this process (Linux reports ru_maxrss in KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def leave_to_exit() -> None:
    """For a process that ends after its one run (``pubmesh sim``, a benchmark's child): hand
    the run's objects to the operating system instead of the collector. A finished
    :class:`Simulation` is a reference cycle, so only the collector frees it, and at exit it
    walks and frees its objects one by one: 13.5 of 66 CPU s after a 300,000-node warm gossip
    broadcast. Frozen, they are left for the process's end, which returns the memory at once
    (``atexit`` handlers and buffered output still run as usual). Not for a process that runs
    on (a sweep's worker): it would keep every run's memory."""
    gc.freeze()


#: the signals after which ``pubmesh sim`` keeps the trace so far: Ctrl-C, a polite kill, and
#: the soft CPU limit (RLIMIT_CPU, as the benchmarks set it), by their exit codes (128 + n)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGXCPU)


class SimulationStopped(Exception):
    """The run was stopped by ``signal`` before its end; its trace up to ``result.stats
    ["simulated_seconds"]`` is written and ``run.json`` says ``stopped``."""

    def __init__(self, signal_number: int, result: RunResult) -> None:
        name = signal.Signals(signal_number).name
        super().__init__(f"stopped by {name}")
        self.signal_number = signal_number
        self.result = result


@contextmanager
def _stopping_on_signals(sim: Simulation, enabled: bool) -> Iterator[list[int]]:
    """While the loop runs and the trace is closed, the :data:`STOP_SIGNALS` ask ``sim`` to
    stop (between two events) instead of ending the process; the list yields the first one
    received. Once the loop has ended they change nothing, so the trace is always closed
    whole (the kernel repeats SIGXCPU every CPU second past the soft limit, and its default
    action would end the process mid-close). Only in the main thread (where Python delivers
    signals), and only when ``enabled``.

    Once a SIGXCPU has come, SIGXCPU stays ignored after the block too: the kernel sends
    another one every CPU second past the soft limit, and the process still has to print its
    line and exit with 128 + the first signal (otherwise a close that takes a CPU second more
    is killed by the second SIGXCPU's default action, exit -24). The hard limit still ends it."""
    received: list[int] = []
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield received
        return
    over_cpu_limit: list[bool] = []

    def handler(number: int, _frame: object) -> None:
        if number == signal.SIGXCPU:
            over_cpu_limit.append(True)
        if not received:  # the first signal is the reason, in run.json and the exit status
            received.append(number)
            sim.request_stop(signal.Signals(number).name)

    previous = {number: signal.signal(number, handler) for number in STOP_SIGNALS}
    try:
        yield received
    finally:
        for number, old in previous.items():
            absorb = number == signal.SIGXCPU and over_cpu_limit
            signal.signal(number, signal.SIG_IGN if absorb else old)


def claim_run_dir(out: Path, force: bool, flag: str = "--out") -> None:
    """Make ``out`` ready for a new run, or refuse in one line: an existing run directory is
    left whole unless ``force``, which removes it (only a run directory: ``run.json`` or a
    trace table in it, or nothing at all; any other directory is never removed)."""
    import shutil

    from pubmesh.errors import UserError
    from pubmesh.trace.schema import TABLES

    try:
        if not out.exists():
            return
        if not out.is_dir():
            raise UserError(f"{flag} {out}: exists and is not a directory")
        held = sorted(p.name for p in out.iterdir())
    except OSError as error:  # e.g. a parent this user may not enter
        raise UserError(f"{flag} {out}: {error.strerror or error}") from None
    if not held:
        return
    if not any(name == "run.json" or name in TABLES for name in held):
        raise UserError(
            f"{flag} {out}: a directory that is not a run directory (no run.json or trace "
            f"tables in it) is never replaced, even with --force; choose another {flag}"
        )
    if not force:
        raise UserError(
            f"{flag} {out}: a run directory is already there; add --force to replace it, or "
            f"choose another {flag}"
        )
    try:
        shutil.rmtree(out)
    except OSError as error:
        raise UserError(f"{flag} {out}: cannot remove the old run: {error}") from None


def run_scenario(
    scenario: Scenario,
    run_dir: Path | str,
    *,
    progress: bool = False,
    keep_deliveries: bool = False,
    stop_on_signals: bool = False,
) -> RunResult:
    """Simulate ``scenario`` into ``run_dir`` (trace v1 tables plus ``run.json``).

    With ``stop_on_signals`` (``pubmesh sim`` sets it), a SIGINT, SIGTERM or SIGXCPU during
    the run stops it between two events: the trace up to that time is written, ``run.json``
    says ``stopped`` and how far it got, and :class:`SimulationStopped` is raised."""
    run_dir = Path(run_dir)
    private_dir(run_dir)
    started = time.perf_counter()
    duration = scenario.run.duration

    bar: AbstractContextManager[Any] = nullcontext()
    report: Callable[[Simulation], None] | None = None
    if progress:
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        progress_bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("t={task.completed:>8.1f}/{task.total:.0f}s"),
            TextColumn("{task.fields[events]:>12,} events"),
            TextColumn("{task.fields[rate]:>9,.0f} ev/s"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            transient=False,
        )
        task = progress_bar.add_task(scenario.name, total=duration, events=0, rate=0.0)

        def update_bar(sim: Simulation) -> None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            progress_bar.update(
                task,
                completed=min(sim.now, duration),
                events=sim.events_processed,
                rate=sim.events_processed / elapsed,
            )

        bar, report = progress_bar, update_bar
    with bar:
        sim = Simulation(scenario, run_dir, keep_deliveries=keep_deliveries, progress=report)
        with _stopping_on_signals(sim, stop_on_signals) as received:
            sim.run()
            if report is not None:
                report(sim)  # the bar's last state: where the run ended
            sim.close()

    wall = time.perf_counter() - started
    stats: dict[str, Any] = {
        "run_id": sim.run_id,
        "stack": scenario.run.stack,
        "runtime": "sim",
        "nodes": scenario.run.nodes,
        "seed": scenario.run.seed,
        "simulated_seconds": sim.now if sim.stopped else duration,
        "stopped": sim.stopped,
        "events_processed": sim.events_processed,
        "events_per_second": sim.events_processed / wall if wall > 0 else 0.0,
        "messages_sent": sim.messages_sent,
        "messages_lost": sim.messages_lost,
        # what "lost" counts (pubmesh sim's table says it): by cause
        "messages_lost_by": {
            "receiver_not_running": sim.lost_not_running,
            "partition": sim.lost_partition,
            "network_loss": sim.lost_network,
        },
        "deliveries": sim.delivery_count,
        "last_delivery_at": sim.last_delivery,
        "alive_at_end": len(sim.alive),
        "wall_seconds": round(wall, 3),
        "peak_memory_bytes": peak_memory_bytes(),
    }
    if any(f.durable for f in scenario.faults):
        # copies of publications a durably recovered node had delivered in its last life
        stats["duplicates_across_lives"] = sim.duplicates_across_lives
    write_text(run_dir / "run.json", json.dumps(stats, indent=2, sort_keys=True) + "\n")
    result = RunResult(sim.run_id, run_dir, stats)
    if received:
        raise SimulationStopped(received[0], result)
    return result
