"""The topic-history figure, measured in the simulator: how much of a topic's past do late
subscribers get, on each stack that keeps history?

One scenario per stack: ``--nodes`` nodes (1,000), ``--topics`` topics, every workload node
subscribed to one; 300 publications at 10/s from t = 10 s; a tenth of the nodes
(``late_fraction``) subscribe at t = 45 s, after the last publication, asking for ``all``.
For each stack the table gives the late subscribers, the pairs (publication issued before
the late subscription, late subscriber of its topic) and the share of them delivered
(*history reliability*), the same share for the on-time subscribers (what the live system
delivered, the most a history can hold), duplicates, replayed deliveries, and the history
messages sent per late subscriber, with the run's CPU seconds.

    PYTHONPATH=src .venv/bin/python bench/bench_history.py [--nodes 1000] [--seed 1]
        [--stacks gossip,chord,...] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import pyarrow.parquet as pq  # noqa: E402

from pubmesh.proto.core import MESSAGE_INFO  # noqa: E402
from pubmesh.scenario.model import parse_scenario  # noqa: E402
from pubmesh.sim.runner import run_scenario  # noqa: E402
from pubmesh.stacks.base import available_stacks, get_stack  # noqa: E402

LATE_AT = 45.0
#: per stack, what the scenario needs besides --set: chord's ring is built by construction (its
#: joins at 1,000 nodes take longer than the run, BENCHMARKS.md "chord overlay built by joins")
STACK_SETS = {"chord": ['init.overlay="warm"']}
SCENARIO = """
[run]
stack = "{stack}"
nodes = {nodes}
seed = {seed}
duration = 60.0
start_spread = 2.0
[network]
latency = {{ dist = "uniform", min = 0.005, max = 0.050 }}
[trace]
messages = "counts"
snapshot_interval = 0
[workload]
topics = {topics}
subscriptions_per_node = 1
publications = 300
publish_start = 10.0
publish_rate = 10.0
late_fraction = 0.1
late_at = {late_at}
history = "all"
"""


def _rows(run_dir: Path, table: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(run_dir / table).to_pylist()
    return rows


def measure(stack: str, nodes: int, topics: int, seed: int, sets: list[str]) -> dict[str, Any]:
    text = SCENARIO.format(stack=stack, nodes=nodes, seed=seed, topics=topics, late_at=LATE_AT)
    scenario = parse_scenario(text, overrides=[*STACK_SETS.get(stack, []), *sets])
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        started = time.process_time()
        run_scenario(scenario, run_dir)
        cpu = time.process_time() - started
        subscriptions = _rows(run_dir, "subscriptions")
        publications = _rows(run_dir, "publications")
        deliveries = _rows(run_dir, "deliveries")
        events = _rows(run_dir, "events")
        counts = _rows(run_dir, "message_counts")
    got: dict[int, set[int]] = defaultdict(set)
    for d in deliveries:
        got[d["node"]].add(d["pub_id"])
    copies = Counter((d["pub_id"], d["node"]) for d in deliveries)
    before: dict[str, set[int]] = defaultdict(set)
    for p in publications:
        if p["t"] < LATE_AT:
            before[p["topic"]].add(p["pub_id"])
    late = [s for s in subscriptions if s["t_start"] >= LATE_AT]
    on_time = [s for s in subscriptions if s["t_start"] < LATE_AT and s["t_end"] is None]

    def share(subs: list[dict[str, Any]]) -> tuple[int, float | None]:
        pairs = sum(len(before[s["topic"]]) for s in subs)
        hits = sum(len(before[s["topic"]] & got[s["node"]]) for s in subs)
        return pairs, (hits / pairs if pairs else None)

    pairs, history = share(late)
    _, live = share(on_time)
    history_layer = {cls.__name__ for cls, info in MESSAGE_INFO.items() if info.layer == "history"}
    sent = sum(
        r["sent"] for r in counts if r["type"] in history_layer or r["type"].startswith("History")
    )
    return {
        "stack": stack,
        "late": len(late),
        "pairs": pairs,
        "history_reliability": history,
        "on_time_reliability": live,
        "duplicates": sum(n - 1 for n in copies.values()),
        "replayed": sum(1 for e in events if e["kind"] == "history.replayed"),
        "history_messages_per_late": sent / len(late) if late else None,
        "cpu": cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    with_history = [s for s in available_stacks() if get_stack(s).history]
    parser.add_argument("--stacks", default=",".join(with_history))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="one JSON object per stack")
    args = parser.parse_args()
    print(
        f"{args.nodes} nodes, {args.topics} topics, 300 publications from 10 s, a tenth "
        f"subscribing at {LATE_AT:g} s with history all (seed {args.seed})"
    )
    print(
        f"{'stack':<11} {'late':>5} {'pairs':>7} {'history rel.':>12} {'on-time rel.':>12} "
        f"{'dups':>5} {'replayed':>8} {'hist. msgs/late':>15} {'CPU s':>7}"
    )
    for stack in args.stacks.split(","):
        row = measure(stack, args.nodes, args.topics, args.seed, args.set)
        if args.json:
            print(json.dumps(row))
            continue

        def fmt(value: float | None, spec: str) -> str:
            return "-" if value is None else format(value, spec)

        print(
            f"{stack:<11} {row['late']:>5} {row['pairs']:>7} "
            f"{fmt(row['history_reliability'], '.4f'):>12} "
            f"{fmt(row['on_time_reliability'], '.4f'):>12} {row['duplicates']:>5} "
            f"{row['replayed']:>8} {fmt(row['history_messages_per_late'], '.1f'):>15} "
            f"{row['cpu']:>7.1f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
