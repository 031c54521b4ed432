"""An insider's flood of invented IHAVE ids costs its target bounded memory.

Before, 3 MB of invented ids grew the target by 159 MB for 90 s and made it send ~75,000 GRAFT
requests: Plumtree kept every announcement of a message it had not received, with a timer,
until ``id_retention``. Now each neighbour holds at most ``max_announced`` announcements, and
an id nobody sends is forgotten once its announcers were asked (:mod:`pubmesh.proto.gossip.
plumtree`, bounds).

Real processes: a target node and an honest publisher in one topic swarm, and an insider that
holds the cluster key, completes the handshake and sends 3 MB of IHAVEs for ids that do not
exist. Checked: the target's resident memory grows by less than 16 MiB, it holds at most
``max_announced`` missing ids, it counts the ignored announcements, and it delivers every
publication of the honest node sent during the flood.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

import pytest

from pubmesh.net import codec
from pubmesh.net.address import node_id
from pubmesh.net.transport import NetConfig
from pubmesh.proto.gossip.hyparview import Join
from pubmesh.proto.gossip.params import GossipParams
from pubmesh.proto.gossip.plumtree import IHave
from support.hostile import KEY, handshake
from support.netnode import NodeProcess, publish_until_delivered, real_stacks

pytestmark = [
    pytest.mark.xdist_group("net_ihave_flood"),
    pytest.mark.skipif("gossip" not in real_stacks(), reason="a gossip build"),
]
TOPIC = "news"
#: ids per IHAVE frame, and frames: 300,000 invented ids, ~3 MB of msgpack
PER_FRAME = 1000
FRAMES = 300
#: the id the insider claims (no node listens there: the target answers on its connection)
INSIDER = node_id("127.0.0.1", 9)


def _rss(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _drain(sock: socket.socket, stop: threading.Event) -> None:
    """Read (and drop) what the target sends us, so that its GRAFTs never fill a buffer."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            if not sock.recv(1 << 16):
                return
        except TimeoutError:
            continue
        except OSError:
            return


def test_an_ihave_flood_of_invented_ids_costs_bounded_memory(tmp_path: Path) -> None:
    target = NodeProcess(
        ["--stack", "gossip", "--listen", "127.0.0.1:0", "--subscribe", TOPIC],
        log=tmp_path / "target.log",
    )
    honest = NodeProcess(
        ["--stack", "gossip", "--listen", "127.0.0.1:0", "--contact", target.address,
         "--subscribe", TOPIC],
        log=tmp_path / "honest.log",
    )  # fmt: skip
    host, port = target.address.split(":")
    insider = socket.create_connection((host, int(port)))
    stop = threading.Event()
    try:
        publish_until_delivered(honest, [target], TOPIC, 30)
        sealer = handshake(insider, KEY, INSIDER)
        threading.Thread(target=_drain, args=(insider, stop), daemon=True).start()
        # a member of the swarm, as the insider of the report was: Plumtree hears IHAVEs over
        # active links only
        tag, payload = codec.encode(Join(topic=TOPIC))
        insider.sendall(sealer.seal(tag, payload, time.time()))
        deadline = time.monotonic() + 10
        while INSIDER not in target.command({"op": "neighbors"})["neighbors"][TOPIC]:
            assert time.monotonic() < deadline, "the insider's Join was not taken"
            time.sleep(0.1)
        before = _rss(target.proc.pid)
        rng = random.Random(20261128)
        sent_bytes = 0
        during: set[int] = set()
        peak = before
        used = 0  # the most the target counted against its memory budget
        flood_started = time.monotonic()
        for frame in range(FRAMES):
            ids = tuple((rng.getrandbits(63), 0) for _ in range(PER_FRAME))
            tag, payload = codec.encode(IHave(topic=TOPIC, announcements=ids))
            insider.sendall(sealer.seal(tag, payload, time.time()))
            sent_bytes += len(payload)
            if frame % 30 == 0:
                during.add(
                    honest.command({"op": "publish", "topic": TOPIC, "payload": "d"})["pub_id"]
                )
                peak = max(peak, _rss(target.proc.pid))
                memory = target.command({"op": "stats"})["stats"]["memory"]
                used = max(used, memory["used"])
        deadline = time.monotonic() + 20
        while not during <= target.deliveries():
            assert time.monotonic() < deadline, "the target stopped delivering under the flood"
            peak = max(peak, _rss(target.proc.pid))
            time.sleep(0.1)
        time.sleep(1.0)
        peak = max(peak, _rss(target.proc.pid))
        stats = target.command({"op": "stats"})["stats"]
        flood_seconds = time.monotonic() - flood_started
        counters = stats["protocol"]["counters"]
        grown = peak - before
        params = GossipParams()
        budget = stats["memory"]["budget"]
        assert budget == NetConfig().memory_budget
        limit = params.max_announced
        print(
            f"IHAVE flood: {sent_bytes / 1e6:.1f} MB of invented ids; the target grew by "
            f"{grown / 2**20:.1f} MiB at peak, ignored {counters['ihave_over_limit']:,} "
            f"announcements, held {counters['missing_ids']} missing ids at the end; "
            f"its budget counted {used / 2**20:.2f} MiB at most of {budget / 2**20:.0f} MiB"
        )
        assert sent_bytes >= 2_500_000
        assert grown < 16 * 2**20, f"the target grew by {grown / 2**20:.1f} MiB"
        assert counters["missing_ids"] <= limit, counters
        # what the node counts against its budget stayed under it, and counts the ids' state
        assert 0 < used <= budget, (used, budget)
        assert stats["memory"]["used"] >= counters["held_bytes"] > 0, (stats["memory"], counters)
        # a neighbour's slot frees when its announcement's GRAFT goes out, ihave_timeout1 after
        # it came: over the flood at most limit per ihave_timeout1, beyond the first limit
        accepted = FRAMES * PER_FRAME - counters["ihave_over_limit"]
        most = limit * (1 + flood_seconds / params.ihave_timeout1)
        assert accepted <= most, (accepted, most, flood_seconds, counters)
    finally:
        stop.set()
        insider.close()
        honest.stop()
        target.stop()
