"""Per-hop cost: frames per second one pubmesh node forwards, beside raw asyncio framing.

One process is the node under test; this process plays its two neighbours:

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
    .venv/bin/python bench/bench_hop.py --modes identity --rounds 1 --profile node.prof

``--profile FILE`` runs the node under cProfile and writes its stats (``python -m pstats``).

``--modes shared-key,identity`` (the default: both) measures the node in each link mode, so the
cost of security is known per node. In *identity* mode the node runs with a
certificate of a test authority made for the run; S and D hold certificates of the same
authority and talk TLS 1.3 to it, and every GOSSIP is a publication of a third member, P, that
S relays: signed by P beforehand (its id bound to P, P's certificate in the first frame), so
the node checks P's signature of every copy, as a node of a cluster does for every
publication it did not receive from its publisher (P never connects). The figure is the
node's CPU per forwarded publication in identity mode over the same in shared-key mode.

``--paced RATE`` adds a third measurement: S sends one frame at a time, RATE frames per second,
so the node wakes up for every frame, as a node of a cluster below saturation does (a 32-node
cluster at 300 publications/s hands each node one frame every 3 ms or so). Its figure is the
node's CPU per frame there, beside the saturated figure: the difference is what a wake-up
costs (the event loop's turn, the system calls, and a process whose caches went cold while it
slept), the main cost of a cluster node below saturation.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import socket
import ssl
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

from pubmesh.net import framing, security  # noqa: E402
from pubmesh.net.address import node_id  # noqa: E402
from pubmesh.net.codec import encode  # noqa: E402
from pubmesh.net.framing import (  # noqa: E402
    LENGTH,
    TAG_SIGNED,
)
from pubmesh.net.identity import (  # noqa: E402
    Identity,
    init_authority,
    issue,
    load_identity,
    signing_key,
)
from pubmesh.net.signing import Signer, credential_of  # noqa: E402
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
#: the link modes a node is measured in (module docstring); identity-burst: P's publications
#: come in bursts of ``--burst`` a loop turn, each burst one signature (a Merkle batch)
MODES = ("shared-key", "identity", "identity-burst")
#: publications S sends at most per measurement: shared-key frames cost nothing to make, an
#: identity mode frame a signature (about 25 µs), made before the clock starts
FRAMES = {"shared-key": 400_000, "identity": 80_000, "identity-burst": 200_000}
#: frames in flight S -> D by mode (``--window`` sets them all): with 512 an identity-mode node
#: waited for the driver's TLS half of the time, so its CPU per frame counted idle wake-ups
WINDOW = {"shared-key": 512, "identity": 4096, "identity-burst": 4096}


# --------------------------------------------------------------------------------------------
# The node under test (a child process)
# --------------------------------------------------------------------------------------------
async def serve_node(
    port_file: Path, trace_dir: Path, use_uvloop: bool, identity_dir: Path | None
) -> None:
    from pubmesh.net.runtime import NodeRuntime
    from pubmesh.net.security import as_key
    from pubmesh.proto.gossip.params import GossipParams

    params = GossipParams(tree="plumtree")
    identity = load_identity(identity_dir) if identity_dir is not None else None
    listen = (HOST, int(identity.address.rsplit(":", 1)[1])) if identity is not None else (HOST, 0)
    node = NodeRuntime(
        "gossip",
        key=None if identity is not None else as_key(KEY_TEXT),
        identity=identity,
        listen=listen,
        params=params,
        seed=1,
        trace_dir=trace_dir,
        trace_messages=False,
    )
    await node.start()
    node.subscribe(TOPIC)
    # as a cluster's node process does after its start (pubmesh.net.node.process): what the imports
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


def node_main(
    port_file: Path,
    trace_dir: Path,
    profile: str | None,
    use_uvloop: bool,
    identity_dir: Path | None,
) -> None:
    runner = _runner(use_uvloop)
    if profile is None:
        runner(serve_node(port_file, trace_dir, use_uvloop, identity_dir))
        return
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        runner(serve_node(port_file, trace_dir, use_uvloop, identity_dir))
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
                tag = _TAG.unpack_from(buffer, offset + 5)[0] & ~TAG_SIGNED if length >= 3 else 0
                if tag == GOSSIP_TAG:
                    self.gossip += 1
            else:
                self.frames.put_nowait(bytes(buffer[offset:stop]))
            offset = stop
        del buffer[:offset]


async def dial(port: int, me: int, tls: ssl.SSLContext | None = None) -> Link:
    loop = asyncio.get_running_loop()
    server_hostname = "" if tls is not None else None
    _t, link = await loop.create_connection(
        lambda: Link(me), HOST, port, ssl=tls, server_hostname=server_hostname
    )
    return link


async def handshake(link: Link, key: security.ClusterKey) -> tuple[framing.Sealer, int]:
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
    return framing.Sealer(send_key), acceptor


async def identity_handshake(link: Link) -> framing.TlsSealer:
    """The dialer's side in identity mode, once TLS is up: HELLO, then the node's CHALLENGE
    (TLS has checked both certificates)."""
    link.transport.write(security.hello(link.me, security.new_nonce()))
    frame = await asyncio.wait_for(link.frames.get(), 10)
    security.parse_challenge(frame[4:])
    return framing.TlsSealer()


def client_context(identity: Identity) -> ssl.SSLContext:
    """A member's TLS context towards the node: its own certificate, TLS 1.3."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(identity.cert_file, identity.key_file)
    return context


