"""Figures computed straight from a finished simulation and its Parquet trace, with pyarrow.

These are the tests' own, independent computations (the Spark pipeline in
pubmesh.analysis computes the same metrics; a cross-check test compares the two).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from pubmesh.proto.content import matches
from pubmesh.sim.engine import Simulation


@dataclass
class PubFigures:
    pub_id: int
    t: float
    expected: int
    delivered: int
    duplicates: int
    #: the last delivery hop, :func:`last_delivery_hop`
    ldh: int
    payload_messages: int | None
    #: the hops of each node's first delivery (the publisher's own at 0 included), by node
    hops: dict[int, int] = field(default_factory=dict)

    @property
    def reliability(self) -> float:
        return self.delivered / self.expected if self.expected else 1.0

    @property
    def rmr(self) -> float | None:
        if self.payload_messages is None or self.delivered < 2:
            return None
        return self.payload_messages / (self.delivered - 1) - 1


def last_delivery_hop(first_deliveries: Iterable[tuple[float, int]]) -> int:
    """LDH, the last delivery hop (Plumtree, Leitão et al. 2007 §4; pubmesh.analysis.metrics):
    the hop count of the publication's chronologically last delivery, over each node's first
    delivery ``(t, hops)`` (a duplicate is no delivery); at a tie in time the most hops, the
    greatest ``(t, hops)``. Not the deepest delivery: an early deep copy does not count when a
    shallower one arrives after it. 0 when nobody delivered."""
    return max(first_deliveries, default=(0.0, 0))[1]


def replay(scenario: str, seed: int, *sets: str) -> str:
    extra = "".join(f" --set {s}" for s in sets)
    return f"replay: pubmesh sim {scenario} --seed {seed}{extra}"


def _matches(filter_json: str | None, attributes_json: str | None) -> bool:
    """A topic subscription (no filter) takes every publication of its topic."""
    if filter_json is None:
        return True
    attributes = json.loads(attributes_json) if attributes_json is not None else {}
    return matches(json.loads(filter_json), attributes)


def publication_figures(sim: Simulation, run_dir: Path | None = None) -> list[PubFigures]:
    """Per publication: expected = subscribers of its topic alive at the end of the run that
    were subscribed at its publish time and, for a content subscription, whose filter matches
    the publication's attributes (docs/design.md 'reliability')."""
    pubs = pq.read_table(run_dir / "publications").to_pylist() if run_dir else []
    subs = pq.read_table(run_dir / "subscriptions").to_pylist() if run_dir else []
    payload: Counter[int] = Counter()
    if run_dir is not None and (run_dir / "messages").exists():
        msgs = pq.read_table(run_dir / "messages", columns=["payload", "pub_id"])
        msgs = msgs.filter(pc.field("payload"))
        for row in msgs.group_by("pub_id").aggregate([("pub_id", "count")]).to_pylist():
            payload[row["pub_id"]] = row["pub_id_count"]
    delivered: dict[int, Counter[int]] = defaultdict(Counter)
    first: dict[int, dict[int, tuple[float, int]]] = defaultdict(dict)
    for pub_id, node, t_delivered, hops in sim.deliveries:
        delivered[pub_id][node] += 1
        here = first[pub_id].get(node)
        if here is None or (t_delivered, hops) < here:
            first[pub_id][node] = (t_delivered, hops)
    alive = sim.alive - set(sim.left)
    out = []
    for pub in pubs:
        t, topic = pub["t"], pub["topic"]
        expected = {
            s["node"]
            for s in subs
            if s["topic"] == topic
            and s["t_start"] <= t
            and s["t_end"] is None
            and s["node"] in alive
            and _matches(s["filter"], pub["attributes"])
        }
        got = delivered[pub["pub_id"]]
        out.append(
            PubFigures(
                pub_id=pub["pub_id"],
                t=t,
                expected=len(expected),
                delivered=sum(1 for n in expected if got[n] > 0),
                duplicates=sum(c - 1 for c in got.values() if c > 1),
                ldh=last_delivery_hop(first[pub["pub_id"]].values()),
                payload_messages=payload[pub["pub_id"]] if payload else None,
                hops={v: h for v, (_, h) in first[pub["pub_id"]].items()},
            )
        )
    return out
