"""The sans-IO rule holds for the package, and the checker really catches violations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "lint_sansio.py"


def test_package_obeys_the_sans_io_rule() -> None:
    result = subprocess.run([sys.executable, str(TOOL), str(ROOT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_checker_flags_io_clocks_and_global_random(tmp_path: Path) -> None:
    proto = tmp_path / "src" / "pubmesh" / "proto"
    proto.mkdir(parents=True)
    (tmp_path / "src" / "pubmesh" / "stacks").mkdir()
    (proto / "ok.py").write_text("import random\nrng: random.Random = random.Random(1)\n")
    (proto / "bad.py").write_text(
        "import asyncio\nimport time\nfrom random import choice\nimport random\n"
        "x = random.random()\nopen('f')\nfrom os import path\n"
    )
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    out = result.stdout
    for needle in (
        "bad.py:1: imports asyncio",
        "bad.py:2: imports time",
        "bad.py:3: imports random.choice",
        "bad.py:5: uses random.random",
        "bad.py:6: calls open()",
        "bad.py:7: imports from os",
    ):
        assert needle in out, out
    assert "ok.py" not in out


def test_checker_flags_proto_importing_a_layer_above_it(tmp_path: Path) -> None:
    """The layer-direction rule: proto/ may import pubmesh.proto only; stacks/ may import
    proto/ (it is above it)."""
    proto = tmp_path / "src" / "pubmesh" / "proto" / "demo"
    proto.mkdir(parents=True)
    stacks = tmp_path / "src" / "pubmesh" / "stacks"
    stacks.mkdir()
    (proto / "ok.py").write_text(
        "from pubmesh.proto.core import Message\nimport pubmesh.proto.demo.ok\nfrom . import ok\n"
    )
    (proto / "up.py").write_text(
        "from pubmesh.stacks.base import StackSpec\nimport pubmesh.sim.engine\n"
        "from pubmesh.trace import schema\nfrom pubmesh import workload\n"
    )
    (stacks / "spec.py").write_text("from pubmesh.proto.demo.ok import Message\n")
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    out = result.stdout
    for needle in (
        "up.py:1: imports from pubmesh.stacks.base (proto/ imports nothing above it)",
        "up.py:2: imports pubmesh.sim.engine (proto/ imports nothing above it)",
        "up.py:3: imports from pubmesh.trace (proto/ imports nothing above it)",
        "up.py:4: imports from pubmesh (proto/ imports nothing above it)",
    ):
        assert needle in out, out
    assert "ok.py" not in out and "spec.py" not in out, out


def test_checker_flags_a_private_name_imported_from_another_package(tmp_path: Path) -> None:
    """No module imports a private name from another pubmesh package (the cluster's options
    once imported the scenario parser's ``_apply_override``); within a package it may."""
    pkg = tmp_path / "src" / "pubmesh"
    for sub in ("net/cluster", "sim", "proto", "stacks"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
    (pkg / "net" / "cluster" / "options.py").write_text(
        "from pubmesh.sim.scenario import Scenario, _apply_override\n"
        "from pubmesh.net.transport import _private_to_net\n"
        "from pubmesh.net.cluster.children import wait_exit as _wait_exit\n"
    )
    (pkg / "cli.py").write_text("from pubmesh import __version__\nfrom pubmesh.sim import _x\n")
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(
        "options.py:1: imports _apply_override from pubmesh.sim.scenario" in line for line in lines
    ), lines
    assert any("cli.py:2: imports _x from pubmesh.sim" in line for line in lines), lines
    assert len(lines) == 2, lines  # the same package's private name and a private alias pass


def test_checker_flags_an_output_list_before_another_positional_parameter(tmp_path: Path) -> None:
    """The layer contract's rule on shape (proto/core.py ``Outbox``): under proto/, a function
    handed the caller's output list ``out`` takes it last among its positional parameters;
    keyword-only options may follow. Outside proto/ the rule does not apply."""
    proto = tmp_path / "src" / "pubmesh" / "proto"
    proto.mkdir(parents=True)
    (tmp_path / "src" / "pubmesh" / "stacks").mkdir()
    (tmp_path / "src" / "pubmesh" / "net").mkdir()
    (proto / "layer.py").write_text(
        "class Ring:\n"
        "    def send(self, out, dst, message):\n        pass\n"
        "    def linearize(self, u, out, *, direct=False):\n        pass\n"
        "    def check(self, u, out, direct=True):\n        pass\n"
        "def flood(state, hops, out):\n    pass\n"
    )
    (tmp_path / "src" / "pubmesh" / "net" / "runtime.py").write_text(
        "def apply(out, now):\n    pass\n"
    )
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any("layer.py:2: send() takes its output list before dst, message" in x for x in lines)
    assert any("layer.py:6: check() takes its output list before direct" in x for x in lines)
    assert len(lines) == 2, lines  # keyword-only options after it, and net/, pass


def test_checker_flags_a_write_to_another_parts_field(tmp_path: Path) -> None:
    """A part owns its fields: its node writes none of them (it calls the part's method).
    Writes to the shared state, to the node's own fields and through a part's methods pass,
    and so do writes to a field of an object the node did not build on itself or its state."""
    proto = tmp_path / "src" / "pubmesh" / "proto" / "demo"
    proto.mkdir(parents=True)
    (tmp_path / "src" / "pubmesh" / "stacks").mkdir()
    (proto / "node.py").write_text(
        "class Node:\n"
        "    def __init__(self, ctx):\n"
        "        self.s = State(ctx.node_id, self.params)\n"
        "        self.flow = Flow(self.s)\n"
        "        self.ring = Ring(self)\n"
        "        self.seen = set()\n"
        "        self.budget = Budget(ctx.params.limit)\n"
        "    def settle(self, x):\n"
        "        self.flow.dirty.add(x)\n"  # 9
        "        self.flow.confs = {}\n"  # 10
        "        self.ring.succ[0] += 1\n"  # 11
        "        del self.flow.confs[x]\n"  # 12
        "        self.flow.recheck(x)\n"
        "        self.s.phase = 'left'\n"
        "        self.s.links.clear()\n"
        "        self.seen.add(x)\n"
        "        self.budget.used += 1\n"
    )
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    flagged = sorted(int(line.split(":")[1]) for line in lines)
    assert flagged == [9, 10, 11, 12], lines
    assert "Node writes self.flow.dirty, a field of its part" in lines[0], lines
    assert "Node writes self.ring.succ, a field of its part" in lines[2], lines


@pytest.mark.parametrize(
    ("stack", "honest", "planted", "field"),
    [
        # the node adding an entry to the flow part's dirty set instead of calling recheck
        ("brokertree", "self.flow.recheck(entry)", "self.flow.dirty.add(entry)", "self.flow.dirty"),
        # the node clearing its history part's queries instead of calling leave
        ("chord", "self.history.leave()", "self.history.asking.clear()", "self.history.asking"),
    ],
)
def test_checker_catches_a_cross_part_write_planted_in_a_real_node(
    tmp_path: Path, stack: str, honest: str, planted: str, field: str
) -> None:
    """The real node, with a write the parts' split took away put back: refused."""
    proto = tmp_path / "src" / "pubmesh" / "proto" / stack
    proto.mkdir(parents=True)
    (tmp_path / "src" / "pubmesh" / "stacks").mkdir()
    real = (ROOT / "src" / "pubmesh" / "proto" / stack / "node.py").read_text()
    assert real.count(honest) >= 1
    (proto / "node.py").write_text(real.replace(honest, planted, 1))
    result = subprocess.run(
        [sys.executable, str(TOOL), str(tmp_path)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and f"Node writes {field}, a field of its part" in lines[0], lines
