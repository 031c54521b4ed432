"""Faults that mean something.

The README's cluster examples killed nodes at 10 s and 15 s while the default workload
published from 2 s to about 7 s: the runs reported reliability 1.0 and tested nothing, and a
``publish_start`` past the run's end made 0 deliveries with exit 0. Now the cluster's default
workload publishes for as long as the run lasts, and ``pubmesh sim``, ``cluster`` and
``sweep`` say in one line when a fault comes after the last publication or publishing starts
after the end. The README's own cluster commands are read here and must make faults that
happen while publications are still going out.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pubmesh.net.cluster.options import DRAIN_SECONDS, build_scenario, parse_kill
from pubmesh.scenario.model import parse_scenario, timing_warnings

ROOT = Path(__file__).resolve().parents[2]


def readme_cluster_commands() -> list[list[str]]:
    """The ``pubmesh cluster`` command lines of the README's code blocks, as argv."""
    commands = []
    for line in (ROOT / "README.md").read_text().splitlines():
        match = re.match(r"^(?:sudo )?pubmesh cluster (.*?)(?:\s+#.*)?$", line.strip())
        if match:
            commands.append(shlex.split(match.group(1)))
    return commands


def _option(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == name]


def test_every_readme_cluster_kill_happens_while_publications_still_go_out() -> None:
    commands = [argv for argv in readme_cluster_commands() if "--kill" in argv]
    assert len(commands) >= 2, readme_cluster_commands()  # the README's fault examples
    for argv in commands:
        (stack,) = _option(argv, "--stack")
        (nodes,) = _option(argv, "--nodes")
        durations = _option(argv, "--duration")
        kills = [parse_kill(text) for text in _option(argv, "--kill")]
        scenario = build_scenario(
            stack,
            int(nodes),
            kills=kills,
            duration=float(durations[0]) if durations else None,
        )
        w = scenario.workload
        last = w.publish_start + (w.publications - 1) / w.publish_rate
        assert timing_warnings(scenario) == [], argv
        for kill in kills:
            # publications keep going out for a while after the kill: the fault is measured
            assert last >= kill.at + DRAIN_SECONDS - 1 / w.publish_rate, (argv, last, kill.at)
        assert scenario.run.duration >= last, argv


def test_the_default_workload_spans_the_duration_or_the_kills() -> None:
    spanned = build_scenario("gossip", 12, duration=30.0)
    assert spanned.workload.publications == (30 - DRAIN_SECONDS - 2) * 20 + 1
    killed = build_scenario("gossip", 12, kills=[parse_kill("0.25@15")])
    w = killed.workload
    assert w.publish_start + (w.publications - 1) / w.publish_rate >= 15 + DRAIN_SECONDS - 0.05
    plain = build_scenario("gossip", 12)
    assert plain.workload.publications == 100  # as before, without a duration or a kill
    # a workload the user gave is theirs: not stretched, and warned about instead
    fixed = build_scenario(
        "gossip", 12, kills=[parse_kill("0.25@15")], settings=["workload.publications=10"]
    )
    assert fixed.workload.publications == 10
    [line] = timing_warnings(fixed)
    assert "crash at 15 s) comes after the last publication (2.45 s)" in line, line


SCENARIO = """
[run]
stack = "gossip"
nodes = 20
duration = 10.0
[workload]
publications = 20
publish_start = 2.0
publish_rate = 10.0
"""


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            '[[faults]]\nat = 8.0\nkind = "crash"\nfraction = 0.2\n',
            "[[faults]] #1 (crash at 8 s) comes after the last publication (3.90 s): it "
            "changes no delivery",
        ),
        (
            "",
            None,
        ),
    ],
)
def test_sim_warns_in_one_line_and_still_runs(
    extra: str, words: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "late.toml"
    path.write_text(SCENARIO + extra)
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "sim", str(path), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    if words is None:
        assert warnings == [], done.stderr
    else:
        assert len(warnings) == 1 and words in warnings[0], done.stderr


def test_publishing_after_the_end_is_warned_about() -> None:
    late = parse_scenario(SCENARIO.replace("publish_start = 2.0", "publish_start = 12.0"))
    [line] = timing_warnings(late)
    assert "publish_start = 12 s is at or past the run's end" in line, line
    assert "no publication is made" in line
    # a stack whose faults are measured by convergence is not warned about late faults
    corrupt = parse_scenario(
        SCENARIO.replace('stack = "gossip"', 'stack = "skipring"')
        + '[[faults]]\nat = 8.0\nkind = "crash"\nfraction = 0.2\n'
    )
    assert timing_warnings(corrupt) == []
