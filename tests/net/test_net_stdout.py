"""A node whose stdout nobody reads keeps serving its peers.

Before, deliveries were written and flushed on the event loop: after ~600 unread deliveries the
node stopped answering handshakes while its peers still held it alive. Now stdout goes through
a bounded buffer, written without ever blocking the loop (:mod:`pubmesh.net.output`).

Real processes: a publisher, and a subscriber whose stdout the test reads once (its ``ready``
line) and then leaves unread while 2,000 publications arrive. Checked: its peer never declares
it down (the heartbeat would, within 5 s, if its loop froze); a third node joins the topic
*through it* afterwards and gets what is published next; and when stdout is finally read,
every delivery is there as a line or counted in a ``lagged`` line, those counts agree with its
``stats``, and every answer to a command is there.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.netnode import NodeProcess, node_env, publish_until_delivered, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
TOPIC = "flood"
FLOOD = 2000
#: a small buffer, so that 2,000 delivery lines (~300 bytes each) overflow it
BUFFER = 64 * 1024

pytestmark = pytest.mark.xdist_group("net_stdout")


def _publish(publisher: NodeProcess, count: int) -> set[int]:
    return {
        publisher.command({"op": "publish", "topic": TOPIC, "payload": "x" * 200})["pub_id"]
        for _ in range(count)
    }


def test_an_unread_stdout_costs_lines_not_the_nodes_peers(tmp_path: Path) -> None:
    publisher = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--subscribe", TOPIC],
        log=tmp_path / "publisher.log",
    )
    with open(tmp_path / "stalled.log", "wb") as stderr:
        stalled = subprocess.Popen(
            [sys.executable, "-m", "pubmesh.net.node", "--json", "--stack", STACK,
             "--listen", "127.0.0.1:0", "--contact", publisher.address, "--subscribe", TOPIC,
             "--stdout-buffer", str(BUFFER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=node_env(),
            start_new_session=True,
        )  # fmt: skip
    late: NodeProcess | None = None
    try:
        assert stalled.stdout is not None and stalled.stdin is not None
        ready = json.loads(stalled.stdout.readline())
        assert ready["event"] == "ready", ready
        address = ready["address"]
        # the swarm has formed once the publisher has the stalled node as a neighbour
        deadline = time.monotonic() + 30
        while ready["node"] not in publisher.command({"op": "neighbors"})["neighbors"][TOPIC]:
            assert time.monotonic() < deadline, "the stalled node never joined the topic"
            time.sleep(0.2)
        # a command whose answer the stalled node must keep, unread, behind its deliveries
        stalled.stdin.write(b'{"op": "neighbors"}\n')
        stalled.stdin.flush()

        mark = publisher.mark()
        flood = _publish(publisher, FLOOD)
        time.sleep(6.0)  # beyond suspect_after: a frozen node would be declared down by now
        down = publisher.count(
            lambda r: (
                r.get("event") == "net"
                and r["kind"] == "net.peer-down"
                and r["detail"].get("address") == address
            )
        )
        assert down == 0, "the publisher declared the stalled node down"
        assert stalled.poll() is None

        # a newcomer joins the topic through the stalled node, and gets the next publications
        late = NodeProcess(
            ["--stack", STACK, "--listen", "127.0.0.1:0", "--contact", address,
             "--subscribe", TOPIC],
            log=tmp_path / "late.log",
        )  # fmt: skip
        probes = publish_until_delivered(
            publisher, [late], TOPIC, 30, "a node joining through the stalled one got nothing"
        )
        assert publisher.mark() > mark

        stalled.send_signal(signal.SIGTERM)
        out, _ = stalled.communicate(timeout=30)
        assert stalled.returncode == 0, stalled.returncode
        records = [json.loads(line) for line in out.splitlines()]
        lines = {r["pub_id"] for r in records if r["event"] == "deliver"}
        lagged = [r for r in records if r["event"] == "lagged"]
        (bye,) = [r for r in records if r["event"] == "bye"]
        stats = bye["stats"]
        dropped = sum(r["dropped"] for r in lagged)
        assert lagged and dropped > 0, "2,000 deliveries into a 64 KiB buffer dropped nothing"
        assert stats["stdout"]["dropped"] == dropped, (stats["stdout"], dropped)
        assert stats["stdout"]["lagged"] == len(lagged)
        # every delivery is a line or counted as dropped; the flood was delivered in full
        assert len(lines) + dropped == stats["deliveries"], (len(lines), dropped, stats)
        assert stats["deliveries"] >= FLOOD
        assert lines <= flood | probes, "a delivery line of something never published"
        answers = [r for r in records if r["event"] == "result"]
        assert [a["op"] for a in answers] == ["neighbors"], answers
        print(f"unread stdout: {dropped} of {stats['deliveries']} delivery lines dropped")
    finally:
        if stalled.poll() is None:
            stalled.kill()
            stalled.communicate(timeout=10)
        for node in (late, publisher):
            if node is not None:
                node.stop()


class _Undescribed(io.TextIOWrapper):
    """A stream over a pipe that does not say its descriptor, as a terminal's wrapper or a
    file would not be written directly: the writer takes its thread-only path."""

    def fileno(self) -> int:
        raise io.UnsupportedOperation("fileno")


@pytest.mark.parametrize("path", ["direct", "thread"])
def test_the_writer_drops_only_droppable_lines_and_never_holds_the_exit(path: str) -> None:
    """The buffer's rule on a real pipe nobody reads, on both paths (lines written straight
    to a non-blocking pipe, and every line through the thread): droppable lines go past the
    limit, answers stay; closing gives up after its timeout instead of blocking the exit."""
    import os

    from pubmesh.net.output import LineWriter

    read_end, write_end = os.pipe()
    # the pipe is full before the writer starts (lines of p's up to EAGAIN): a pipe that
    # nobody reads is full whatever the scheduler does; letting the writer fill it raced the
    # thread on a loaded machine (drops began in the buffer while the pipe still had room,
    # and the answers then fitted)
    os.set_blocking(write_end, False)
    prefilled = 0
    try:
        while os.write(write_end, b"p" * 99 + b"\n") == 100:
            prefilled += 1
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    if path == "direct":
        stream: io.TextIOWrapper = os.fdopen(write_end, "w")
    else:
        stream = _Undescribed(io.BufferedWriter(io.FileIO(write_end, "w")), write_through=True)
    writer = LineWriter(stream, lambda n: f"lagged {n}", limit=4096)
    assert os.get_blocking(write_end) is (path == "thread"), "the direct path is non-blocking"
    try:
        kept = 0
        deadline = time.monotonic() + 10
        while writer.dropped < 2000:  # until the buffer is full and has dropped lines
            assert time.monotonic() < deadline, "the writer never had to drop a line"
            kept += sum(writer.write("d" * 99, droppable=True) for _ in range(100))
            time.sleep(0.001)
        answers = sum(writer.write("a" * 99) for _ in range(100))
        assert answers == 100, "an answer was dropped"
        started = time.monotonic()
        assert writer.close(timeout=0.5) is False, "a pipe nobody reads cannot take it all"
        assert time.monotonic() - started < 2.0
        # the reader comes back: every answer is there, every droppable line kept, and the
        # drops are said in lagged lines that add up
        text = b""
        os.set_blocking(read_end, False)
        deadline = time.monotonic() + 10
        while True:
            finished = writer.finished
            try:
                text += os.read(read_end, 1 << 16)
            except BlockingIOError:
                if finished:
                    break
                assert time.monotonic() < deadline, "the writer never finished"
                time.sleep(0.01)
        lines = text.decode().splitlines()
        assert lines.count("a" * 99) == 100 and lines.count("d" * 99) == kept
        assert lines.count("p" * 99) == prefilled > 0
        said = [int(line.split()[1]) for line in lines if line.startswith("lagged ")]
        assert sum(said) == writer.dropped and len(said) == writer.episodes, (said, writer.dropped)
        assert lines[-1].startswith("lagged "), "the last drops are said at the close"
        assert os.get_blocking(write_end), "the descriptor is given back blocking at the end"
    finally:
        os.close(read_end)
        stream.close()


@pytest.mark.parametrize("shared", [False, True])
def test_stdout_shared_with_stderr_stays_blocking(shared: bool) -> None:
    """Lines go straight to a non-blocking stdout pipe, but not when stderr is the same pipe
    (``2>&1``): its non-blocking mode would be stderr's too, and an error message written to a
    full pipe would fail. A real process with its stdout on a pipe, stderr there or not."""
    code = (
        "import os, sys\n"
        "from pubmesh.net.output import LineWriter\n"
        "writer = LineWriter(sys.stdout, str)\n"
        "blocking = os.get_blocking(1)\n"
        "writer.write('a line')\n"
        "assert writer.close(timeout=5.0)\n"
        "print(f'blocking {blocking}', file=sys.stderr, flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if shared else subprocess.PIPE,
        env=node_env(),
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result
    said = result.stdout + (result.stderr or "")
    assert "a line\n" in said
    assert f"blocking {shared}" in said, said