def signed_frames(publisher: Identity, count: int, payload: bytes, batch: int) -> list[bytes]:
    """``count`` GOSSIP frames of new publications of ``publisher``, signed as its node signs
    them (ids bound to it, its clock), ``batch`` publications a signature (a burst of that
    many published in one loop turn), its certificate in the first frame."""
    credential = credential_of(publisher.certificate, publisher.node)
    signer = Signer(publisher.node, signing_key(publisher), credential)
    sealer = framing.TlsSealer()
    frames = []
    for start in range(0, count, batch):
        messages = [
            Gossip(topic=TOPIC, pub_id=signer.new_pub_id(), round=0, payload=payload)
            for _ in range(min(batch, count - start))
        ]
        for message, (signed, _digest) in zip(messages, signer.sign_batch(messages), strict=True):
            der = credential.der if not frames else b""
            tag, body = encode(message)
            frames.append(sealer.seal(tag, body, 0.0, signed, der))
    return frames


async def drive(
    port: int,
    mode: str | None,
    seconds: float,
    window: int,
    paced: float = 0.0,
    members: dict[str, Identity] | None = None,
    burst: int = 1,
) -> dict[str, float]:
    """S sends GOSSIP frames through the forwarder on ``port`` to D; frames/s D receives.
    ``mode``: the node's link mode, None for the raw forwarder; ``members``: in identity mode,
    the identities of S, D and the publisher P. With ``paced`` > 0, one frame at a time,
    ``paced`` per second."""
    loop = asyncio.get_running_loop()
    pubmesh = mode is not None
    count = FRAMES[mode or "shared-key"]
    payload = os.urandom(PAYLOAD)
    identity = mode is not None and mode.startswith("identity")
    if identity:
        # signed before the links open: D says nothing, and the node takes a link that says
        # nothing for suspect_after (5 s) as a hung peer
        assert members is not None
        # the frames follow the NEIGHBOR on S's link: numbered from 1
        batch = burst if mode == "identity-burst" else 1
        frames = renumber(signed_frames(members["P"], count, payload, batch), first=1)
    # ids that are addresses, as the node expects (it never needs to dial them: the driver's
    # connections stay open and carry its traffic both ways)
    if identity:
        assert members is not None
        ids = [members["S"].node, members["D"].node]
        sink = await dial(port, ids[1], client_context(members["D"]))
        source = await dial(port, ids[0], client_context(members["S"]))
        listeners: list[asyncio.Server] = []
    else:
        listeners = [await loop.create_server(asyncio.Protocol, HOST, 0) for _ in range(2)]
        ids = [node_id(HOST, server.sockets[0].getsockname()[1]) for server in listeners]
        sink = await dial(port, ids[1])
        source = await dial(port, ids[0])
    if pubmesh:
        sealers: list[framing.Sealer | framing.TlsSealer] = []
        if identity:
            for link in (sink, source):
                sealers.append(await identity_handshake(link))
        else:
            key = security.as_key(KEY_TEXT)
            for link in (sink, source):
                sealers.append((await handshake(link, key))[0])
        for link, link_sealer in zip((sink, source), sealers, strict=True):
            tag, body = encode(Neighbor(topic=TOPIC, high_priority=True))
            link.transport.write(link_sealer.seal(tag, body, time.time()))
        # wait for both NEIGHBORREPLY (accepted), then count from here on
        for link in (sink, source):
            await asyncio.wait_for(link.frames.get(), 10)
        await asyncio.sleep(0.5)
        if not identity:
            sealer = sealers[1]
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
        raise RuntimeError(f"the driver ran out of frames ({count}); raise FRAMES[{mode!r}]")
    return {"frames": received, "seconds": elapsed, "per_second": received / elapsed}


