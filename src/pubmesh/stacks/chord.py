"""The ``chord`` stack's spec: content-based publish/subscribe over a Chord-shaped overlay with
per-publisher binomial trees and filter covering/merging (Terpstra et al., DEBS
2003), built to docs/protocols/chord.md. The protocol lives in :mod:`pubmesh.proto.chord`."""

from __future__ import annotations

from pubmesh.proto.chord.legitimacy import is_legitimate
from pubmesh.proto.chord.node import contacts, create
from pubmesh.proto.chord.params import ChordParams
from pubmesh.proto.chord.warm import warm_start
from pubmesh.stacks.base import StackSpec, register

SPEC = register(
    StackSpec(
        name="chord",
        params_type=ChordParams,
        colour="#009E73",
        create=create,
        contacts=contacts,
        content_based=True,
        is_legitimate=is_legitimate,
        warm_start=warm_start,
        demo_scenario="chord_demo.toml",
        timeout_param="stabilize_period",
        extra_metrics=(
            "convergence_time",
            "filter_conjunctions_mean",
            "filter_conjunctions_max",
            "history_reliability",
            "replayed",
        ),
        description=(
            "content-based pub/sub over a Chord ring (Terpstra et al.): binomial trees per "
            "publisher with range fields, filter covering and merging, successor-list repair"
        ),
        repair_layers=("filter",),
        history=(
            "what each matching publisher still retains of its own publications: the newest "
            "history_count (1,024) per topic, history_seconds (600), within history_bytes"
        ),
    )
)
