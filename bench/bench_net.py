"""Network runtime benchmark: a 32-process gossip cluster beside redis-server, same fan-out.

Both systems get the same job, measured in the same run on the same machine:

* **pubmesh**: ``pubmesh cluster --stack gossip --nodes 32`` on 127.0.0.1, one topic, every
  node subscribed, 100-byte payloads, each publication issued by a random node (the workload
  plan); the trace keeps publications and deliveries (no per-frame rows), from which the
  figures come. Once per link mode (``--modes``): *shared-key* (AES-256-GCM frames under the
  cluster key), *identity* (the secure default on a real network: TLS 1.3 links with a
  certificate per node, and every publication signed by its publisher and checked by every
  node) and *identity-unsigned* (TLS without the signatures, to tell the two costs apart).
* **Redis**: redis-server (Debian package, started by ``scripts/start-redis.sh``) and 32
  redis-py client processes; each subscribes to one channel and publishes its share of the
  publications (100-byte payloads carrying their send time) on a second connection.

Publications are offered open-loop at fixed rates (neither system has flow control between
publisher and subscribers, so a closed loop would measure the publisher, not the fan-out); for
each rate the figures are the deliveries per second achieved over the publishing window
(every delivery counts, the publisher's own included: fan-out 32 on both sides), the share of
the expected deliveries made, and p50/p99 publish-to-delivery latency (deliveries to other
nodes). The headline compares the best rate each system sustains (≥ 99.9% of the deliveries,
p99 under one second).

Then the throughput goal is checked in the same run: pubmesh's peak (the most
deliveries per second with ≥ 99% delivered) against ≥ 0.5× Redis's, and p99 latency under
100 ms at half that peak, measured by running both systems again at half pubmesh's peak
rate for ``--half-seconds`` (a steady load: the sweep's short windows mostly measure the
first seconds).

The security goal is checked in the same run too: identity mode's peak ≥ 0.35× Redis's, and
shared-key mode's ≥ 0.5× (Redis without TLS: see the report).

    .venv/bin/python bench/bench_net.py [--quick] [--rates 500,1000,2000] [--seconds 5]
                                        [--half-seconds 20] [--modes shared-key,identity]

Figures go to bench/net.md (the lead merges them into BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
console = Console()
NODES = 32
PAYLOAD = 100
REDIS_PORT = 6390
SUSTAINED_SHARE = 0.999
SUSTAINED_P99 = 1.0
#: the throughput goal: at least this share of Redis's peak deliveries/s ...
GOAL_RATIO = 0.5
REDIS = "redis-server + redis-py"
REDIS_TLS = "redis-server + redis-py, TLS"
#: the TLS-only redis-server beside the plain one (the secure default
#: against Redis with TLS too)
REDIS_TLS_PORT = 6391
#: ... and p99 under this at half that peak
GOAL_P99 = 0.100
#: Gossip parameters of the run: the report's (Henriques & Pamplona §4) except IHAVE batching, which
#: the Plumtree paper allows and which turns one announcement frame per message and lazy peer into
#: one per 50 ms and lazy peer.
GOSSIP_SETTINGS = ["stack.gossip.ihave_batch_interval=0.05"]


@dataclass
class Figures:
    system: str
    rate: float
    publications: int
    expected: int
    deliveries: int
    window: float
    p50: float
    p99: float

    @property
    def per_second(self) -> float:
        return self.deliveries / self.window if self.window > 0 else 0.0

    @property
    def share(self) -> float:
        return self.deliveries / self.expected if self.expected else 0.0

    @property
    def sustained(self) -> bool:
        return self.share >= SUSTAINED_SHARE and self.p99 < SUSTAINED_P99


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --------------------------------------------------------------------------------------------
# pubmesh
# --------------------------------------------------------------------------------------------
#: pubmesh's link modes: the flags of ``pubmesh cluster`` for each
#: the durability goal: deliveries per second with every node's data directory, against without
DURABLE_GOAL_RATIO = 0.8
MODES = {
    "shared-key": [],  # AES-256-GCM frames under a shared key
    "identity": ["--identity"],  # TLS 1.3 links + Ed25519-signed publications, checked
    "identity-unsigned": ["--identity", "--unsigned"],  # TLS only: the signatures' share
    # shared-key with every node's data directory (the price of durability)
    "shared-key-durable": ["--data-dir", "{out}/data"],
}
#: the secure default (identity mode) against Redis's peak
IDENTITY_GOAL_RATIO = 0.35


def run_pubmesh(rate: float, seconds: float, workdir: Path, mode: str) -> Figures:
    import pyarrow.parquet as pq

    out = Path(tempfile.mkdtemp(dir=workdir, prefix=f"pubmesh-{mode}-{int(rate)}-")) / "trace"
    count = int(rate * seconds)
    workload = workdir / "workload.toml"
    workload.write_text(
        textwrap.dedent(
            f"""
            [run]
            start_spread = 0.0
            seed = 1
            [workload]
            topics = 1
            subscriptions_per_node = 1
            publications = {count}
            publish_start = 3.0
            publish_rate = {rate}
            payload_size = {PAYLOAD}
            """
        )
    )
    env = dict(os.environ)
    env.pop("PUBMESH_KEY", None)
    env["PYTHONPATH"] = str(ROOT / "src")
    command = [
        sys.executable,
        "-m",
        "pubmesh",
        "cluster",
        "--stack",
        "gossip",
        "--nodes",
        str(NODES),
        "--workload",
        str(workload),
        "--out",
        str(out),
        "--no-message-trace",
        "--quiet",
        "--duration",
        str(3.0 + seconds + 4.0),
        # publishing starts once every node has a neighbour (the schedule and the end shift by
        # the wait, recorded): a node that a DISCONNECT left alone at start-up waits for its
        # first shuffle tick (5-15 s) and would otherwise miss the publications until then
        # (docs/benchmarks/network.md, identity mode at speed)
        "--wait-overlay",
        "20",
        *[arg for setting in GOSSIP_SETTINGS for arg in ("--set", setting)],
        *[arg.format(out=out.parent) for arg in MODES[mode]],
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"pubmesh cluster failed: {result.stderr[-2000:]}")
    pubs = pq.read_table(out / "publications").to_pylist()
    deliveries = pq.read_table(out / "deliveries").to_pylist()
    # publications a node refused for want of room (flow control) were offered and never
    # delivered: they count in the expected deliveries as Redis's lost ones do
    refused = json.loads((out / "run.json").read_text()).get("publications_refused", 0)
    published_at = {p["pub_id"]: (p["t"], p["publisher"]) for p in pubs}
    latencies = []
    last = 0.0
    for row in deliveries:
        t_pub, publisher = published_at[row["pub_id"]]
        last = max(last, row["t"])
        if row["node"] != publisher:
            latencies.append(row["t"] - t_pub)
    first = min(t for t, _ in published_at.values())
    return Figures(
        f"pubmesh {mode}",
        rate,
        len(pubs) + refused,
        (len(pubs) + refused) * NODES,
        len(deliveries),
        max(last - first, seconds),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
    )


# --------------------------------------------------------------------------------------------
# Redis
# --------------------------------------------------------------------------------------------
REDIS_CLIENT = r"""
import json, sys, threading, time
import redis

