"""Scenario files: every mistake is one line naming the file and the key, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import support.probestacks  # noqa: F401
from pubmesh.errors import ScenarioError
from pubmesh.scenario.model import load_scenario, parse_scenario

GOOD = """
[run]
stack = "probe"
nodes = 10
[stack.probe]
ring_size = 10
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[run]\nnodes = 3\n", "[run] stack is required"),
        ('[run]\nstack = "nosuch"\n', "unknown stack 'nosuch'"),
        (GOOD + "[network]\nlos = 0.1\n", "[network] los: unknown key"),
        (GOOD + '[workload]\ntopics = "many"\n', "[workload] topics: must be an integer"),
        (GOOD.replace("nodes = 10", "nodes = 0"), "[run] nodes: must be ≥ 1, got 0"),
        (
            GOOD + '[[faults]]\nat = 1.0\nkind = "crash"\nfraction = 1.5\n',
            "[[faults]] #1 fraction: must be in [0, 1], got 1.5",
        ),
        (GOOD + '[[faults]]\nat = 1.0\nkind = "explode"\n', "[[faults]] #1 kind: must be"),
        (
            GOOD + '[[faults]]\nat = 1.0\nkind = "crash"\n',
            "a crash fault needs exactly one of fraction or nodes",
        ),
        (GOOD + '[[faults]]\nat = 1.0\nkind = "crash"\nnodes = [42]\n', "no such node 42"),
        (
            GOOD + "[workload.attributes]\nprice = { min = 0, max = 1 }\n",
            "[workload.attributes]: stack probe is topic-based: attributes need a "
            "content-based stack such as chord or brokertree",
        ),
        (
            GOOD + "[workload.filters]\nconstraints = 1\n",
            "[workload.filters]: stack probe is topic-based: filters need a content-based",
        ),
        (GOOD + '[[faults]]\nat = 1.0\nkind = "churn"\nrate = 1.0\n', "until: must be later"),
        (GOOD + "[network]\nloss = 1.0\n", "[network] loss: must be in [0, 1)"),
        (
            GOOD + '[network]\nlatency = { dist = "uniform", min = 0.5, max = 0.1 }\n',
            "need 0 ≤ min ≤ max",
        ),
        (GOOD + '[network]\nlatency = { dist = "gamma" }\n', "dist: must be"),
        (
            GOOD + "[workload]\nsubscriptions_per_node = 3\n",
            "subscriptions_per_node: must be between 0 and topics",
        ),
        (GOOD + "[workload]\npublish_rate = 0\n", "publish_rate: must be > 0"),
        (GOOD + '[trace]\nmessages = "some"\n', "[trace] messages: must be"),
        (GOOD + "[stack.probe]\n", "not valid TOML"),
        (GOOD.replace("ring_size = 10", "ring_sise = 10"), "[stack.probe] ring_sise: unknown key"),
        (GOOD + '[init]\ncorruption = "scrambled"\n', "unknown corruption 'scrambled'"),
        (GOOD + "[weather]\nsunny = true\n", "unknown section [weather]"),
        (GOOD + "[stack.other]\nx = 1\n", "unknown section [stack.other]"),
        ('[run]\nstack = "probe"\nduration = -1.0\n', "[run] duration: must be > 0"),
        ('[run]\nstack = "probe"\nseed = true\n', "[run] seed: must be an integer"),
    ],
)
def test_bad_scenarios_name_file_and_key(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, source="bad.toml")
    text_of_error = str(info.value)
    assert text_of_error.startswith("bad.toml:"), text_of_error
    assert message in text_of_error, text_of_error
    assert "\n" not in text_of_error


