"""Shared test setup: the test-only probe stack is importable as ``simstacks``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One real local Spark session (local[2]) for every analysis test of the run."""
    from pubmesh.analysis.spark import get_session

    session = get_session("local[2]", app="pubmesh-tests")
    yield session
    session.stop()