port, me, clients, rate, count, size = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                        float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
tls = {"ssl": True, "ssl_ca_certs": sys.argv[7]} if len(sys.argv) > 7 else {}
subscriber = redis.Redis(host="127.0.0.1", port=port, **tls)
pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
pubsub.subscribe("bench")
while pubsub.get_message(timeout=0.1) is not None:
    pass
publisher = redis.Redis(host="127.0.0.1", port=port, **tls)
publisher.ping()
mine = [i for i in range(count) if i % clients == me]
sys.stdout.write("ready\n"); sys.stdout.flush()
start = float(sys.stdin.readline())  # every client has subscribed: the controller says go

def publish():
    for i in mine:
        delay = start + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        head = b"%.6f %d %d " % (time.time(), me, i)
        publisher.publish("bench", head + b"x" * (size - len(head)))

thread = threading.Thread(target=publish)
thread.start()
received = 0
latencies = []
last = 0.0
give_up = start + count / rate + 10.0
while received < count and time.time() < give_up:
    message = pubsub.get_message(timeout=0.5)
    if message is None:
        continue
    now = time.time()
    received += 1
    last = now
    sent, sender, _ = message["data"].split(b" ", 2)
    if int(sender) != me:
        latencies.append(now - float(sent))
thread.join()
json.dump({"received": received, "last": last, "latencies": latencies}, sys.stdout)
"""


def run_redis(rate: float, seconds: float, workdir: Path, tls: Path | None = None) -> Figures:
    """Redis's run; with ``tls`` (the directory of :func:`redis_certificates`), over TLS."""
    script = workdir / "redis_client.py"
    script.write_text(REDIS_CLIENT)
    count = int(rate * seconds)
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(REDIS_PORT if tls is None else REDIS_TLS_PORT),
                str(me),
                str(NODES),
                str(rate),
                str(count),
                str(PAYLOAD),
                *([str(tls / "ca.crt")] if tls is not None else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(NODES)
    ]
    for process in processes:  # wait until every client has subscribed
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"redis client failed: {process.communicate()[1][-1500:]}")
    start = time.time() + 0.5
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(f"{start!r}\n")
        process.stdin.flush()
    results = []
    for process in processes:
        out, err = process.communicate(timeout=seconds + 120)
        if process.returncode != 0:
            raise RuntimeError(f"redis client failed: {err[-1500:]}")
        results.append(json.loads(out))
    deliveries = sum(r["received"] for r in results)
    latencies = [x for r in results for x in r["latencies"]]
    last = max(r["last"] for r in results)
    return Figures(
        REDIS if tls is None else REDIS_TLS,
        rate,
        count,
        count * NODES,
        deliveries,
        max(last - start, seconds),
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
    )


