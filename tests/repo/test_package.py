"""pubmesh as a user installs it: the wheel built from pyproject.toml, in a fresh venv, run
from an empty directory.

A wheel built before this had no scenarios, so ``pip install`` then ``pubmesh demo`` failed:
the scenarios and grids now ship as package data, found by name from anywhere. The fresh
venv gets pubmesh from the wheel only; its dependencies come from the project's venv through
a path entry (the machine has no index to install them from), whose editable pubmesh is not
activated (its .pth files are not read from there), which the test checks.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the README tour's simulation quick enough for the suite (the others take 25 s and more)
QUICK = "paper004_fail50"
#: the trace tables the README's tour says a run directory holds
README_TABLES = (
    "runs", "nodes", "subscriptions", "publications", "deliveries", "messages", "snapshots",
    "checks", "faults", "events",
)  # fmt: skip


def readme_commands() -> list[list[str]]:
    """Every ``pubmesh`` command line of the README's shell blocks, as argv (comments cut)."""
    commands, inside = [], False
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        text = line.split("#", 1)[0].strip()
        if inside and text.startswith("pubmesh "):
            commands.append(shlex.split(text))
    return commands


def run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PUBMESH_STACK_MODULES")}
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}"
    return done


def test_the_wheel_installs_and_runs_shipped_scenarios_from_an_empty_directory(
    tmp_path: Path,
) -> None:
    wheels = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)],
        cwd=tmp_path,
    )  # fmt: skip
    [wheel] = list(wheels.glob("pubmesh-*.whl"))
    fresh = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=True).create(fresh)
    python = fresh / "bin" / "python"
    run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path
    )
    site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    ).stdout.strip()
    # the dependencies, from the project's venv (a plain path: its .pth files stay unread)
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    pubmesh = str(fresh / "bin" / "pubmesh")
    where = run([str(python), "-c", "import pubmesh; print(pubmesh.__file__)"], empty).stdout
    assert where.startswith(str(fresh)), where  # the wheel's, not the repository's

    listing = run([pubmesh, "scenarios"], empty).stdout
    for name in ("paper004_fail50", "gossip_crash", "net_small", "paper004_failures"):
        assert name in listing, listing
    done = run([pubmesh, "sim", "paper004", "--out", "run", "--quiet"], empty)
    assert (empty / "run" / "deliveries").is_dir() and (empty / "run" / "run.json").is_file()
    assert "paper004" in (empty / "run" / "run.json").read_text(), done.stdout
    helped = run([pubmesh, "demo", "--quick", "--help"], empty).stdout
    assert "--quick" in helped and "every stack" in helped, helped
    stacks = run([pubmesh, "stacks", "gossip"], empty).stdout
    assert "active_view" in stacks, stacks
    assert sorted(p.name for p in empty.iterdir()) == ["run"]  # nothing else written here

    # the README's tour, the quick commands, as written there, from the fresh install
    tour = tmp_path / "tour"
    tour.mkdir()
    commands = readme_commands()
    quick = [c for c in commands if c[:2] == ["pubmesh", "sim"] and QUICK in c[2]]
    assert quick, commands  # the README still has the quick simulation
    for command in quick:
        done = run([pubmesh, *command[1:]], tour)
        assert "trace: " in done.stdout, done.stdout
    [run_dir] = [p for p in (tour / "runs").iterdir() if p.is_dir()]
    assert run_dir.name == f"{QUICK}-s1"  # runs/<scenario>-s<seed>, as the README says
    assert (run_dir / "run.json").is_file()
    for table in README_TABLES:  # "one Parquet dataset per trace table", as listed there
        assert list((run_dir / table).glob("*.parquet")), table
    readme = (ROOT / "README.md").read_text()
    for command in ("pubmesh stacks", "pubmesh --help", "pubmesh key new", "pubmesh scenarios"):
        assert f"`{command}" in readme, command  # the tour names it ...
        assert run([pubmesh, *command.split()[1:]], tour).stdout.strip(), command  # ... it runs
