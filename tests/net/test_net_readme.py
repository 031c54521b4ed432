"""The README's first ``pubmesh node`` commands work as written.

They once stopped at "no cluster key": the README started two nodes without one. The test
reads the commands from README.md itself (the "Run real nodes" block: ``pubmesh key new`` and
the two ``pubmesh node`` lines), runs them in a fresh directory with no ``PUBMESH_KEY`` in the
environment, the ports swapped for free ones (the suite runs in parallel), and checks the two
nodes form an overlay: a publication of the first reaches the second.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from support.identity import free_port
from support.netnode import ROOT, NodeProcess, node_env, publish_until_delivered


def _readme_commands() -> list[list[str]]:
    """The block's ``pubmesh key new`` and ``pubmesh node`` lines, as argument lists."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### 3. Run real nodes") :]
    block = section[section.index("```sh") + 5 : section.index("```", section.index("```sh") + 5)]
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:3] == ["pubmesh", "key", "new"] or words[:2] == ["pubmesh", "node"]:
            commands.append(words[1:])
    return commands


def test_the_readmes_node_commands_run_as_written(tmp_path: Path) -> None:
    commands = _readme_commands()
    assert [c[:2] for c in commands] == [["key", "new"], ["node", "--stack"], ["node", "--stack"]]
    env = {k: v for k, v in node_env().items() if k != "PUBMESH_KEY"}
    ports = {"7000": str(free_port()), "7001": str(free_port())}

    def ported(words: list[str]) -> list[str]:
        return [re.sub(r"(?<=127\.0\.0\.1:)(7000|7001)", lambda m: ports[m[1]], w) for w in words]

    made = subprocess.run(
        [sys.executable, "-m", "pubmesh", *commands[0]],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "cluster.key").is_file() and os.stat(
        tmp_path / "cluster.key"
    ).st_mode & 0o77 == 0
    nodes: list[NodeProcess] = []
    try:
        for i, words in enumerate(commands[1:]):
            nodes.append(
                NodeProcess(
                    ported(words[1:]), log=tmp_path / f"n{i}.log", cli=True, env=env, cwd=tmp_path
                )
            )
        first, second = nodes
        for node in nodes:
            assert node.command("subscribe news")["ok"] is True
        publish_until_delivered(first, [second], "news", 20, "the README's two nodes never met")
    finally:
        for node in nodes:
            node.stop()
