"""Checks shared by the topic-history tests: what a run's ``history.replayed``
events say about the publications they replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq


def check_publish_times(run_dir: Path, replay: str, *, within: float) -> int:
    """Every ``history.replayed`` event of the run dates its publication: the event's time
    less its ``age`` is the publication's publish time, or at most ``within`` seconds after it
    (the holder's first copy, when the holder is not the publisher, and the answer's transit).
    Returns how many events it checked (there must be some)."""
    published = {p["pub_id"]: p["t"] for p in pq.read_table(run_dir / "publications").to_pylist()}
    checked = 0
    for e in pq.read_table(run_dir / "events").to_pylist():
        if e["kind"] != "history.replayed":
            continue
        detail = json.loads(e["detail"])
        said = e["t"] - detail["age"]
        true = published[detail["pub_id"]]
        assert true - 1e-6 <= said <= true + within, (
            f"node {e['node']} dates publication {detail['pub_id']} at {said:.3f} s, "
            f"published at {true:.3f} s; {replay}"
        )
        checked += 1
    assert checked, f"no replayed publication to check; {replay}"
    return checked