def redis_script(action: str, port: int = REDIS_PORT, tls: Path | None = None) -> None:
    command = [str(ROOT / "scripts" / "start-redis.sh"), action, str(port)]
    subprocess.run([*command, *([str(tls)] if tls is not None else [])], check=True)


def redis_certificates(directory: Path) -> Path:
    """A throwaway authority and a certificate for 127.0.0.1 (ECDSA P-256, what any Redis TLS
    build takes), for the TLS-only redis-server."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bench redis CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.crt").write_bytes(ca.public_bytes(pem))
    (directory / "redis.crt").write_bytes(cert.public_bytes(pem))
    (directory / "redis.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return directory


def redis_version() -> str:
    result = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return result.stdout.split("v=")[1].split()[0] if "v=" in result.stdout else "?"


# --------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two rates, 3 s windows")
    parser.add_argument("--rates", help="publications per second, comma-separated")
    parser.add_argument("--seconds", type=float, help="publishing window per rate")
    parser.add_argument(
        "--half-seconds",
        type=float,
        help="publishing window of the run at half pubmesh's peak (default 20; 0: skip it)",
    )
    parser.add_argument(
        "--modes",
        default="shared-key,identity",
        help=f"pubmesh's link modes, comma-separated, of {', '.join(MODES)} (default: "
        "shared-key,identity)",
    )
    parser.add_argument(
        "--no-redis-tls",
        dest="redis_tls",
        action="store_false",
        help="skip the TLS-only redis-server (Redis beside identity mode's TLS)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "net.md"))
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes: {unknown or 'none'}: choose from {', '.join(MODES)}")
    rates = (
        [float(r) for r in args.rates.split(",")]
        if args.rates
        else ([250.0, 1000.0] if args.quick else [250.0, 500.0, 1000.0, 1500.0, 2000.0, 3000.0])
    )
    seconds = args.seconds or (3.0 if args.quick else 5.0)
    half_seconds = args.half_seconds if args.half_seconds is not None else 20.0

    load_before = os.getloadavg()[0]
    certificates = Path(tempfile.mkdtemp(prefix="pubmesh-bench-redis-tls-"))
    tls = redis_certificates(certificates) if args.redis_tls else None
    redis_script("start")
    if tls is not None:
        redis_script("start", REDIS_TLS_PORT, tls)
    rows: list[Figures] = []
    half: list[Figures] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pubmesh-bench-net-") as tmp:
            workdir = Path(tmp)
            for rate in rates:
                rows += run_both(rate, seconds, workdir, modes, tls)
            top = peak_of(rows, f"pubmesh {modes[0]}")
            if half_seconds > 0 and top > 0:
                # half the first mode's peak, in publications per second (fan-out NODES)
                half = run_both(round(top / 2 / NODES), half_seconds, workdir, modes[:1], None)
    finally:
        redis_script("stop")
        if tls is not None:
            redis_script("stop", REDIS_TLS_PORT)

    table = Table(title=f"{NODES} processes, one topic, {PAYLOAD}-byte payloads, loopback")
    for column in (
        "system",
        "offered pubs/s",
        "deliveries/s",
        "delivered",
        "p50 ms",
        "p99 ms",
        "sustained",
    ):
        table.add_column(column, justify="left" if column == "system" else "right")
    for f in rows + half:
        table.add_row(
            f.system,
            f"{f.rate:,.0f}",
            f"{f.per_second:,.0f}",
            f"{f.share:.4f}",
            f"{f.p50 * 1000:.1f}",
            f"{f.p99 * 1000:.1f}",
            "yes" if f.sustained else "no",
        )
    console.print(table)

    def best(system: str) -> Figures | None:
        sustained = [f for f in rows if f.system == system and f.sustained]
        return max(sustained, key=lambda f: f.per_second) if sustained else None

    ours, theirs = best(f"pubmesh {modes[0]}"), best(REDIS)
    peaks = (peak_of(rows, f"pubmesh {modes[0]}"), peak_of(rows, REDIS))
    ratio = peaks[0] / peaks[1] if peaks[1] else float("nan")
    console.print(
        f"peak deliveries/s with >= 99% delivered: pubmesh {modes[0]} {peaks[0]:,.0f}, redis "
        f"{peaks[1]:,.0f}, ratio {ratio:.2f}x; sustained (p99 < 1 s): pubmesh "
        f"{ours.per_second if ours else 0:,.0f}, redis {theirs.per_second if theirs else 0:,.0f}"
    )
    verdict = goal_lines(ratio, half, half_seconds)
    verdict += mode_lines(rows, modes, peaks[1], peak_of(rows, REDIS_TLS))
    verdict += durability_lines(rows, modes)
    for line in verdict:
        console.print(line)
    loads = (load_before, os.getloadavg()[0])
    write_markdown(
        Path(args.out),
        rows,
        ours,
        theirs,
        peaks,
        ratio,
        rates,
        seconds,
        loads,
        half,
        half_seconds,
        verdict,
        modes,
    )
    return 0


def run_both(
    rate: float, seconds: float, workdir: Path, modes: list[str], tls: Path | None
) -> list[Figures]:
    console.print(f"rate {rate:.0f}/s for {seconds:g} s:", end=" ")
    rows = []
    for mode in modes:
        console.print(f"pubmesh {mode} ...", end=" ")
        rows.append(run_pubmesh(rate, seconds, workdir, mode))
        console.print(f"{rows[-1].per_second:,.0f} deliveries/s;", end=" ")
    console.print("redis ...", end=" ")
    rows.append(run_redis(rate, seconds, workdir))
    console.print(f"{rows[-1].per_second:,.0f} deliveries/s;", end=" " if tls else "\n")
    if tls is not None:
        console.print("redis TLS ...", end=" ")
        rows.append(run_redis(rate, seconds, workdir, tls))
        console.print(f"{rows[-1].per_second:,.0f} deliveries/s")
    return rows


def mode_lines(
    rows: list[Figures], modes: list[str], redis_peak: float, tls_peak: float
) -> list[str]:
    """Each link mode's peak against Redis's (and Redis with TLS's, where
    it ran), measured in this run."""
    goals = {"shared-key": GOAL_RATIO, "identity": IDENTITY_GOAL_RATIO}
    lines = []
    for mode in modes:
        peak = peak_of(rows, f"pubmesh {mode}")
        ratio = peak / redis_peak if redis_peak else float("nan")
        goal = goals.get(mode)
        verdict = (
            "" if goal is None else f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'NOT met'})"
        )
        beside_tls = f", {peak / tls_peak:.2f}x Redis with TLS's" if tls_peak else ""
        lines.append(
            f"goal: {mode} mode's peak {peak:,.0f} deliveries/s = {ratio:.2f}x Redis's"
            f"{beside_tls}{verdict}"
        )
    return lines


def durability_lines(rows: list[Figures], modes: list[str]) -> list[str]:
    """The price of durability, every node with a data directory against
    none, same run: peak deliveries per second, goal >= 0.8x."""
    if not {"shared-key", "shared-key-durable"} <= set(modes):
        return []
    plain, durable = (peak_of(rows, f"pubmesh {m}") for m in ("shared-key", "shared-key-durable"))
    ratio = durable / plain if plain else float("nan")
    verdict = "met" if ratio >= DURABLE_GOAL_RATIO else "NOT met"
    return [
        f"goal: with --data-dir, peak {durable:,.0f} deliveries/s = {ratio:.2f}x without "
        f"({plain:,.0f}) (goal >= {DURABLE_GOAL_RATIO:g}x: {verdict})"
    ]


def peak_of(rows: list[Figures], system: str) -> float:
    """The most deliveries per second ``system`` made with ≥ 99% of them delivered."""
    delivered = [f.per_second for f in rows if f.system == system and f.share >= 0.99]
    return max(delivered, default=0.0)


def goal_lines(ratio: float, half: list[Figures], half_seconds: float) -> list[str]:
    """The throughput goal, as measured in this run: one line per bound."""
    lines = [
        f"goal: pubmesh's peak >= {GOAL_RATIO:g}x Redis's: {ratio:.2f}x, "
        f"{'met' if ratio >= GOAL_RATIO else 'NOT met'}"
    ]
    ours = next((f for f in half if f.system.startswith("pubmesh")), None)
    if ours is None:
        lines.append("goal: p99 at half the peak: not measured (--half-seconds 0)")
    else:
        met = ours.p99 < GOAL_P99 and ours.share >= 0.99
        lines.append(
            f"goal: p99 < {GOAL_P99 * 1000:.0f} ms at half the peak ({ours.rate:,.0f} pubs/s "
            f"for {half_seconds:g} s, {ours.per_second:,.0f} deliveries/s, "
            f"{ours.share:.4f} delivered): p99 {ours.p99 * 1000:.1f} ms, "
            f"{'met' if met else 'NOT met'}"
        )
    return lines


TABLE_HEAD = (
    "| system | offered pubs/s | deliveries/s | delivered | p50 ms | p99 ms | sustained |",
    "|---|---:|---:|---:|---:|---:|---|",
)


def table_row(f: Figures) -> str:
    return (
        f"| {f.system} | {f.rate:,.0f} | {f.per_second:,.0f} | {f.share:.4f} | "
        f"{f.p50 * 1000:.1f} | {f.p99 * 1000:.1f} | {'yes' if f.sustained else 'no'} |"
    )


def write_markdown(
    path: Path,
    rows: list[Figures],
    ours: Figures | None,
    theirs: Figures | None,
    peaks: tuple[float, float],
    ratio: float,
    rates: list[float],
    seconds: float,
    loads: tuple[float, float],
    half: list[Figures],
    half_seconds: float,
    verdict: list[str],
    modes: list[str],
) -> None:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Network runtime: 32-process gossip cluster beside Redis pub/sub, per link mode",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} with `.venv/bin/python bench/bench_net.py"
        f" --rates {','.join(f'{r:g}' for r in rates)} --seconds {seconds:g}"
        f" --half-seconds {half_seconds:g} --modes {','.join(modes)}` on "
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"redis-server {redis_version()} with redis-py (pure-Python parser), all on 127.0.0.1.",
        "",
        "Same job for both: 32 processes, one topic/channel, every process subscribed and "
        "publishing its share, 100-byte payloads, publications offered open-loop at the rate "
        f"shown for {seconds:g} s. *deliveries/s* counts every delivery over the publishing "
        "window (fan-out 32, the publisher's own delivery included); *delivered* is the share "
        "of the expected deliveries; latency is publish → delivery at the other processes. "
        f"*Sustained*: ≥ {SUSTAINED_SHARE:.1%} delivered and p99 < {SUSTAINED_P99:g} s.",
        "",
        *TABLE_HEAD,
    ]
    lines += [table_row(f) for f in rows]
    lines += [
        "",
        f"**Peak deliveries/s with ≥ 99% delivered: pubmesh {modes[0]} {peaks[0]:,.0f}, Redis "
        f"{peaks[1]:,.0f}: ratio {ratio:.2f}×** (the throughput goal is ≥ {GOAL_RATIO:g}×, parity "
        "the aim beyond it). Sustained (≥ "
        f"{SUSTAINED_SHARE:.1%}, p99 < {SUSTAINED_P99:g} s): pubmesh "
        f"{ours.per_second if ours else 0:,.0f}/s, Redis "
        f"{theirs.per_second if theirs else 0:,.0f}/s.",
        "",
    ]
    if half:
        lines += [
            f"Then both at half pubmesh's peak, {half[0].rate:,.0f} publications/s, for a "
            "longer window (a steady load):",
            "",
            *TABLE_HEAD,
            *[table_row(f) for f in half],
            "",
        ]
    lines += [
        *[f"- {line.removeprefix('goal: ')}" for line in verdict],
        "",
        f"The machine is shared: its 1-minute load average was {loads[0]:.1f} when the run "
        f"started and {loads[1]:.1f} when it ended (this benchmark's own processes and other "
        f"jobs), on {os.cpu_count()} cores.",
        "",
        "pubmesh's modes: *shared-key* seals frames with AES-256-GCM under per-link keys "
        "from the cluster key; *identity* runs every link over TLS 1.3 with a certificate per "
        "node and has every publication signed by its publisher (Ed25519) and checked by "
        "every node that receives it; *identity-unsigned* is TLS alone. Redis with TLS is a "
        "second, TLS-only redis-server (Debian's build has TLS) with the same clients.",
        "",
        "Reading: every Redis delivery is one hop through a server written in C; every pubmesh "
        "delivery is a hop of a Plumtree tree in a Python process (receive, decrypt, check the "
        "signature once per publication, decode, handle, re-encode and seal for the next hop, "
        "plus the lazy IHAVE "
        "announcements), and a publication crosses several hops, each waiting to be scheduled "
        "on an oversubscribed machine: hence the higher latency, hundreds of milliseconds once "
        "the nodes saturate, and the lower peak. Where Redis still delivered everything at the "
        "highest offered rate, its peak is a lower bound and the ratio an upper bound.",
        "",
    ]
    path.write_text("\n".join(lines))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