def renumber(frames: list[bytes], first: int) -> list[bytes]:
    """Identity mode's frames with their sequence numbers from ``first`` on (the opener
    expects exactly the next number of the link)."""
    out = []
    for i, frame in enumerate(frames):
        out.append(frame[:7] + (first + i).to_bytes(8, "big") + frame[15:])
    return out


def members_of(directory: Path) -> dict[str, Identity]:
    """A test authority and the identities of the node under test (N), the driver's S and D,
    and the publisher P whose signed publications S relays (module docstring)."""
    init_authority(directory / "ca")
    members = {}
    for name in ("N", "S", "D", "P"):
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = sock.getsockname()[1]
        members[name] = issue(directory / "ca", f"{HOST}:{port}", directory / name)
    return members


def measure(
    kind: str, args: argparse.Namespace, paced: float = 0.0, mode: str = "shared-key"
) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pubmesh-hop-") as tmp:
        port_file = Path(tmp) / "port"
        command = [sys.executable, __file__, f"--child={kind}", f"--port-file={port_file}"]
        members = members_of(Path(tmp)) if kind == "node" and mode != "shared-key" else None
        if args.uvloop:
            command.append("--uvloop")
        if kind == "node":
            command.append(f"--trace-dir={Path(tmp) / 'trace'}")
            if members is not None:
                command.append(f"--identity-dir={members['N'].directory}")
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
            cpu0 = settled_cpu(child.pid)
            node_mode = mode if kind == "node" else None
            figures = asyncio.run(
                drive(
                    port,
                    node_mode,
                    args.seconds,
                    args.window or WINDOW[mode],
                    paced,
                    members,
                    args.burst,
                )
            )
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


