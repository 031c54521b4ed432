"""Chord filter-update cost and tree depth against N (docs/protocols/chord.md §6 "Cost", §11.5,
§11.7).

For each N: a warm overlay (hashed keys, every node on one of three topics), then three fresh
subscriptions at random nodes, one at a time; for each, the FilterUpdate messages of its wave
(delivered in synchronous rounds) and the rounds, beside the spec's ≤ 1.1·N (derived for h
built from whole child filters; ours also sends clipped filters, node.py "Clipped filters"),
and the depth of the subscriber over 20 roots' trees beside ⌈log₂N⌉ and the spec's mean
½·log₂N. The warm start's CPU seconds are printed too (the reduction of every edge's union).

    PYTHONPATH=src .venv/bin/python bench/bench_chord_scaling.py [--sizes 100,300,1000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time

from rich.console import Console
from rich.table import Table

from pubmesh.harness import PoolCluster
from pubmesh.proto.chord.messages import FilterUpdate
from pubmesh.proto.chord.node import ChordNode
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.chord.warm import warm_start
from pubmesh.proto.core import NodeId, Output, Publish, Send, Subscribe, Unsubscribe
from pubmesh.stacks.base import get_stack


def measure(n: int, seed: int) -> dict[str, float]:
    sent = [0]

    def watch(node: NodeId, out: Output) -> None:
        if isinstance(out, Send) and isinstance(out.message, FilterUpdate):
            sent[0] += 1

    start = time.process_time()
    cluster = PoolCluster(
        get_stack("chord"), n, seed, params=ChordParams(), on_output=watch, step_limit=10**9
    )
    for node in cluster.peers:
        cluster.command(node, Subscribe(f"t{node % 3}"))
    cluster.pool.clear()
    warm_start({x: cluster.nodes[x] for x in cluster.live}, random.Random(seed), cluster.params)
    warm = time.process_time() - start
    rng = random.Random(seed)
    costs, rounds, depths = [], [], []
    for subscriber in rng.sample(cluster.peers, 3):
        sent[0] = 0
        cluster.command(subscriber, Subscribe("fresh", {"x": {"lt": 1}}))
        rounds.append(cluster.drain_in_rounds())
        costs.append(sent[0])
        for index, root in enumerate(rng.sample(cluster.peers, 20)):
            cluster.command(root, Publish("fresh", 10**6 * subscriber + index, b"x", {"x": 0}))
            cluster.drain()
        depths += [h for t, _, h in cluster.delivered[subscriber] if t == "fresh"]
        cluster.command(subscriber, Unsubscribe("fresh"))
        cluster.drain()
    degrees = [len(node.edges) for node in cluster.nodes.values() if isinstance(node, ChordNode)]
    return {
        "warm": warm,
        "cost": statistics.fmean(costs),
        "rounds": max(rounds),
        "depth_mean": statistics.fmean(depths),
        "depth_max": max(depths),
        "degree": statistics.fmean(degrees),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,300,1000", help="comma-separated N")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    table = Table(title="chord: one fresh subscription's filter wave, and tree depth, against N")
    columns = ("N", "FilterUpdates", "÷ N", "spec ≤", "rounds", "depth mean", "½·log₂N",
               "depth max", "⌈log₂N⌉", "out-degree", "warm CPU s")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="right")
    for n in (int(x) for x in args.sizes.split(",")):
        m = measure(n, args.seed)
        table.add_row(
            f"{n:,}", f"{m['cost']:.0f}", f"{m['cost'] / n:.2f}", "1.1", str(m["rounds"]),
            f"{m['depth_mean']:.2f}", f"{0.5 * math.log2(n):.2f}", str(m["depth_max"]),
            str(math.ceil(math.log2(n))), f"{m['degree']:.2f}", f"{m['warm']:.0f}",
        )  # fmt: skip
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
