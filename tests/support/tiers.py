"""The suite's two tiers (see conftest.py): values for ``pytest.mark.parametrize`` whose extra
cases only ``make figures`` (``PUBMESH_FULL=1``) runs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

FULL = os.environ.get("PUBMESH_FULL") == "1"
full = pytest.mark.full


def tiered(suite: Iterable[Any], extra: Iterable[Any]) -> list[Any]:
    """``suite`` values run in ``make test``; ``extra`` values are marked ``full``. Test ids
    are the same in both tiers, so a failure's id replays it in either."""
    return [*suite, *(pytest.param(value, marks=full) for value in extra)]
