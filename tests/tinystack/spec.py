"""The tiny stack's spec: all that the runtimes, the demo and the analysis learn of it."""

from __future__ import annotations

from pathlib import Path

from pubmesh.stacks.base import StackSpec, register
from tinystack import TinyNode, TinyParams

SPEC = register(
    StackSpec(
        name="tiny",
        params_type=TinyParams,
        colour="#999999",
        create=TinyNode,
        contacts=lambda n, params: (0,),
        description="test-only: publish/subscribe through one hub (shows what a stack needs)",
        demo_scenario=str(Path(__file__).with_name("tiny_demo.toml")),
        repair_layers=(),
    )
)
