"""Every mistake named in one line, in names the user knows: a ``--set`` by its number and
text, ``[[faults]] #N`` for ``faults.N-1``, the close name for a typo, a rerun into a run
directory refused without ``--force``, and scenario listings wrapped, not cut, without
tracker numbers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CRASH = ROOT / "scenarios" / "gossip_crash.toml"
SMALL = ["paper004", "--quiet", "--set", "run.nodes=12", "--set", "run.duration=3"]


def pubmesh(
    *args: str, cwd: Path = ROOT, columns: int = 80, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": str(columns)}
    if key is not None:  # the cluster key a node needs (PUBMESH_KEY)
        env["PUBMESH_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=60,
    )  # fmt: skip
    print(f"$ pubmesh {' '.join(args)}\n-> {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def error_line(*args: str, key: str | None = None) -> str:
    done = pubmesh(*args, key=key)
    assert done.returncode == 2, done.stderr
    # one error line (a scenario's timing warnings may come before it)
    [line] = [x for x in done.stderr.splitlines() if not x.startswith("pubmesh: warning:")]
    return line


def test_set_typo_names_the_set_and_the_close_parameter() -> None:
    line = error_line("sim", str(CRASH), "--set", "stack.gossip.activ_view=3")
    assert line.startswith(
        "pubmesh: error: --set #1 'stack.gossip.activ_view=3': no parameter activ_view for "
        "stack gossip; did you mean active_view?"
    ), line
    assert "gossip_crash.toml" not in line, line
    line = error_line("sim", str(CRASH), "--set", "run.nodes=50", "--set", "rn.seed=2")
    assert line.startswith(
        "pubmesh: error: --set #2 'rn.seed=2': no section [rn]; did you mean run?"
    )
    line = error_line("sim", str(CRASH), "--set", "stack.gosip.fanout=3")
    assert "--set #1 'stack.gosip.fanout=3': no stack gosip; did you mean gossip?" in line
    # the cluster's and the node's --set name the override the same way
    line = error_line("cluster", "--stack", "gossip", "--nodes", "3", "--set", "run.seed=2",
                      "--set", "stack.gossip.activ_view=3")  # fmt: skip
    assert line.startswith(
        "pubmesh: error: --set #2 'stack.gossip.activ_view=3': no parameter activ_view for "
        "stack gossip; did you mean active_view?"
    ), line
    line = error_line("node", "--stack", "gossip", "--listen", "127.0.0.1:0", "--set",
                      "activ_view=3", key="5e7c1d0a9b3f48e2a6d4c8b1f0e9273d")  # fmt: skip
    assert line.startswith(
        "pubmesh: error: --set #1 'activ_view=3': no parameter activ_view for stack gossip; "
        "did you mean active_view?"
    ), line


def test_set_value_refused_by_validation_is_named_by_its_set() -> None:
    line = error_line("sim", str(CRASH), "--set", "run.nodes=50", "--set", "faults.0.fraction=2")
    assert line == (
        "pubmesh: error: --set #2 'faults.0.fraction=2': [[faults]] #1 fraction: must be in "
        "[0, 1], got 2.0"
    ), line


def test_faults_are_numbered_as_the_file_has_them() -> None:
    line = error_line("sim", str(CRASH), "--set", "faults.1.at=3")
    assert line == (
        "pubmesh: error: --set #1 'faults.1.at=3': no faults.1 ([[faults]] #2): the scenario "
        "has one [[faults]] table, faults.0"
    ), line
    line = error_line("sim", str(CRASH), "--set", "faults.0.fractoin=0.5")
    assert "--set #1 'faults.0.fractoin=0.5': no field fractoin in a [[faults]] table; did you " \
        "mean fraction?" in line, line  # fmt: skip


def test_close_names_for_keys_stacks_and_commands(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[run]\nstack = "gossip"\nnodez = 10\n')
    line = error_line("sim", str(bad))
    assert f"{bad}: [run] nodez: unknown key; did you mean nodes?" in line, line
    bad.write_text('[run]\nstack = "gosip"\n')
    assert "unknown stack 'gosip'; did you mean gossip?" in error_line("sim", str(bad))
    assert error_line("stacks", "gosip").endswith("; did you mean gossip?")
    line = error_line("cluster", "--stack", "gosip", "--nodes", "3")
    assert line.startswith("pubmesh: error: --stack: unknown stack 'gosip'"), line
    assert line.endswith("; did you mean gossip?"), line
    line = error_line("simm", "x.toml")
    assert line.startswith("pubmesh: error: no command 'simm'; did you mean sim?"), line
    line = error_line("node", "--stack", "gosip", "--listen", "127.0.0.1:0")
    assert "--stack: unknown stack 'gosip' (available: brokertree, chord, " in line, line
    assert line.endswith("); did you mean gossip?"), line
    # the node's shell and control lines: an unknown command names the close one
    from pubmesh.net.control import ControlError, parse_line

    for typed in ('{"op": "subscrib", "topic": "news"}', "subscrib news"):
        try:
            parse_line(typed)
        except ControlError as error:
            assert "unknown command 'subscrib'; did you mean subscribe?" in str(error), error
        else:
            raise AssertionError(f"an unknown command was taken: {typed}")


def test_rerun_into_a_run_directory_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "x"
    assert pubmesh("sim", *SMALL, "--out", str(out)).returncode == 0
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    line = error_line("sim", *SMALL, "--out", str(out))
    assert line == (
        f"pubmesh: error: --out {out}: a run directory is already there; add --force to "
        "replace it, or choose another --out"
    ), line
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # untouched
    (out / "stale.txt").write_text("of the old run")
    assert pubmesh("sim", *SMALL, "--out", str(out), "--force").returncode == 0
    assert not (out / "stale.txt").exists() and (out / "run.json").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    line = error_line("sim", *SMALL, "--out", str(mine), "--force")
    assert "is not a run directory" in line and "never replaced" in line, line
    assert (mine / "notes.txt").read_text() == "mine"


def test_scenario_listing_wraps_and_cites_no_tracker() -> None:
    done = pubmesh("scenarios", columns=80)
    assert done.returncode == 0
    text = done.stdout
    assert "gossip_crash" in text and "brokertree_srds11_restarts" in text, text
    assert not re.search(r" …$", text, re.MULTILINE), text  # wrapped, never cut
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert not re.search(r"\bissues? \d", text, re.IGNORECASE), text
    shipped = (ROOT / "src" / "pubmesh" / "scenarios").rglob("*.toml")
    cited = [p.name for p in shipped if re.search(r"\bissues? \d", p.read_text(), re.I)]
    assert cited == [], cited


def test_stack_parameters_name_the_document_they_cite() -> None:
    done = pubmesh("stacks", "chord", columns=200)
    assert done.returncode == 0
    assert "spec §3" in done.stdout, done.stdout
    assert (
        'its spec, the protocol notes docs/protocols/chord.md in the repository ("spec §N" '
        "below is its section N)" in done.stdout
    ), done.stdout


def test_a_cluster_rerun_into_its_run_directory_needs_force(tmp_path: Path) -> None:
    """``pubmesh cluster --out`` as ``pubmesh sim --out``: refused before any node starts."""
    out = tmp_path / "net"
    out.mkdir()
    (out / "run.json").write_text("{}")
    line = error_line("cluster", "--stack", "gossip", "--nodes", "3", "--out", str(out))
    assert line == (
        f"pubmesh: error: --out {out}: a run directory is already there; add --force to "
        "replace it, or choose another --out"
    ), line
    assert (out / "run.json").read_text() == "{}"


def test_messages_lost_are_explained_where_they_are_printed(tmp_path: Path) -> None:
    """A run with no fault and no loss still loses messages (sent to nodes not started yet):
    the table says to what, by cause, and what the figure counts; run.json has the causes."""
    import json

    out = tmp_path / "run"
    done = pubmesh("sim", *SMALL, "--out", str(out), columns=100)
    assert done.returncode == 0, done.stderr
    stats = json.loads((out / "run.json").read_text())
    by, lost = stats["messages_lost_by"], stats["messages_lost"]
    assert lost > 0 and sum(by.values()) == lost, (lost, by)
    assert by["receiver_not_running"] == lost, by  # paper004: no fault, no loss
    assert re.search(rf"│   to nodes not running\s+│\s+{lost:,} │", done.stdout), done.stdout
    assert "messages lost: sent to a node not running (not started yet" in " ".join(
        line.strip() for line in done.stdout.splitlines()
    ), done.stdout
