"""No orphan processes, ever: however a ``pubmesh cluster`` ends — Ctrl-C, SIGTERM, or the
controller SIGKILLed outright — every node process it started is gone within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.netnode import node_env, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
NODES = 5


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may be slow to reap re-parented children)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_cluster(
    tmp_path: Path, sigint_ignored: bool = False
) -> tuple[subprocess.Popen[bytes], set[int]]:
    """A 5-node cluster, running. ``sigint_ignored`` starts the controller as a POSIX shell
    starts a background job, with SIGINT ignored from birth."""
    controller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pubmesh",
            "cluster",
            "--stack",
            STACK,
            "--nodes",
            str(NODES),
            "--duration",
            "120",
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ],
        env=node_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )
    deadline = time.monotonic() + 90
    started = tmp_path / "run" / ".partial" / "started.json"
    while not started.is_file():  # the controller writes it once every node is up
        assert time.monotonic() < deadline, "the cluster did not start"
        assert controller.poll() is None, controller.stderr.read() if controller.stderr else ""
        time.sleep(0.1)
    nodes = children_of(controller.pid)
    assert len(nodes) == NODES, f"expected {NODES} node processes, found {nodes}"
    time.sleep(1.0)  # into the run: booted, subscribed, publishing
    return controller, nodes


def wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = {pid for pid in pids if running(pid)}
        if not left:
            return set()
        time.sleep(0.1)
    return {pid for pid in pids if running(pid)}


@pytest.mark.parametrize(
    ("signum", "status", "sigint_ignored"),
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGINT, 130, True)],
    ids=["SIGINT", "SIGTERM", "SIGINT-in-a-background-job"],
)
def test_interrupting_the_cluster_stops_every_node(
    tmp_path: Path, signum: int, status: int, sigint_ignored: bool
) -> None:
    controller, nodes = start_cluster(tmp_path, sigint_ignored)
    try:
        os.kill(controller.pid, signum)
        assert controller.wait(20) == status
        assert wait_gone(nodes, 10) == set()
        assert (tmp_path / "run" / "deliveries").is_dir(), "an interrupted run gathers its trace"
    finally:
        for pid in nodes | {controller.pid}:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_killing_the_controller_outright_still_leaves_no_orphans(tmp_path: Path) -> None:
    controller, nodes = start_cluster(tmp_path)
    try:
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
        # the nodes hear of it from the kernel (PR_SET_PDEATHSIG) and from their stdin's EOF
        assert wait_gone(nodes, 10) == set()
    finally:
        for pid in nodes:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
