"""A full filesystem for the tests that need one."""

from __future__ import annotations

import errno
from pathlib import Path


def fill(path: Path) -> int:
    """Write ``path`` until its filesystem is full; the bytes written."""
    written = 0
    chunk = b"\0" * (64 * 1024)
    with open(path, "wb", buffering=0) as filler:
        while True:
            try:
                written += filler.write(chunk)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
                return written
