"""A slow subscriber beside a fast one: the fast one loses nothing.

Real processes: a publisher and two subscribers of one topic swarm. The slow one is stopped
(SIGSTOP) for three seconds, less than ``suspect_after``, in the middle of a burst of 2,000
publications, so its peers keep it and its socket buffers fill; then it is continued.
Checked: the fast subscriber gets every publication of the burst (whatever the slow one held
of the tree, Plumtree's lazy links repair around it), the slow one is not declared down, and
once continued it catches up (what its peers had to drop for it they counted).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from support.netnode import NodeProcess, publish_until_delivered, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
TOPIC = "burst"
BURST = 2000
STOP = 3.0  # seconds; suspect_after is 5

pytestmark = pytest.mark.xdist_group("net_slow_subscriber")


def test_a_stopped_subscriber_costs_the_fast_one_nothing(tmp_path: Path) -> None:
    publisher = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--subscribe", TOPIC],
        log=tmp_path / "publisher.log",
    )
    nodes = [publisher]
    try:
        joined = ["--contact", publisher.address, "--subscribe", TOPIC]
        for name in ("fast", "slow"):
            listen = ["--stack", STACK, "--listen", "127.0.0.1:0"]
            nodes.append(NodeProcess([*listen, *joined], log=tmp_path / f"{name}.log"))
        _, fast, slow = nodes
        publish_until_delivered(publisher, [fast, slow], TOPIC, 30)

        mark = publisher.mark()
        burst: set[int] = set()
        # The stop lasts STOP seconds by the clock, whatever the burst's pace: a timer
        # continues the process, so a loaded machine publishing slowly cannot stretch the
        # stop past suspect_after (which would make the down verdict right, not wrong).
        resumed: list[float] = []  # when the timer continued it (the stop's true end)

        def resume_slow() -> None:
            os.kill(slow.proc.pid, signal.SIGCONT)
            resumed.append(time.monotonic())

        resume = threading.Timer(STOP, resume_slow)
        os.kill(slow.proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        resume.start()
        try:
            for i in range(BURST):
                payload = f"{i:06d}" + "x" * 94
                burst.add(
                    publisher.command({"op": "publish", "topic": TOPIC, "payload": payload})[
                        "pub_id"
                    ]
                )
                if i == BURST // 2:  # the second half goes to a continued subscriber
                    resume.join()
        finally:
            resume.join()
        assert resumed, f"the slow subscriber (exit {slow.proc.poll()}) could not be continued"
        held = resumed[0] - stopped
        deadline = time.monotonic() + 20
        while not burst <= fast.deliveries():
            assert time.monotonic() < deadline, (
                f"the fast subscriber lost {len(burst - fast.deliveries())} of {BURST}"
            )
            time.sleep(0.1)
        deadline = time.monotonic() + 20
        while not burst <= slow.deliveries():
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        caught_up = len(burst & slow.deliveries())
        down = publisher.matching(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] == "net.peer-down"
                and r["detail"].get("address") == slow.address
            )
        )
        assert publisher.mark() >= mark
        assert not down, f"the slow subscriber, stopped {held:.1f} s, was declared down: {down}"
        stats = publisher.command({"op": "stats"})["stats"]["transport"]["dropped"]
        # the slow one got every publication, or its peers counted what they dropped for it
        assert caught_up == BURST or sum(stats.values()) > 0, (caught_up, stats)
        print(f"slow subscriber: fast got {BURST}/{BURST}, slow caught up {caught_up}/{BURST}")
    finally:
        for node in nodes:
            os.kill(node.proc.pid, signal.SIGCONT)
            node.stop()
