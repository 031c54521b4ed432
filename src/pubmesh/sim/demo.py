"""``pubmesh demo`` until the Spark pipeline provides the full report: papers/004's experiment.

Runs the four paper004 scenarios (0, 10, 50 and 85% of the nodes failed) over three seeds in
the simulator and prints a table in the shape of papers/004's Tables 1-3: publications sent and
received and reliability (Table 1), eager (Gossip) and lazy (IHave) messages (Table 2) and
membership (HyParView) messages (Table 3), with mean latency and LDH. The figures are read from
each run's Parquet trace with pyarrow. "received" counts (subscriber, publication) deliveries
that were expected: the subscriber was subscribed and alive from the publish time to the end.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from pubmesh.sim.runner import run_scenario
from pubmesh.sim.scenario import load_scenario

VARIANTS = [
    ("no failures", "paper004"),
    ("10% failed", "paper004_fail10"),
    ("50% failed", "paper004_fail50"),
    ("85% failed", "paper004_fail85"),
]


@dataclass
class DemoRow:
    variant: str
    expected: int
    received: int
    eager: int
    lazy: int
    membership: int
    latency_ms: float
    ldh: float

    @property
    def reliability(self) -> float:
        return self.received / self.expected if self.expected else 1.0


def summarize(run_dir: Path) -> tuple[int, int, int, int, int, list[float], list[int]]:
    """(expected, received, eager, lazy, membership, latencies, ldh per publication)."""
    pubs = pq.read_table(run_dir / "publications").to_pylist()
    subs = pq.read_table(run_dir / "subscriptions").to_pylist()
    nodes = pq.read_table(run_dir / "nodes").to_pylist()
    gone = {r["node"] for r in nodes if r["event"] in ("crash", "leave")}
    deliveries = pq.read_table(run_dir / "deliveries").to_pylist()
    got: dict[int, dict[int, float]] = {}
    hops: dict[int, int] = {}
    for d in deliveries:
        got.setdefault(d["pub_id"], {}).setdefault(d["node"], d["t"])
        hops[d["pub_id"]] = max(hops.get(d["pub_id"], 0), d["hops"])
    expected = received = 0
    latencies: list[float] = []
    for pub in pubs:
        receivers = {
            s["node"]
            for s in subs
            if s["topic"] == pub["topic"]
            and s["t_start"] <= pub["t"]
            and s["t_end"] is None
            and s["node"] not in gone
        }
        delivered = got.get(pub["pub_id"], {})
        expected += len(receivers)
        for node in receivers:
            if node in delivered:
                received += 1
                latencies.append(delivered[node] - pub["t"])
    msgs = pq.read_table(run_dir / "messages", columns=["type", "layer"])
    counts = {item["values"]: item["counts"] for item in pc.value_counts(msgs["type"]).to_pylist()}
    membership = pc.sum(pc.equal(msgs["layer"], "membership")).as_py() or 0
    return (
        expected,
        received,
        counts.get("Gossip", 0),
        counts.get("IHave", 0),
        membership,
        latencies,
        [hops[p["pub_id"]] for p in pubs if p["pub_id"] in hops],
    )


def run_demo(out: Path, seeds: list[int], scenarios_dir: Path) -> list[DemoRow]:
    console = Console(width=None if Console().is_terminal else 132)
    rows: list[DemoRow] = []
    tasks = [(label, name, seed) for label, name in VARIANTS for seed in seeds]
    results: dict[str, list[tuple[int, int, int, int, int, list[float], list[int]]]] = {}
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task("simulating papers/004", total=len(tasks))
        for label, name, seed in tasks:
            scenario = load_scenario(scenarios_dir / f"{name}.toml", [f"run.seed={seed}"])
            run_dir = out / "runs" / f"{name}-s{seed}"
            run_scenario(scenario, run_dir)
            results.setdefault(label, []).append(summarize(run_dir))
            progress.advance(bar)
    for label, _name in VARIANTS:
        parts = results[label]
        latencies = [x for p in parts for x in p[5]]
        ldh = [x for p in parts for x in p[6]]
        rows.append(
            DemoRow(
                variant=label,
                expected=sum(p[0] for p in parts),
                received=sum(p[1] for p in parts),
                eager=sum(p[2] for p in parts),
                lazy=sum(p[3] for p in parts),
                membership=sum(p[4] for p in parts),
                latency_ms=1000 * statistics.fmean(latencies) if latencies else 0.0,
                ldh=statistics.fmean(ldh) if ldh else 0.0,
            )
        )
    table = Table(
        title=f"papers/004 §4 in the simulator: 17 nodes, 50 topics, 680 publications, "
        f"seeds {', '.join(map(str, seeds))} (totals over seeds)"
    )
    for column in (
        "",
        "expected",
        "received",
        "reliability",
        "eager",
        "lazy",
        "eager/lazy",
        "membership",
        "latency ms",
        "LDH",
    ):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(
            r.variant,
            f"{r.expected:,}",
            f"{r.received:,}",
            f"{r.reliability:.2%}",
            f"{r.eager:,}",
            f"{r.lazy:,}",
            f"{r.eager / r.lazy:.2%}" if r.lazy else "-",
            f"{r.membership:,}",
            f"{r.latency_ms:.1f}",
            f"{r.ldh:.2f}",
        )
    console.print(table)
    console.print(
        f"traces: {out / 'runs'}  (pubmesh sim scenarios/paper004.toml --seed N replays one)"
    )
    return rows
