"""Process-wide settings read from the environment, in one place (protocol code reads none).

``PUBMESH_STACK_MODULES``: extra stack spec modules to load, comma-separated, for a stack kept
outside this package (a researcher's own, or the test suite's tiny stack). Child processes (a
cluster's nodes, Spark's Python workers) inherit the environment, so they load the same stacks.
"""

from __future__ import annotations

import os

STACK_MODULES_ENV = "PUBMESH_STACK_MODULES"


def extra_stack_modules() -> list[str]:
    """The module names in ``$PUBMESH_STACK_MODULES``, in order."""
    raw = os.environ.get(STACK_MODULES_ENV, "")
    return [name.strip() for name in raw.split(",") if name.strip()]
