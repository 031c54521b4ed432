"""The optional compiled build (tools/build_compiled.py, mypyc) runs the same simulator.

The build is made once per source tree (src/ is never touched): ``build_compiled.cached_build``
keeps it in the user's cache under the hash of every source it depends on, so a run whose
sources were built before reuses that build, and any edit builds anew. Then:

* the hot modules are really the compiled extension modules in that copy;
* the same scenarios give the same trace, byte for byte, pure and compiled (a joined gossip
  run with loss and crashes, a corrupted skipring run, a warm-started gossip run);
* the simulator's own tests pass in compiled mode (a pytest run with the copy first on
  PYTHONPATH), but for the cyclic-garbage check of the stacks the build leaves interpreted.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import build_compiled  # noqa: E402

JOINED = """
[run]
stack = "gossip"
nodes = 300
seed = 5
duration = 30
start_spread = 5
[network]
latency = { dist = "lognormal", median = 0.02, sigma = 0.5 }
loss = 0.01
[workload]
topics = 2
subscriptions_per_node = 1
publications = 30
publish_start = 12
publish_rate = 5.0
[[faults]]
at = 18
kind = "crash"
fraction = 0.3
[trace]
snapshot_interval = 5
"""
SKIPRING = """
[run]
stack = "skipring"
nodes = 60
seed = 2
duration = 20
[workload]
topics = 1
subscriptions_per_node = 1
publications = 10
publish_start = 10
[init]
corruption = "random_graph"
junk_messages = 50
[trace]
snapshot_interval = 2
"""
WARM = """
[run]
stack = "gossip"
nodes = 400
seed = 3
duration = 15
[network]
latency = { dist = "uniform", min = 0.005, max = 0.050 }
[workload]
topics = 2
subscriptions_per_node = 1
publications = 20
publish_start = 1
publish_rate = 5.0
[init]
overlay = "warm"
"""


# one worker runs this module, so its expensive fixture is built once (make test runs
# --dist loadgroup)
pytestmark = pytest.mark.xdist_group("compiled")


# session scope, not module: a module fixture is torn down whenever the worker runs another
# module's test in between, and under xdist that rebuilt it (~220 s) within one run
@pytest.fixture(scope="session")
def compiled() -> Iterator[Path]:
    yield build_compiled.cached_build()


def _env(path: Path) -> dict[str, str]:
    tests = str(ROOT / "tests")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), tests])}


def _sim(path: Path, scenario: Path, out: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "sim", str(scenario), "--out", str(out), "--quiet"],
        env=_env(path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    digest = hashlib.sha256()
    for part in sorted(out.rglob("*.parquet")):
        digest.update(str(part.relative_to(out)).encode())
        digest.update(part.read_bytes())
    return digest.hexdigest()


def test_a_source_edit_makes_a_new_build(tmp_path: Path) -> None:
    """The cache's key covers every source the build reads: the same tree gives the same key,
    and an edit anywhere in the package (here a module mypyc does not compile, but reads the
    types of) gives another, so a stale build is never reused."""
    copy = tmp_path / "src" / "pubmesh"
    shutil.copytree(ROOT / "src" / "pubmesh", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert build_compiled.source_key(tmp_path) == build_compiled.source_key()
    core = copy / "proto" / "core.py"
    core.write_text(core.read_text() + "\n# an edit\n")
    assert build_compiled.source_key(tmp_path) != build_compiled.source_key()


def test_the_hot_modules_are_compiled(compiled: Path) -> None:
    modules = [path.removesuffix(".py").replace("/", ".") for path in build_compiled.HOT_MODULES]
    probe = f"import importlib; print(*[importlib.import_module(m).__file__ for m in {modules!r}])"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_env(compiled), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    files = done.stdout.split()
    assert len(files) == len(modules), done.stdout
    assert all(f.startswith(str(compiled)) and f.endswith(".so") for f in files), files


@pytest.mark.parametrize("name", ["joined", "skipring", "warm"])
def test_pure_and_compiled_write_the_same_trace(compiled: Path, name: str, tmp_path: Path) -> None:
    scenario = tmp_path / f"{name}.toml"
    scenario.write_text({"joined": JOINED, "skipring": SKIPRING, "warm": WARM}[name])
    pure = _sim(ROOT / "src", scenario, tmp_path / "pure")
    native = _sim(compiled, scenario, tmp_path / "compiled")
    assert pure == native, f"traces differ; replay: PYTHONPATH=<compiled> pubmesh sim {scenario}"


#: the compiled build compiles the engine, the trace writer and the gossip stack only: the
#: cyclic-garbage check of the stacks it leaves interpreted (~100 s under the suite's load)
#: tests nothing of it that the gossip scenario's does not; make test runs them all pure
COMPILED = "not (cyclic_garbage and (skipring or chord or brokertree or clique or d2g))"


def test_the_simulator_tests_pass_compiled(compiled: Path) -> None:
    files = [
        "tests/sim/test_sim_engine.py",
        "tests/proto/gossip/test_gossip_rules.py",
        "tests/proto/gossip/test_gossip_rooted.py",
        "tests/sim/test_sim_sizes.py",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", COMPILED, *files],
        cwd=ROOT,
        env=_env(compiled),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-500:]
    assert "5 deselected" in done.stdout, done.stdout[-500:]  # the five named above, no more
