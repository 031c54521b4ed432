"""Errors a user can act on. The CLI prints them as one line and exits with status 2."""


class UserError(Exception):
    """Bad input from the user: a scenario file, a flag, a trace directory. The message names
    the file and the key or column at fault and, where it can, what to do instead."""


class ScenarioError(UserError):
    """A scenario or grid file that cannot be run as written."""


class TraceError(UserError):
    """A run directory that cannot be read as trace v1."""
