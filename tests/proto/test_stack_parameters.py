"""``pubmesh stacks NAME``: every parameter of every stack this build has
is listed with its default and what it does, read from the ``#:`` comment above the field in
its params class (a field right under a commented one shares that comment)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from pubmesh.stacks.base import available_stacks, get_stack, parameter_docs

OWN = [
    name for name in available_stacks() if get_stack(name).create.__module__.startswith("pubmesh.")
]


@pytest.mark.parametrize("stack", OWN)
def test_every_parameter_says_what_it_does(stack: str) -> None:
    spec = get_stack(stack)
    docs = parameter_docs(spec.params_type)
    fields = [f.name for f in dataclasses.fields(spec.params_type)]
    assert fields and [f for f in fields if not docs.get(f)] == [], docs


def test_the_command_lists_a_stacks_parameters_and_refuses_an_unknown_one() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "pubmesh", "stacks", "d2g"], capture_output=True, text=True,
        timeout=60, env={"COLUMNS": "200", "PATH": ""},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    for name in ("twin_budget", "repair_in", "cap_ttl", "leave_phase2", "timeout"):
        assert name in shown.stdout, shown.stdout
    assert "τ, the twin pairs N may hold" in shown.stdout
    assert "docs/protocols/d2g.md" in shown.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "pubmesh", "stacks", "d2h"], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
    assert "d2h" in wrong.stderr