def test_overrides_apply_before_validation() -> None:
    s = parse_scenario(GOOD, overrides=["run.nodes=20", "network.loss=0.25", "run.name=x"])
    assert s.run.nodes == 20 and s.network.loss == 0.25 and s.name == "x"
    with pytest.raises(ScenarioError, match=r"write section\.key=value"):
        parse_scenario(GOOD, overrides=["nodes"])
    with pytest.raises(ScenarioError, match=r"\[network\] loss: must be in \[0, 1\)"):
        parse_scenario(GOOD, overrides=["network.loss=2"])
    faulty = GOOD + '[[faults]]\nat = 1.0\nkind = "crash"\nfraction = 0.5\n'
    assert parse_scenario(faulty, overrides=["faults.0.fraction=0.8"]).faults[0].fraction == 0.8
    with pytest.raises(ScenarioError, match=r"no faults\.3 \(\[\[faults\]\] #4\): the scenario"):
        parse_scenario(faulty, overrides=["faults.3.fraction=0.8"])


def test_canonical_text_round_trips() -> None:
    s = parse_scenario(
        GOOD + '[[faults]]\nat = 1.0\nkind = "crash"\nnodes = [1, 2]\n',
        overrides=["workload.topics=3"],
    )
    again = parse_scenario(s.text)
    assert again == s


def test_attributes_and_filters_parse_and_round_trip() -> None:
    s = parse_scenario(
        '[run]\nstack = "chord"\nnodes = 10\n'
        + "[workload.attributes]\nsymbol = { values = 20, zipf = 1 }\n"
        + "price = { min = 0, max = 100.0 }\n[workload.filters]\nconstraints = 2\n",
        overrides=["workload.filters.selectivity=0.25"],
    )
    attributes = s.workload.attributes
    assert list(attributes) == ["price", "symbol"]  # name order, whatever the file's order
    assert attributes["symbol"].values == 20 and attributes["symbol"].zipf == 1.0
    assert attributes["price"].min == 0.0 and attributes["price"].max == 100.0
    assert s.workload.filters.constraints == 2 and s.workload.filters.selectivity == 0.25
    assert parse_scenario(s.text) == s
    assert parse_scenario(GOOD).workload.attributes == {}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.toml")


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ('[run]\nstack = "gossip"\nnodes = 0\n', "[run] nodes: must be ≥ 1"),
        (
            '[run]\nstack = "gossip"\n[[faults]]\nat = 1.0\nkind = "crash"\nfraction = 1.5\n',
            "fraction: must be in [0, 1], got 1.5",
        ),
        ("[run\nstack = ", "not valid TOML"),
        ('[run]\nstack = "gossip"\nnodez = 3\n', "[run] nodez: unknown key"),
    ],
)
def test_cli_bad_scenario_one_line_exit_2(tmp_path: Path, content: str, expect: str) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(content)
    result = _cli("sim", str(path), "--out", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and expect in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_cli_missing_file_and_bad_override(tmp_path: Path) -> None:
    result = _cli("sim", str(tmp_path / "absent.toml"))
    assert result.returncode == 2 and "no such scenario file" in result.stderr
    good = tmp_path / "g.toml"
    good.write_text('[run]\nstack = "gossip"\nnodes = 5\n')
    result = _cli("sim", str(good), "--set", "run.nodes=-3")
    assert result.returncode == 2 and "[run] nodes: must be ≥ 1" in result.stderr


def test_cli_help_reads_like_a_tour() -> None:
    result = _cli("--help")
    assert result.returncode == 0
    for word in ("pubmesh sim", "pubmesh node", "pubmesh cluster", "pubmesh demo", "tour"):
        assert word in result.stdout
    result = _cli("sim", "--help")
    assert result.returncode == 0 and "[workload]" in result.stdout and "--set" in result.stdout


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "scenarios").rglob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_scenario_and_grid_is_valid(path: Path) -> None:
    """Every file in scenarios/ parses, and every grid's (point, seed) scenarios validate: a
    user's first `pubmesh sim` or `pubmesh sweep` never stops on our own typo."""
    from pubmesh.analysis.sweep import load_grid

    if path.parent.name == "grids":
        grid = load_grid(path)
        assert grid.tasks and all(task.text for task in grid.tasks)
        assert not grid.warnings, grid.warnings  # no shipped grid sweeps a parameter for nothing
    else:
        scenario = load_scenario(path)
        assert scenario.name and scenario.text
