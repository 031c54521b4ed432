"""A full disk under a node's trace stays off its network path.

Before, trace write errors escaped into connection and timer callbacks: on a full filesystem
the node delivered 0 of 60 publications, its peer declared it down, and the segments that
failed vanished without a word. Now the trace writer contains them
(:mod:`pubmesh.net.tracing`, disk faults).

A real full filesystem: the node runs in a private mount namespace (``unshare --mount``, as
root) with its trace directory on a 4 MiB tmpfs of its own, which the test fills through
``/proc/PID/root`` once the node has sealed a segment. Checked: every publication is still
delivered and the peer never declares the node down; the node says so once on stderr and
once in its JSON lines; ``stats`` marks the trace incomplete with the rows it lost; the
segment sealed before stays; and once there is room again, new segments are written.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from support.disk import fill
from support.netnode import NodeProcess, publish_until_delivered, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
TOPIC = "disk"

pytestmark = pytest.mark.xdist_group("net_diskfull")


def _segments(directory: Path) -> list[str]:
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".tmp"))


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _publish(publisher: NodeProcess, count: int) -> set[int]:
    sent = set()
    publish = {"op": "publish", "topic": TOPIC, "payload": "p" * 200}
    for _ in range(count):
        sent.add(publisher.command(publish)["pub_id"])
        time.sleep(0.05)
    return sent


def test_a_full_disk_under_the_trace_loses_rows_not_deliveries(tmp_path: Path) -> None:
    # not a skip: make test runs as root here; elsewhere deselect the file
    assert os.geteuid() == 0, "a private mount namespace needs root"
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    contact = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0"], log=tmp_path / "contact.log"
    )
    private_fs = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t tmpfs -o size=4m pubmesh-full "$0" && exec "$@"',
        str(mount),
    ]
    listen = ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", contact.address]
    node = NodeProcess(
        [*listen, "--trace-dir", str(mount / "trace")],
        log=tmp_path / "node.log",
        prefix=private_fs,
    )
    # the node's view of its tmpfs (the test's own view of the directory is the empty one)
    inside = Path(f"/proc/{node.proc.pid}/root") / str(mount).lstrip("/")
    trace = inside / "trace"
    try:
        for process in (contact, node):
            assert process.command({"op": "subscribe", "topic": TOPIC})["ok"]
        publish_until_delivered(contact, [node], TOPIC, 30)
        before = _publish(contact, 20)
        _wait(lambda: before <= node.deliveries(), 20, "deliveries before the fill")
        _wait(lambda: _segments(trace), 15, "a sealed segment before the fill")
        kept = _segments(trace)

        mark = node.mark()
        filled = fill(inside / "filler")
        assert filled < 4 << 20
        during = _publish(contact, 60)
        _wait(lambda: during <= node.deliveries(), 20, "deliveries on a full disk")
        # past the open segment's end, so that its seal has failed too
        node.wait_event(
            lambda r: r.get("event") == "net" and r["kind"] == "net.trace-error",
            15,
            "the trace error",
            mark,
        )
        time.sleep(7)
        more = _publish(contact, 20)
        _wait(lambda: more <= node.deliveries(), 20, "deliveries after the failed seal")

        errors = node.count(lambda r: r.get("event") == "net" and r["kind"] == "net.trace-error")
        assert errors == 1, f"{errors} trace-error lines: said once"
        said = [line for line in node.log.read_text().splitlines() if "trace writes" in line]
        assert len(said) == 1 and "No space left on device" in said[0], said
        stats = node.command({"op": "stats"})["stats"]["trace"]
        assert stats["complete"] is False and stats["rows_lost"] > 0, stats
        assert "No space left on device" in stats["error"], stats
        assert set(kept) <= set(_segments(trace)), "a segment sealed before the fill went"
        down = contact.count(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] == "net.peer-down"
                and r["detail"].get("address") == node.address
            )
        )
        assert down == 0, "the peer declared the node down over its full disk"

        # room again: the trace resumes at a later segment
        (inside / "filler").unlink()
        sealed = len(_segments(trace))
        _publish(contact, 20)
        _wait(lambda: len(_segments(trace)) > sealed, 20, "a segment after the room came back")
        print(
            f"full disk: {stats['rows_lost']} rows lost, {len(during) + len(more)} publications"
            " delivered meanwhile"
        )
    finally:
        with contextlib.suppress(AssertionError):
            node.stop()
        contact.stop()
