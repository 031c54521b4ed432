"""Per-hop cost: frames per second one pubmesh node forwards, beside raw asyncio framing.

Issue 16 item 3. One process is the node under test; this process plays its two neighbours:

* **S**, the source: after the handshake it sends Gossip frames (Henriques & Pamplona's GOSSIP,
  100-byte
  payloads, each a new publication) as fast as the window allows;
* **D**, the sink: it counts the Gossip frames the node forwards to it.

Both are cheap on purpose, so the node is the bottleneck: S seals its frames before the clock
starts and D only reads the length prefix and the type tag of what it gets (no MAC check, no
decoding). The node is a real :class:`pubmesh.net.runtime.NodeRuntime` of the gossip stack,
over TCP on 127.0.0.1, with the cluster key, subscribed to the topic, tracing its deliveries as
a cluster node does (``--no-message-trace``). S and D become its HyParView neighbours with a
high-priority NEIGHBOR; with ``tree = "plumtree"`` both are eager and stay so (D never prunes),
so each GOSSIP from S costs the node exactly one forward: verify the MAC, decode, handle
(deliver, push), encode, seal, write.

The reference, in the same run and with the same driver, is a raw asyncio forwarder: a
``Protocol`` that cuts the byte stream into length-prefixed frames and writes each one to the
other connection, coalesced per read. That is the floor of framed forwarding in asyncio on this
machine; the ratio node ÷ raw is the figure (it holds across machines where an absolute rate
does not).

    .venv/bin/python bench/bench_hop.py [--seconds 5] [--window 512] [--profile FILE]
    .venv/bin/python bench/bench_hop.py --uvloop        # the node and the reference on uvloop
    .venv/bin/python bench/bench_hop.py --compiled      # the node from make compiled's build
    .venv/bin/python bench/bench_hop.py --paced 400     # also one frame per wake-up, 400/s

``--profile FILE`` runs the node under cProfile and writes its stats (``python -m pstats``).

``--paced RATE`` adds a third measurement: S sends one frame at a time, RATE frames per second,
so the node wakes up for every frame, as a node of a cluster below saturation does (a 32-node
cluster at 300 publications/s hands each node one frame every 3 ms or so). Its figure is the
node's CPU per frame there, beside the saturated figure: the difference is what a wake-up
costs (the event loop's turn, the system calls, and a process whose caches went cold while it
slept), the main cost of a cluster node below saturation (issue 16).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
#: where pubmesh is imported from: src, or build/compiled for the node of a --compiled run
sys.path.insert(0, os.environ.get("PUBMESH_BENCH_SOURCE", str(ROOT / "src")))

from pubmesh.net import security  # noqa: E402
from pubmesh.net.address import node_id  # noqa: E402
from pubmesh.net.codec import encode  # noqa: E402
from pubmesh.net.framing import LENGTH  # noqa: E402
from pubmesh.proto.core import MESSAGE_TAGS  # noqa: E402
from pubmesh.proto.gossip.hyparview import Neighbor  # noqa: E402
from pubmesh.proto.gossip.plumtree import Gossip  # noqa: E402

HOST = "127.0.0.1"
TOPIC = "hop"
PAYLOAD = 100
KEY_TEXT = "b3e1c07a94d258f6e0a7c3d91b4f862e"
GOSSIP_TAG = MESSAGE_TAGS[Gossip]
#: frames S writes at a time
BATCH = 64
_TAG = struct.Struct(">H")


# --------------------------------------------------------------------------------------------
# The node under test (a child process)
# --------------------------------------------------------------------------------------------
async def serve_node(port_file: Path, trace_dir: Path, use_uvloop: bool) -> None:
    from pubmesh.net.runtime import NodeRuntime
    from pubmesh.net.security import as_key
    from pubmesh.proto.gossip.params import GossipParams

    params = GossipParams(tree="plumtree")
    node = NodeRuntime(
        "gossip",
        key=as_key(KEY_TEXT),
        listen=(HOST, 0),
        params=params,
        seed=1,
        trace_dir=trace_dir,
        trace_messages=False,
    )
    await node.start()
    node.subscribe(TOPIC)
    # as a cluster's node process does after its start (pubmesh.net.node_cli): what the imports
    # made stays out of the collector's sight
    gc.freeze()
    port_file.write_text(str(node.node_id & 0xFFFF))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    import signal

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await node.close(linger=0.0)
    print(f"deliveries {node.deliveries}", flush=True)


def node_main(port_file: Path, trace_dir: Path, profile: str | None, use_uvloop: bool) -> None:
    runner = _runner(use_uvloop)
    if profile is None:
        runner(serve_node(port_file, trace_dir, use_uvloop))
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        runner(serve_node(port_file, trace_dir, use_uvloop))
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


# --------------------------------------------------------------------------------------------
# The raw reference (a child process)
# --------------------------------------------------------------------------------------------
#: the raw forwarder's open connections
RAW_PEERS: list[RawForwarder] = []


class RawForwarder(asyncio.Protocol):
    """Cuts frames by their length prefix and writes each to every other connection."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the interface without the base class
        self.transport = cast(asyncio.Transport, transport)
        self.buffer = bytearray()
        RAW_PEERS.append(self)

    def data_received(self, data: bytes) -> None:
        # FrameBuffer's loop, inlined: its call and copy per frame cost this reference a fifth
        # of its rate (bench_hop, 433k against 556k frames/s), and the reference is the floor
        buffer = self.buffer
        buffer += data
        frames = []
        offset = 0
        while len(buffer) - offset >= 4:
            (length,) = LENGTH.unpack_from(buffer, offset)
            stop = offset + 4 + length
            if stop > len(buffer):
                break
            frames.append(bytes(buffer[offset:stop]))
            offset = stop
        del buffer[:offset]
        if frames:
            out = b"".join(frames)
            for peer in RAW_PEERS:
                if peer is not self:
                    peer.transport.write(out)

    def connection_lost(self, exc: Exception | None) -> None:
        RAW_PEERS.remove(self)


