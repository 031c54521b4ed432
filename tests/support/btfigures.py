"""Figures of a finished brokertree simulation, computed from its Parquet trace with pyarrow
(the tests' own computation; the Spark pipeline computes reliability, duplicates and order
violations the same way and a cross-check test compares them).

What docs/protocols/brokertree.md §11 asserts: reliability over (publication, subscriber) pairs,
with a content-based expected set (same topic, a matching filter, subscribed at the publish time and
alive to the end); duplicates; order violations per (subscriber, publisher); *wrong* deliveries (a
Deliver whose publication does not match the node's subscription); and the protocol's own events:
``late`` (the safety net dropped a copy), ``stalled`` (a copy that would break legitimacy),
``tagged``, ``sub_confirmed`` (with ``partial``) and ``recovered``. :func:`guarantee` splits the
expected and missing pairs by the δ guarantee (within: every 2δ + 1 window of the pair's tree path
has at most δ crashed brokers), and :func:`stuck_sessions` finds the sessions still stalled when the
run ends.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pubmesh.proto.brokertree.guarantee import LossReport, classify_losses
from pubmesh.proto.brokertree.node import BrokerTreeNode
from pubmesh.proto.brokertree.params import BrokerTreeParams, broker_count
from pubmesh.proto.brokertree.seqvect import legitimate, shifted
from pubmesh.proto.brokertree.topology import build_tree
from pubmesh.proto.brokertree.view import View
from pubmesh.proto.content import matches, validate
from pubmesh.scenario.model import Scenario
from pubmesh.sim.engine import Simulation


@dataclass
class BrokerFigures:
    expected: int = 0
    delivered: int = 0
    duplicates: int = 0
    order_violations: int = 0
    wrong: int = 0
    #: per event kind (brokertree.late, .stalled, .tagged, ...), how many
    events: Counter[str] = field(default_factory=Counter)
    #: last sub_confirmed time, and how many were partial
    confirmed_by: float = 0.0
    partial: int = 0
    #: (pub_id, subscriber) pairs expected and not delivered
    missing: list[tuple[int, int]] = field(default_factory=list)
    #: every expected (pub_id, subscriber) pair, and each publication's publisher
    pairs: list[tuple[int, int]] = field(default_factory=list)
    publisher_of: dict[int, int] = field(default_factory=dict)
    #: (t, node) of every brokertree.recovered event
    recovered: list[tuple[float, int]] = field(default_factory=list)
    #: pairs left out because the subscription was not yet confirmed (``confirmed=True``)
    unconfirmed: int = 0

    @property
    def reliability(self) -> float:
        return self.delivered / self.expected if self.expected else 1.0


def measure(
    sim: Simulation, run_dir: Path, *, since: float = 0.0, confirmed: bool = False
) -> BrokerFigures:
    """Figures over the publications issued at or after ``since``; with ``confirmed``, a
    pair counts only if its subscription was confirmed (``brokertree.sub_confirmed`` at the
    subscriber, after the subscription began) by the publish time: a subscription made
    again after a restart is not yet in the tree (Kazemzadeh & Jacobsen §7: the guarantee
    is for confirmed subscriptions), as the runs without restarts ensure by publishing only
    after every subscription is confirmed."""
    pubs = {p["pub_id"]: p for p in pq.read_table(run_dir / "publications").to_pylist()}
    subs = pq.read_table(run_dir / "subscriptions").to_pylist()
    events = pq.read_table(run_dir / "events").to_pylist() if (run_dir / "events").exists() else []
    out = BrokerFigures()
    confirmations: dict[tuple[int, str], list[float]] = defaultdict(list)
    out.publisher_of = {pub_id: p["publisher"] for pub_id, p in pubs.items()}
    for e in events:
        out.events[e["kind"]] += 1
        if e["kind"] == "brokertree.recovered":
            out.recovered.append((e["t"], e["node"]))
        if e["kind"] == "brokertree.sub_confirmed":
            out.confirmed_by = max(out.confirmed_by, e["t"])
            topic = json.loads(e["detail"]).get("topic")
            confirmations[(e["node"], topic)].append(e["t"])
            out.partial += bool(json.loads(e["detail"]).get("partial"))
    # filters and attributes parsed once: a run has thousands of each
    by_topic: dict[str, list[tuple[dict[str, Any], Any, float, float | None]]] = defaultdict(list)
    for s in subs:
        conj = validate(json.loads(s["filter"])) if s["filter"] is not None else None
        by_topic[s["topic"]].append((s, conj, s["t_start"], s["t_end"]))
    attributes = {
        pub_id: json.loads(p["attributes"]) if p["attributes"] is not None else {}
        for pub_id, p in pubs.items()
    }

    def matching(pub_id: int) -> list[tuple[dict[str, Any], float, float | None]]:
        attrs = attributes[pub_id]
        return [
            (s, t_start, t_end)
            for s, conj, t_start, t_end in by_topic[pubs[pub_id]["topic"]]
            if conj is None or matches(conj, attrs)
        ]

    matched = {pub_id: matching(pub_id) for pub_id in pubs}
    alive = sim.alive - set(sim.left)
    got: dict[int, Counter[int]] = defaultdict(Counter)
    order: dict[tuple[int, int], list[float]] = defaultdict(list)
    for pub_id, node, t, _hops in sorted(sim.deliveries, key=lambda d: d[2]):
        pub = pubs[pub_id]
        got[pub_id][node] += 1
        if got[pub_id][node] == 1:
            order[(node, pub["publisher"])].append(pub["t"])
        subscribed = any(
            s["node"] == node and t_start <= t and (t_end is None or t_end >= t)
            for s, t_start, t_end in matched[pub_id]
        )
        if not subscribed:
            out.wrong += 1
    for times in order.values():
        out.order_violations += sum(1 for a, b in itertools.pairwise(times) if b < a)
    for pub_id, pub in pubs.items():
        counts = got[pub_id]
        out.duplicates += sum(c - 1 for c in counts.values() if c > 1)
        if pub["t"] < since:
            continue
        for s, t_start, t_end in matched[pub_id]:
            if t_start <= pub["t"] and t_end is None and s["node"] in alive:
                if confirmed and not any(
                    t_start <= t <= pub["t"] for t in confirmations[(s["node"], s["topic"])]
                ):
                    out.unconfirmed += 1
                    continue
                out.expected += 1
                out.pairs.append((pub_id, s["node"]))
                if counts[s["node"]]:
                    out.delivered += 1
                else:
                    out.missing.append((pub_id, s["node"]))
    return out


def guarantee(sim: Simulation, figures: BrokerFigures, *, ever: bool = False) -> LossReport:
    """The expected and missing pairs split by the δ guarantee
    (:mod:`pubmesh.proto.brokertree.guarantee`), over the run's tree and the brokers still
    crashed at the end; with ``ever``, every broker that crashed during the run, recovered or
    not (a run with restarts: a path that had more than δ brokers down at some time is
    beyond the guarantee, whatever came back later)."""
    scenario = sim.scenario
    params: BrokerTreeParams = scenario.stack_params
    brokers = broker_count(scenario.run.nodes, params)
    tree = build_tree(dataclasses.replace(params, brokers=brokers), scenario.run.nodes)
    crashed = set(sim.crashed)
    if ever:
        crashed |= {n for n, life in sim.incarnation.items() if life > 0}
    return classify_losses(
        figures.pairs, figures.missing, figures.publisher_of, tree, crashed, params.delta
    )


def stuck_sessions(sim: Simulation) -> list[tuple[int, int]]:
    """(broker, peer) of every active session of a live broker whose pointer sits at a copy it
    does not send because it would break legitimacy: a stall still in place at the end."""
    stuck = []
    for node_id in sorted(sim.alive):
        node = sim.nodes.get(node_id)
        if not isinstance(node, BrokerTreeNode) or node.s.view is None:
            continue
        for peer, link in sorted(node.s.links.items()):
            entry = node.s.queue.at(link.pointer)
            if link.state != "active" or entry is None or entry.confirmed:
                continue
            bypassed = node.s.view.between(peer)
            vect = shifted(entry.vin, node.node_id, entry.lseq, bypassed, node.delta)
            if not legitimate(vect, node.delta):
                stuck.append((node_id, peer))
    return stuck


def table_of(node: Any) -> set[tuple[int, str, str]]:
    """A broker's subscription table as (subscriber, topic, predicate) triples."""
    return {(t.origin[0], t.topic, t.pred.text) for t in node.s.table}


