"""CLI wiring of the network runtime: ``pubmesh node`` and ``pubmesh cluster``.

:func:`register` is called by :mod:`pubmesh.cli` with its subparsers; each subcommand sets
``func(args) -> exit code``. Bad input raises :class:`pubmesh.errors.UserError`, which the CLI
prints as one line with exit status 2.
"""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    from pubmesh.net import cluster, node_cli

    node_cli.add_parser(subparsers)
    cluster.add_parser(subparsers)