def settled_cpu(pid: int, timeout: float = 15.0) -> float:
    """The child's CPU seconds once its start-up work is over (the trace's warm-up and the
    imports it triggers take a node about half a second of CPU after it says its port): less
    than 10 ms in a quarter of a second, or ``timeout``. Counted from before that, a paced
    measurement of ~3,600 frames took the start-up for ~600 µs a frame."""
    last = _child_cpu(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = _child_cpu(pid)
        if now - last < 0.01:
            return now
        last = now
    return last


def _child_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring window per system")
    parser.add_argument(
        "--window",
        type=int,
        help="frames in flight S -> D (default 512 in shared-key mode, 4096 in identity mode)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=16,
        help="identity-burst mode: publications a signature covers (default 16)",
    )
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
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"the node's link modes, comma-separated, of {', '.join(MODES)} (default: all)",
    )
    parser.add_argument("--child", choices=["node", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--port-file", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", help=argparse.SUPPRESS)
    parser.add_argument("--identity-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "node":
        identity_dir = Path(args.identity_dir) if args.identity_dir else None
        node_main(
            Path(args.port_file), Path(args.trace_dir), args.profile, args.uvloop, identity_dir
        )
        return 0
    if args.child == "raw":
        _runner(args.uvloop)(serve_raw(Path(args.port_file)))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes}: choose from {', '.join(MODES)}")
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
    # measured: ("raw", None), ("node", mode), ("paced", mode) -> rounds
    results: dict[tuple[str, str | None], list[dict[str, float]]] = {}
    kinds = [("raw", None)] + [("node", mode) for mode in modes]
    for round_ in range(args.rounds):
        for kind, mode in kinds:
            label = kind if mode is None else f"{kind} ({mode})"
            console.print(f"round {round_ + 1}/{args.rounds}: {label} ...", end=" ")
            figures = measure(kind, args, mode=mode or "shared-key")
            results.setdefault((kind, mode), []).append(figures)
            console.print(f"{figures['per_second']:,.0f} frames/s")
    if args.paced > 0:
        for round_ in range(args.rounds):
            for mode in modes:
                console.print(
                    f"paced {args.paced:g}/s, round {round_ + 1}: node ({mode}) ...", end=" "
                )
                figures = measure("node", args, args.paced, mode)
                results.setdefault(("paced", mode), []).append(figures)
                console.print(f"{figures['per_second']:,.0f} frames/s")
    table = Table(title=f"frames one process forwards per second (S -> X -> D, {PAYLOAD} B)")
    for column in ("forwarder", "frames/s (best)", "frames/s (all rounds)", "CPU s / 1k frames"):
        table.add_column(column, justify="right" if column != "forwarder" else "left")
    best = {}
    cpu = {}
    for (kind, mode), rows in results.items():
        if kind == "raw":
            label = "raw asyncio framing"
        elif kind == "node":
            label = f"pubmesh gossip node, {mode}"
        else:
            label = f"pubmesh gossip node, {mode}, one frame per wake-up ({args.paced:g}/s)"
        best[kind, mode] = max(r["per_second"] for r in rows)
        cpu[kind, mode] = cpu_per_frame(rows)
        table.add_row(
            label,
            f"{best[kind, mode]:,.0f}",
            ", ".join(f"{r['per_second']:,.0f}" for r in rows),
            f"{cpu[kind, mode] * 1000:.4f}",
        )
    console.print(table)
    for (kind, mode), rows in results.items():
        for figures in rows if kind != "raw" else []:
            # every GOSSIP forwarded was a first copy the node delivered to its own subscription
            if figures["delivered"] < figures["frames"]:
                console.print(
                    f"[red]the node ({mode}) delivered {figures['delivered']:,.0f} publications "
                    f"but forwarded {figures['frames']:,.0f}[/red]"
                )
                return 1
    loop_name = ("uvloop" if args.uvloop else "asyncio") + (", compiled" if args.compiled else "")
    machine = f"({loop_name}, Python {platform.python_version()}, {os.cpu_count()} cores)"
    for mode in modes:
        console.print(
            f"node ({mode}) ÷ raw: [bold]{best['node', mode] / best['raw', None]:.3f}[/bold] "
            f"{machine}"
        )
    for mode in [m for m in modes if m != "shared-key"] if "shared-key" in modes else []:
        ratio = cpu["node", mode] / cpu["node", "shared-key"]
        label = f"{mode} (bursts of {args.burst})" if mode == "identity-burst" else mode
        console.print(
            f"node CPU per forwarded publication: {label} {cpu['node', mode] * 1e6:.0f} µs, "
            f"shared-key {cpu['node', 'shared-key'] * 1e6:.0f} µs: ÷ shared-key "
            f"[bold]{ratio:.2f}[/bold]"
        )
    for mode in modes if args.paced > 0 else []:
        saturated, one = cpu["node", mode] * 1e6, cpu["paced", mode] * 1e6
        console.print(
            f"node ({mode}) CPU per frame: {saturated:.0f} µs saturated, {one:.0f} µs one frame "
            f"per wake-up: a wake-up costs ~{one - saturated:.0f} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
