"""A node's data directory, with real node processes.

Before ``--data-dir`` a node started again came back empty: another port (so another node
id), no contacts, no subscriptions, and a duplicate filter that had forgotten every
publication it delivered. Now a node killed with SIGKILL and started again on its directory
is the same node, rejoins without ``--contact``, subscribes again, and does not deliver a copy
of a publication it delivered in its last life (sent to it again by hand over the cluster
key, as a peer's late retransmission would). What was published while it was down comes
from the topic's history when it resubscribes (everything since its last delivery), marked
replayed, and what it had delivered is offered again and refused. And a directory or file
the node must not trust is refused in one line: a corrupt file, another program's SQLite
database, a directory others can write.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pubmesh.net.codec import encode
from pubmesh.net.store import DB_FILE
from pubmesh.proto.gossip.plumtree import Gossip
from support.disk import fill
from support.hostile import KEY, handshake
from support.netnode import NodeProcess, node_env, publish_until_delivered

pytestmark = pytest.mark.xdist_group("net_store")


def _node(tmp_path: Path, name: str, *extra: str) -> NodeProcess:
    return NodeProcess(
        ["--stack", "gossip", "--listen", "127.0.0.1:0", *extra], log=tmp_path / f"{name}.log"
    )


def _send_copy(node: NodeProcess, pub_id: int, payload: bytes) -> None:
    """A Gossip copy of ``pub_id`` on "news", sent to ``node`` over a link of our own."""
    host, port = node.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sealer = handshake(sock, KEY, 0x7F000001_0000 + 999)
        tag, body = encode(Gossip(topic="news", pub_id=pub_id, round=1, payload=payload))
        sock.sendall(sealer.seal(tag, body, time.time()))
        time.sleep(0.5)


def test_a_node_killed_and_started_again_on_its_directory_is_itself_again(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    contact = _node(tmp_path, "contact", "--subscribe", "news")
    member = _node(
        tmp_path, "member", "--contact", contact.address, "--data-dir", str(data),
        "--subscribe", "news",
    )  # fmt: skip
    again = None
    try:
        probes = publish_until_delivered(contact, [member], "news", 20)
        delivered = sorted(probes & member.deliveries())
        first = (member.node_id, member.address)
        time.sleep(0.2)  # no commit is waited for: SIGKILL at any moment
        member.stop(signal.SIGKILL)
        # published while it is down: it asks the swarm's history for them when it comes back
        missed = {
            contact.command({"op": "publish", "topic": "news", "payload": f"m{i}"})["pub_id"]
            for i in range(5)
        }

        # no --contact, no --subscribe, any port: the directory says all three
        again = _node(tmp_path, "again", "--data-dir", str(data))
        assert (again.node_id, again.address) == first
        stats = again.command({"op": "stats"})["stats"]
        assert stats["subscriptions"] == ["news"], stats
        publish_until_delivered(contact, [again], "news", 20, "it did not rejoin")
        deadline = time.monotonic() + 10
        while not missed <= again.deliveries():
            assert time.monotonic() < deadline, (
                f"what was published while it was down never came: {sorted(missed)}, "
                f"delivered {sorted(again.deliveries())}"
            )
            time.sleep(0.1)
        replayed = {
            r["pub_id"] for r in again.records if r.get("event") == "deliver" and r.get("replayed")
        }
        assert missed <= replayed, "the gap was filled live, not from the history"
        previous = member.deliveries()  # its last life's, all of them
        assert not previous & again.deliveries(), "delivered in both lives"
        # the history offered every one of them again (the contact published them all, 30 s
        # ago at most): each refused as delivered in the last life
        refused = again.command({"op": "stats"})["stats"]["duplicates_across_lives"]
        assert refused == len(previous), (refused, len(previous))

        # a copy of what it delivered in its last life is not delivered again; a new one is
        mark = again.mark()
        _send_copy(again, delivered[0], b"p")
        _send_copy(again, delivered[0] ^ 1, b"new")
        got = [r["pub_id"] for r in again.records[mark:] if r.get("event") == "deliver"]
        assert delivered[0] ^ 1 in got, "the hand-made link delivers nothing at all"
        assert delivered[0] not in got, "a publication was delivered in two lives"
        # (the replay put the id back in the stack's own filter, which drops this copy first)
        stats = again.command({"op": "stats"})["stats"]
        assert stats["duplicates_across_lives"] == refused

        done = subprocess.run(
            [sys.executable, "-m", "pubmesh", "data", "inspect", str(data)],
            capture_output=True, text=True, timeout=60, env=node_env(),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"address        {first[1]}" in done.stdout
        assert contact.address in done.stdout and "\n  news" in done.stdout
    finally:
        for node in (again, member, contact):
            if node is not None:
                node.stop()


def _refused(tmp_path: Path, data: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "node", "--stack", "gossip", "--listen",
         "127.0.0.1:0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60, env=node_env(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_directory_or_file_the_node_must_not_trust_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    # a file that is not SQLite at all
    junk = tmp_path / "junk"
    junk.mkdir(mode=0o700)
    (junk / DB_FILE).write_bytes(b"not a database, " * 512)
    line = _refused(tmp_path, junk)
    assert f"{junk / DB_FILE}: not a pubmesh data file" in line and "move it away" in line

    # another program's SQLite database
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    with sqlite3.connect(foreign / DB_FILE) as db:
        db.execute("CREATE TABLE accounts (name TEXT, balance REAL)")
    line = _refused(tmp_path, foreign)
    assert "a SQLite database of something else, not pubmesh's" in line
    with sqlite3.connect(foreign / DB_FILE) as db:  # left as it was
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("accounts",)]

    # ours, but damaged: a page overwritten in the middle of the file
    damaged = tmp_path / "damaged"
    member = _node(tmp_path, "member", "--data-dir", str(damaged), "--subscribe", "news")
    member.stop()
    raw = bytearray((damaged / DB_FILE).read_bytes())
    raw[4096:8192] = b"\xa5" * 4096
    (damaged / DB_FILE).write_bytes(bytes(raw))
    line = _refused(tmp_path, damaged)
    assert str(damaged / DB_FILE) in line and "move it away" in line

    # ours, with a planted stack state (the stack's durable marks) that is not a JSON object
    planted = tmp_path / "planted"
    member = _node(tmp_path, "planter", "--data-dir", str(planted), "--subscribe", "news")
    member.stop()
    with sqlite3.connect(planted / DB_FILE) as db:
        db.execute("INSERT OR REPLACE INTO meta VALUES ('stack_state', '[1, 2]')")
    line = _refused(tmp_path, planted)
    assert f"{planted / DB_FILE}: its stack state is not a JSON object" in line

    # a topic history planted in a gossip node's directory (gossip keeps none on disk)
    with sqlite3.connect(planted / DB_FILE) as db:
        db.execute("DELETE FROM meta WHERE key = 'stack_state'")
        db.execute("INSERT INTO retained VALUES ('news', 7, 1.0, x'00', NULL, NULL)")
    line = _refused(tmp_path, planted)
    assert "the topic history kept there cannot be gossip's" in line, line

    # a directory others can write: a database planted there would be the node's memory
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    line = _refused(tmp_path, open_dir)
    assert "writable by others" in line and "chmod 700" in line
    assert not (open_dir / DB_FILE).exists()


def test_a_full_disk_under_the_data_directory_loses_no_delivery(tmp_path: Path) -> None:
    """The directory on a 2 MiB tmpfs of the node's own (a private mount namespace, as
    test_net_diskfull.py does for traces), filled through /proc/PID/root: every publication is
    still delivered, the failure is said once and counted, and once there is room the writes
    that waited are made."""
    assert os.geteuid() == 0, "a private mount namespace needs root"
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    contact = _node(tmp_path, "contact", "--subscribe", "news")
    private_fs = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        'mount -t tmpfs -o size=2m,mode=0700 pubmesh-full "$0" && exec "$@"', str(mount),
    ]  # fmt: skip
    node = NodeProcess(
        ["--stack", "gossip", "--listen", "127.0.0.1:0", "--contact", contact.address,
         "--data-dir", str(mount / "data"), "--subscribe", "news"],
        log=tmp_path / "node.log", prefix=private_fs,
    )  # fmt: skip
    inside = Path(f"/proc/{node.proc.pid}/root") / str(mount).lstrip("/")
    try:
        publish_until_delivered(contact, [node], "news", 20)
        mark = node.mark()
        fill(inside / "filler")
        sent = {
            contact.command({"op": "publish", "topic": "news", "payload": "x" * 200})["pub_id"]
            for _ in range(60)
        }
        deadline = time.monotonic() + 20
        while not sent <= node.deliveries():
            assert time.monotonic() < deadline, "deliveries were lost to a full disk"
            time.sleep(0.1)
        said = [
            r for r in node.records[mark:] if r.get("event") == "net" and r["kind"] == "net.store"
        ]
        assert len(said) == 1, said
        store = node.command({"op": "stats"})["stats"]["store"]
        assert store["failures"] >= 1 and store["pending"] > 0, store
        assert "full" in store["problem"], store

        (inside / "filler").unlink()
        contact.command({"op": "publish", "topic": "news", "payload": "room again"})
        deadline = time.monotonic() + 10
        while (store := node.command({"op": "stats"})["stats"]["store"])["pending"]:
            assert time.monotonic() < deadline, f"the writes that waited were not made: {store}"
            time.sleep(0.2)
        assert store["problem"] is None, store
    finally:
        node.stop()
        contact.stop()


def test_the_stack_state_is_kept_at_each_commit(tmp_path: Path) -> None:
    """StackNode.durable() is written with the group commit and read back at the next start
    (brokertree's high-water marks: tests/sim/test_durable_marks.py)."""
    from pubmesh.net.store import Store

    directory = tmp_path / "data"
    store = Store(directory)
    store.set_state('{"last": [[5, 12.5, 3]]}')
    assert store.commit()
    store.close()
    again = Store(directory)
    assert again.remembered().state == {"last": [[5, 12.5, 3]]}
    again.close()


def test_the_retained_history_is_kept_by_its_bounds_and_an_old_layout_is_upgraded(
    tmp_path: Path,
) -> None:
    """The retained publications are written with the group commit, read back oldest first
    with their attributes and marks, and forgotten past their retention's count and age at
    the prune; a directory of layout 1 (before the history was kept) gets its table."""
    from pubmesh.net.store import SCHEMA_VERSION, Store
    from pubmesh.proto.history import Retained, Retention

    now = [1000.0]
    store = Store(tmp_path / "data", clock=lambda: now[0])
    kept = Retention(count=3, seconds=100.0, max_bytes=1 << 20, topic="news")
    for i in range(5):  # ids with the top bit set too: SQLite's integers are signed
        item = Retained((1 << 63) + i, b"p%d" % i, 0.0, {"k": i} if i else None, [1.5, i])
        store.retained(kept, item, 990.0 + i)
    assert store.commit()  # the first commit prunes: the newest three are left
    rows = store.remembered().retained
    assert [(topic, r.pub_id, r.t) for topic, r in rows] == [
        ("news", (1 << 63) + i, 990.0 + i) for i in (2, 3, 4)
    ]
    assert rows[0][1].payload == b"p2" and rows[0][1].attributes == {"k": 2}
    assert rows[0][1].mark == [1.5, 2]
    now[0] = 1093.5  # past the next prune: older than 100 s goes
    store.retained(kept, Retained(99, b"new", 0.0), now[0])
    assert store.commit()
    assert [r.pub_id for _, r in store.remembered().retained] == [(1 << 63) + 4, 99]
    store.close()

    old = tmp_path / "old"
    Store(old).close()
    with sqlite3.connect(old / DB_FILE) as db:
        db.execute("DROP TABLE retained")
        db.execute("PRAGMA user_version = 1")
    upgraded = Store(old)
    assert upgraded.remembered().retained == []
    (version,) = upgraded._db.execute("PRAGMA user_version").fetchone()
    assert version == SCHEMA_VERSION == 2
    upgraded.close()


def test_a_chord_publisher_killed_and_started_again_still_answers_with_its_history(
    tmp_path: Path,
) -> None:
    """A chord publisher's retained publications are on its data directory: SIGKILLed after
    publishing and started again on it, it answers a late subscriber's history query with
    what it published in its last life, each with its original publish time."""
    data = tmp_path / "data"

    def chord(name: str, *extra: str) -> NodeProcess:
        return NodeProcess(
            ["--stack", "chord", "--listen", "127.0.0.1:0", *extra], log=tmp_path / f"{name}.log"
        )

    contact = chord("contact")
    publisher = chord("publisher", "--contact", contact.address, "--data-dir", str(data))
    again = None
    try:
        issued = time.time()
        past = {
            publisher.command({"op": "publish", "topic": "news", "payload": f"old {i}"})["pub_id"]
            for i in range(5)
        }
        time.sleep(0.5)  # their group commit (a write per loop turn) is long done
        publisher.stop(signal.SIGKILL)
        again = chord("again", "--data-dir", str(data))
        done = subprocess.run(
            [sys.executable, "-m", "pubmesh", "data", "inspect", str(data)],
            capture_output=True, text=True, timeout=60, env=node_env(),
        )  # fmt: skip
        assert "retained       5 publications" in done.stdout, done.stdout
        # the late subscriber asks once the restarted publisher is back on the ring
        deadline = time.monotonic() + 30
        got: dict[int, dict[str, object]] = {}
        while not past <= set(got):
            assert time.monotonic() < deadline, f"its history never came: {sorted(got)}"
            late = chord(f"late{len(got)}-{time.monotonic():.0f}", "--contact", contact.address)
            try:
                assert late.command("subscribe news --history all")["ok"] is True
                time.sleep(3.0)
                got = {
                    r["pub_id"]: r
                    for r in late.records
                    if r.get("event") == "deliver" and r.get("replayed")
                }
            finally:
                late.stop()
        assert set(got) == past, (sorted(got), sorted(past))
        for record in got.values():  # dated by its last life: before the restart
            assert issued - 0.01 <= float(record["published"]) <= issued + 1.0, record
    finally:
        for node in (again, publisher, contact):
            if node is not None:
                node.stop()
