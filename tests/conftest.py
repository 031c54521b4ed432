"""Shared test setup.

* ``tests/`` is importable: the helpers the tests share (the package ``support``: the runtime
  probe stacks of ``support.probestacks``, the node processes of ``support.netnode``, ...) and
  the tiny stack (``tinystack``) live there. The tests themselves sit in folders like the
  code's (``proto/<stack>/``, ``sim/``, ``net/``, ``analysis/``, ``repo/``); they import the
  helpers as ``from support.netnode import ...``, never a helper under a second name.
* Two tiers. ``make test`` (the default) runs every test at the sizes and seeds that decide
  correctness within the suite's budget (README: CPU in loop figures, 15 minutes); cases
  marked ``full`` (more seeds, larger n, the papers' whole figure grids) are deselected unless
  ``PUBMESH_FULL=1``, and ``make figures`` runs exactly them. Same assertions, same bounds:
  only the sample differs.
* The tiny test-only stack is loaded the way a user's own stack would be, through
  ``$PUBMESH_STACK_MODULES``, and ``tests/`` is on ``PYTHONPATH``, so every child process a test
  starts (``pubmesh sim``, node processes, Spark workers) loads it too. Nothing outside
  ``tests/tinystack/`` names it: the generated tests, ``pubmesh stacks``, the demo grid and the
  analysis pick it up from its spec.
"""

from __future__ import annotations

import atexit
import compileall
import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
os.environ["PUBMESH_STACK_MODULES"] = "tinystack.spec"
# a warm Spark the developer keeps (`pubmesh spark start`) is not the one the tests analyse
# on: they see a private, empty state directory, and the warm tests start their own server
os.environ["PUBMESH_SPARK_STATE"] = tempfile.mkdtemp(prefix="pubmesh-spark-tests-")
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(TESTS.parent / "src"), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
)


from support.cpubudget import CpuBudget  # noqa: E402  (tests/ is on sys.path from here)
from support.tiers import FULL  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    # the suite's CPU in loop figures, and its dearest files, at the end of every run
    config.pluginmanager.register(CpuBudget(config), "pubmesh-cpubudget")
    if not hasattr(config, "workerinput"):  # the controller, once, before any worker starts
        compile_sources()


def compile_sources() -> None:
    """Byte-compile src/ and tests/ (what is up to date is only stat'ed). With
    ``PYTHONDONTWRITEBYTECODE`` set, as on CI machines, Python never writes the .pyc files it
    would reuse, so every process a test starts (``pubmesh`` commands, node processes,
    xdist workers) compiled our modules from source again: 0.3 CPU s of a node process's 0.6 s
    start. Reading existing .pyc files is not affected by the variable."""
    for tree in (TESTS.parent / "src", TESTS):
        compileall.compile_dir(tree, quiet=1, workers=1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups it adds below
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every test that reads the local Spark session, directly or through a fixture, runs on
    # one xdist worker (--dist loadgroup): one JVM warmed once, not one per worker on two cores
    for item in items:
        uses = getattr(item, "fixturenames", ())
        if "spark" in uses and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("spark"))
    # the longest work first, so that no worker starts one of them near the end: xdist hands
    # out groups and ungrouped tests in this order (longest-first keeps the tail short)
    items.sort(key=_heavy_rank)
    if FULL:
        return
    dropped = [item for item in items if item.get_closest_marker("full")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("full")]


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Collect once, then freeze what is left, so the worker exits within execnet's grace.

    pytest's last step collects garbage five times over (to report ``__del__`` errors); in a
    worker holding two million objects that took 5-12 s. execnet gives a worker 5 s to finish
    once the controller has said goodbye, then sends the worker a SIGINT of its own
    (``WorkerGateway._terminate_execution``): that was the SIGINT that raised
    ``KeyboardInterrupt`` inside Hypothesis's gc callback at the end of full runs.
    One collection still finds every unreachable object; frozen objects are skipped by the
    five that follow.

    The frozen objects are handed back to the collector at exit (``atexit`` runs after
    pytest's collections, before the interpreter's own last one): left frozen, they were never
    freed, and DuckDB's bindings (nanobind, which counts its live objects when its module is
    torn down) printed "nanobind: leaked 27 instances!" at the end of every run that had
    imported ``duckdb``. One collection at exit, not five, so the worker still
    ends well within execnet's grace."""
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)
    shutil.rmtree(os.environ["PUBMESH_SPARK_STATE"], ignore_errors=True)


#: xdist groups and test files of minutes each under the suite's load, longest first
HEAVY_FIRST = ("spark", "test_demo.py", "spark_cluster", "compiled")


def _heavy_rank(item: pytest.Item) -> int:
    group = item.get_closest_marker("xdist_group")
    names = {item.path.name, *(group.args[:1] if group is not None else ())}
    return next((i for i, name in enumerate(HEAVY_FIRST) if name in names), len(HEAVY_FIRST))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One real local Spark session (local[2]) for every analysis test of the run."""
    from pubmesh.analysis.spark import end_jvm, get_session

    session = get_session("local[2]", app="pubmesh-tests", small=True)
    yield session
    # stopped and its JVM reaped here, so the JVM's CPU counts as the worker's (and so in
    # `time make test`); left to exit with the worker, it ended as nobody's child
    end_jvm()


@pytest.fixture
def contact_and_peer(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """Two live node processes of the network tests' stack (gossip where this build has it):
    a contact and a peer joined through it, stopped afterwards."""
    from support.netnode import real_stacks, small_cluster

    stack = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
    contact, peer = small_cluster(stack, 1, tmp_path)
    try:
        yield contact, peer
    finally:
        peer.stop()
        contact.stop()
