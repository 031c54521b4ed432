"""Errors a user can act on. The CLI prints them as one line and exits with status 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input from the user: a scenario file, a flag, a trace directory. The message names
    the file and the key or column at fault and, where it can, what to do instead."""


class ScenarioError(UserError):
    """A scenario or grid file that cannot be run as written."""


class TraceError(UserError):
    """A run directory that cannot be read as trace v1."""


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"; did you mean NAME?"`` for the known name closest to a mistyped ``word``
    (:func:`difflib.get_close_matches`), or ``""`` when none is close: the tail of an error
    that names an unknown key, parameter, stack or command."""
    close = difflib.get_close_matches(word, sorted(set(known)), n=1)
    return f"; did you mean {close[0]}?" if close else ""