async def serve_raw(port_file: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(RawForwarder, HOST, 0)
    port_file.write_text(str(server.sockets[0].getsockname()[1]))
    stop = asyncio.Event()
    import signal

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    server.close()


def _runner(use_uvloop: bool):  # type: ignore[no-untyped-def]
    if use_uvloop:
        import uvloop

        return uvloop.run
    return asyncio.run


# --------------------------------------------------------------------------------------------
# The driver: S and D
# --------------------------------------------------------------------------------------------
class Link(asyncio.Protocol):
    """One of the driver's connections to the forwarder: handshake (pubmesh mode), then raw."""

    def __init__(self, me: int) -> None:
        self.me = me
        self.buffer = bytearray()
        self.frames: asyncio.Queue[bytes] = asyncio.Queue()
        self.counting = False
        self.gossip = 0
        self.drained = asyncio.Event()
        self.drained.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the interface without the base class
        self.transport = cast(asyncio.Transport, transport)
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def pause_writing(self) -> None:
        self.drained.clear()

    def resume_writing(self) -> None:
        self.drained.set()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        offset = 0
        while len(buffer) - offset >= 4:
            (length,) = LENGTH.unpack_from(buffer, offset)
            stop = offset + 4 + length
            if stop > len(buffer):
                break
            if self.counting:
                if length >= 3 and _TAG.unpack_from(buffer, offset + 5)[0] == GOSSIP_TAG:
                    self.gossip += 1
            else:
                self.frames.put_nowait(bytes(buffer[offset:stop]))
            offset = stop
        del buffer[:offset]


async def dial(port: int, me: int) -> Link:
    loop = asyncio.get_running_loop()
    _t, link = await loop.create_connection(lambda: Link(me), HOST, port)
    return link


async def handshake(link: Link, key: security.ClusterKey) -> tuple[security.Sealer, int]:
    """The dialer's side of pubmesh's handshake (security module docstring)."""
    nonce = security.new_nonce()
    link.transport.write(security.hello(link.me, nonce))
    frame = await asyncio.wait_for(link.frames.get(), 10)
    acceptor, their_nonce = security.parse_challenge(frame[4:])
    script = security.transcript(nonce, their_nonce, link.me, acceptor)
    # the dialer proves first; the acceptor's proof comes in its CONFIRM
    link.transport.write(security.proof_frame(key.proof(security.DIALER_LABEL, script)))
    confirm = await asyncio.wait_for(link.frames.get(), 10)
    proof = security.parse_confirm(confirm[4:])
    security.verify(key.proof(security.ACCEPTOR_LABEL, script), proof, "node")
    send_key, _receive_key = security.session_keys(key, script)
    return security.Sealer(send_key), acceptor


async def drive(
    port: int, pubmesh: bool, seconds: float, window: int, paced: float = 0.0
) -> dict[str, float]:
    """S sends GOSSIP frames through the forwarder on ``port`` to D; frames/s D receives.
    With ``paced`` > 0, one frame at a time, ``paced`` per second."""
    loop = asyncio.get_running_loop()
    # ids that are addresses, as the node expects (it never needs to dial them: the driver's
    # connections stay open and carry its traffic both ways)
    listeners = [await loop.create_server(asyncio.Protocol, HOST, 0) for _ in range(2)]
    ids = [node_id(HOST, server.sockets[0].getsockname()[1]) for server in listeners]
    sink = await dial(port, ids[1])
    source = await dial(port, ids[0])
    count = 400_000
    payload = os.urandom(PAYLOAD)
    if pubmesh:
        key = security.as_key(KEY_TEXT)
        sink_sealer, _ = await handshake(sink, key)
        sealer, _node = await handshake(source, key)
        for link, link_sealer in ((sink, sink_sealer), (source, sealer)):
            tag, body = encode(Neighbor(topic=TOPIC, high_priority=True))
            link.transport.write(link_sealer.seal(tag, body, time.time()))
        # wait for both NEIGHBORREPLY (accepted), then count from here on
        for link in (sink, source):
            await asyncio.wait_for(link.frames.get(), 10)
        await asyncio.sleep(0.5)
        frames = []
        for i in range(count):
            tag, body = encode(Gossip(topic=TOPIC, pub_id=1 + i, round=0, payload=payload))
            frames.append(sealer.seal(tag, body, 0.0))
    else:
        # the raw forwarder looks at nothing but the length: one batch, sent again and again
        body = struct.pack(">BHQd", 1, GOSSIP_TAG, 0, 0.0) + payload + bytes(16)
        frames = [LENGTH.pack(len(body)) + body] * BATCH
    sink.counting = True
    sink.gossip = 0
    sent = 0
    started = loop.time()
    deadline = started + seconds
    raw_batch = b"".join(frames) if not pubmesh else b""
    if paced > 0:
        next_at = started
        while loop.time() < deadline and sent < count:
            source.transport.write(frames[sent] if pubmesh else frames[0])
            sent += 1
            next_at += 1.0 / paced
            await asyncio.sleep(max(0.0, next_at - loop.time()))
        await asyncio.sleep(0.2)  # the last frames' way through
    while loop.time() < deadline and sent < count:
        if sent - sink.gossip < window:
            if pubmesh:
                source.transport.write(b"".join(frames[sent : sent + BATCH]))
            else:
                source.transport.write(raw_batch)
            sent += BATCH
            await source.drained.wait()
        await asyncio.sleep(0)
    elapsed = loop.time() - started
    received = sink.gossip
    for link in (sink, source):
        link.transport.close()
    for server in listeners:
        server.close()
    if pubmesh and sent >= count:
        raise RuntimeError(f"the driver ran out of frames ({count}); raise count")
    return {"frames": received, "seconds": elapsed, "per_second": received / elapsed}


def measure(kind: str, args: argparse.Namespace, paced: float = 0.0) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pubmesh-hop-") as tmp:
        port_file = Path(tmp) / "port"
        command = [sys.executable, __file__, f"--child={kind}", f"--port-file={port_file}"]
        if args.uvloop:
            command.append("--uvloop")
        if kind == "node":
            command.append(f"--trace-dir={Path(tmp) / 'trace'}")
            if args.profile:
                command.append(f"--profile={args.profile}")
        source = ROOT / "build" / "compiled" if args.compiled and kind == "node" else ROOT / "src"
        env = dict(os.environ, PYTHONPATH=str(source), PUBMESH_BENCH_SOURCE=str(source))
        child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        try:
            for _ in range(300):
                if port_file.exists() and port_file.read_text():
                    break
                if child.poll() is not None:
                    raise RuntimeError(f"the {kind} process exited with {child.returncode}")
                time.sleep(0.05)
            port = int(port_file.read_text())
            cpu0 = _child_cpu(child.pid)
            figures = asyncio.run(drive(port, kind == "node", args.seconds, args.window, paced))
            figures["child_cpu"] = _child_cpu(child.pid) - cpu0
        finally:
            child.terminate()
            out, _ = child.communicate(timeout=60)
        if kind == "node":
            figures["delivered"] = float(out.split()[-1]) if out.strip() else 0.0
        return figures


def cpu_per_frame(rounds: list[dict[str, float]]) -> float:
    """The forwarder's CPU seconds per frame, best of the rounds."""
    return min(r["child_cpu"] / max(r["frames"], 1) for r in rounds)


def _child_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring window per system")
    parser.add_argument("--window", type=int, default=512, help="frames in flight S -> D")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per system")
    parser.add_argument("--profile", help="run the node under cProfile, stats to this file")
    parser.add_argument("--uvloop", action="store_true", help="run the forwarders on uvloop")
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="run the node from build/compiled (make compiled: the mypyc build of the hot modules)",
    )
    parser.add_argument(
        "--paced",
        type=float,
        default=0.0,
        metavar="RATE",
        help="also measure the node fed one frame per wake-up, RATE frames/s (e.g. 400)",
    )
    parser.add_argument("--child", choices=["node", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--port-file", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "node":
        node_main(Path(args.port_file), Path(args.trace_dir), args.profile, args.uvloop)
        return 0
    if args.child == "raw":
        _runner(args.uvloop)(serve_raw(Path(args.port_file)))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.uvloop:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            console.print("--uvloop needs uvloop (PyPI): .venv/bin/pip install uvloop")
            return 2
    if args.compiled and not list((ROOT / "build" / "compiled").rglob("*.so")):
        console.print(
            "--compiled runs the node from build/compiled, which has no build: make compiled"
        )
        return 2
    results: dict[str, list[dict[str, float]]] = {"node": [], "raw": []}
    for round_ in range(args.rounds):
        for kind in ("raw", "node"):
            console.print(f"round {round_ + 1}/{args.rounds}: {kind} ...", end=" ")
            figures = measure(kind, args)
            results[kind].append(figures)
            console.print(f"{figures['per_second']:,.0f} frames/s")
    paced: list[dict[str, float]] = []
    if args.paced > 0:
        for round_ in range(args.rounds):
            console.print(f"paced {args.paced:g}/s, round {round_ + 1}: node ...", end=" ")
            paced.append(measure("node", args, args.paced))
            console.print(f"{paced[-1]['per_second']:,.0f} frames/s")
    table = Table(title=f"frames one process forwards per second (S -> X -> D, {PAYLOAD} B)")
    for column in ("forwarder", "frames/s (best)", "frames/s (all rounds)", "CPU s / 1k frames"):
        table.add_column(column, justify="right" if column != "forwarder" else "left")
    best = {}
    results["paced"] = paced
    kinds = [("raw", "raw asyncio framing"), ("node", "pubmesh gossip node")]
    if paced:
        kinds.append(("paced", f"pubmesh gossip node, one frame per wake-up ({args.paced:g}/s)"))
    for kind, label in kinds:
        rows = results[kind]
        best[kind] = max(r["per_second"] for r in rows)
        cpu = cpu_per_frame(rows) * 1000
        table.add_row(
            label,
            f"{best[kind]:,.0f}",
            ", ".join(f"{r['per_second']:,.0f}" for r in rows),
            f"{cpu:.4f}",
        )
    console.print(table)
    for figures in results["node"] + paced:
        # every GOSSIP forwarded was a first copy the node delivered to its own subscription
        if figures["delivered"] < figures["frames"]:
            console.print(
                f"[red]the node delivered {figures['delivered']:,.0f} publications but forwarded "
                f"{figures['frames']:,.0f}[/red]"
            )
            return 1
    loop_name = ("uvloop" if args.uvloop else "asyncio") + (", compiled" if args.compiled else "")
    console.print(
        f"node ÷ raw: [bold]{best['node'] / best['raw']:.3f}[/bold] "
        f"({loop_name}, Python {platform.python_version()}, {os.cpu_count()} cores)"
    )
    if paced:
        cpu = {k: cpu_per_frame(results[k]) * 1e6 for k in ("node", "paced")}
        console.print(
            f"node CPU per frame: {cpu['node']:.0f} µs saturated, {cpu['paced']:.0f} µs one frame "
            f"per wake-up: a wake-up costs ~{cpu['paced'] - cpu['node']:.0f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