def view_of(scenario: Scenario) -> View:
    """The broker tree of a scenario, seen from broker 0."""
    params: BrokerTreeParams = scenario.stack_params
    brokers = broker_count(scenario.run.nodes, params)
    return View(params, tuple(range(brokers)), 0)


def longest_broker_path(view: View) -> list[int]:
    """A longest path of the broker tree (two BFS sweeps; ties broken by the smallest id)."""

    def farthest(start: int) -> tuple[int, dict[int, int | None]]:
        parent: dict[int, int | None] = {start: None}
        frontier = [start]
        last = start
        while frontier:
            nxt = []
            for x in sorted(frontier):
                for y in sorted(view.broker_neighbours(x)):
                    if y not in parent:
                        parent[y] = x
                        nxt.append(y)
            if nxt:
                last = min(nxt)
            frontier = nxt
        return last, parent

    a, _ = farthest(min(view.brokers))
    b, parent = farthest(a)
    path = [b]
    while parent[path[-1]] is not None:
        path.append(parent[path[-1]])  # type: ignore[arg-type]
    return path


def adjacent_brokers(view: View, k: int) -> list[int]:
    """k adjacent brokers (a connected set) around the middle of a longest path: the path's
    middle nodes first, then the brokers next to them, so both sides of the failed region have
    subscribers and publishers to bypass between."""
    path = longest_broker_path(view)
    middle = path[len(path) // 2]
    chosen = [middle]
    left, right = len(path) // 2 - 1, len(path) // 2 + 1
    while len(chosen) < k and (left > 0 or right < len(path) - 1):
        if right < len(path) - 1:
            chosen.append(path[right])
            right += 1
        if len(chosen) < k and left > 0:
            chosen.append(path[left])
            left -= 1
    frontier = sorted(chosen)
    while len(chosen) < k and frontier:
        grown = []
        for b in frontier:
            for y in sorted(view.broker_neighbours(b)):
                if y not in chosen and len(chosen) < k:
                    chosen.append(y)
                    grown.append(y)
        frontier = grown
    if len(chosen) < k:
        raise ValueError(f"the tree has no {k} adjacent brokers")
    return sorted(chosen)


def random_brokers(view: View, k: int, seed: int) -> list[int]:
    return sorted(random.Random(seed).sample(list(view.brokers), k))


def busy_brokers(view: View, publisher: int, subscriber: int, k: int) -> list[int]:
    """The brokers of a busy publisher and a busy subscriber (spec §11 (a)(iii)), and, to make
    k, the brokers nearest the publisher's."""
    chosen = [view.attach(publisher)]
    if view.attach(subscriber) not in chosen:
        chosen.append(view.attach(subscriber))
    for b in sorted(view.brokers, key=lambda b: (view.distance(chosen[0], b), b)):
        if len(chosen) >= k:
            break
        if b not in chosen:
            chosen.append(b)
    return sorted(chosen[:k])


def busiest(counts: Sequence[int]) -> int:
    """The most frequent value (smallest on ties)."""
    tally = Counter(counts)
    return min(tally, key=lambda x: (-tally[x], x))
