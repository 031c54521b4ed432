"""The suite's CPU, in loop figures (the unit of its bar), at the end of every run.

Machines of the project's kind differ about 2x in speed, so a bar in wall minutes is no bar.
The suite's bar is its CPU divided by the *loop figure*: the CPU seconds a bare Python loop of
10**7 additions takes on the same machine (:func:`loop_figure`). The README states the budget;
this plugin says, after every run, what the run cost against it and which test files cost most,
so a file that grows past its share shows at once.

What is counted (:func:`tree_cpu`): the process's own user and system time, what it has
reaped of its children (``RUSAGE_CHILDREN``), and every descendant still alive (its own time
and what it has reaped, from ``/proc/PID/stat``), found through ``/proc/PID/task/TID/children``.
The JVMs an in-process Spark session starts, the node processes and ``pubmesh`` commands a test
runs, the warm Spark server the suite shares: all are the test's descendants while they run.
Each test is charged the growth of its worker's tree across its setup, call and teardown, so a
module- or session-scoped fixture is charged to the test that first needs it.

Under xdist, each worker reports its files and its whole tree's CPU to the controller, which
adds its own and prints the table; without xdist the one process does both. The figures also
go to ``build/test-cpu.json`` for scripts. Nothing here fails a run: speed is a benchmark.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: the suite's budget in loop figures (README, "The test suite's budget"); printed beside the
#: run's figure. Half of the suite's first measurement on the machine the bar was set on
#: (e7836eb: 1,820.7 CPU s of `/usr/bin/time -v make test` at a loop figure of 0.822 s, 2,215
#: loop figures; docs/benchmarks/make-test.md)
BUDGET = 1108
#: the test files listed at the end, dearest first
SHOWN = 10
_TICK = os.sysconf("SC_CLK_TCK")


def loop_figure(runs: int = 5) -> float:
    """CPU seconds of a bare loop of 10**7 additions in this interpreter, median of ``runs``:
    the unit the suite's CPU is stated in (its definition, to the letter)."""
    times = []
    for _ in range(runs):
        started = time.process_time()
        exec("s = 0\nfor i in range(10**7): s += i", {})
        times.append(time.process_time() - started)
    return statistics.median(times)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            found += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return found


def _stat_cpu(pid: int) -> float:
    """A live process's own CPU and its reaped children's (utime, stime, cutime, cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # after the name: state is field 3; utime..cstime are fields 14..17 (1-based)
    return sum(int(f) for f in fields[11:15]) / _TICK


def tree_cpu() -> float:
    """CPU seconds of this process, what it reaped, and every live descendant."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    pending = _children(os.getpid())
    seen: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _stat_cpu(pid)
        pending += _children(pid)
    return total


class CpuBudget:
    """Charges each test file the CPU its tests' trees grew by; reports at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.files: dict[str, float] = defaultdict(float)
        self.tests: dict[str, float] = {}
        self.workers: dict[str, float] = {}
        self.started = time.monotonic()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        before = tree_cpu()
        yield
        spent = tree_cpu() - before
        self.files[item.nodeid.split("::", 1)[0]] += spent
        self.tests[item.nodeid] = spent

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:  # an xdist worker: hand the figures to the controller
            output["cpubudget"] = json.dumps(
                {"files": self.files, "tests": self.tests, "total": tree_cpu()}
            )

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        report = getattr(node, "workeroutput", {}).get("cpubudget")
        if report is None:
            return
        data = json.loads(report)
        self.workers[node.gateway.id] = float(data["total"])
        for name, cpu in data["files"].items():
            self.files[name] += cpu
        self.tests.update(data["tests"])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if getattr(self.config, "workeroutput", None) is not None:
            return
        own = resource.getrusage(resource.RUSAGE_SELF)
        total = own.ru_utime + own.ru_stime + sum(self.workers.values())
        if not self.workers:  # no xdist: this process ran the tests, its tree is the suite's
            total = tree_cpu()
        loop = loop_figure()
        dearest = sorted(self.files.items(), key=lambda kv: -kv[1])[:SHOWN]
        write = terminalreporter.write_line
        terminalreporter.section("CPU in loop figures")
        write(
            f"loop figure {loop:.3f} s (10**7 additions, median of 5); the tests' CPU "
            f"{total:,.0f} s = {total / loop:,.0f} loop figures (budget {BUDGET}); "
            f"wall {time.monotonic() - self.started:,.0f} s"
        )
        width = max((len(name) for name, _ in dearest), default=10)
        write(f"{'test file':<{width}}  {'CPU s':>8}  {'loop fig.':>9}  {'share':>6}")
        for name, cpu in dearest:
            write(f"{name:<{width}}  {cpu:8.1f}  {cpu / loop:9.0f}  {cpu / total:6.1%}")
        tests = sorted(self.tests.items(), key=lambda kv: -kv[1])[:SHOWN]
        write("the dearest tests (with the fixtures they built first):")
        for name, cpu in tests:
            write(f"  {cpu:8.1f}  {name if len(name) <= 110 else name[:109] + '…'}")
        out = Path(str(self.config.rootpath)) / "build" / "test-cpu.json"
        out.parent.mkdir(exist_ok=True)
        figures = {
            "loop_figure": loop,
            "cpu_seconds": total,
            "loop_figures": total / loop,
            "budget": BUDGET,
            "files": dict(sorted(self.files.items(), key=lambda kv: -kv[1])),
            # every test, dearest first: what a test costs is found here, not by a rerun
            "tests": dict(sorted(self.tests.items(), key=lambda kv: -kv[1])),
        }
        out.write_text(json.dumps(figures, indent=1) + "\n")
