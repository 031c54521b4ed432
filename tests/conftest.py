"""Shared test setup: the test-only probe stack is importable as ``simstacks``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
