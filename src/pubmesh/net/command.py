"""CLI wiring of the network runtime: ``pubmesh node``, ``pubmesh cluster`` and ``pubmesh key``.

:func:`register` is called by :mod:`pubmesh.cli` with its subparsers; each subcommand sets
``func(args) -> exit code``. Bad input raises :class:`pubmesh.errors.UserError`, which the CLI
prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from pubmesh.errors import UserError

KEY_HELP = """\
A cluster key is what every node of a shared-key cluster holds: 256 random bits as hex digits.
Connections are authenticated with it and every frame is encrypted under keys derived from it
per connection (pubmesh.net.security). A passphrase is refused: from one handshake anyone can
test guesses of it offline.

examples:
  pubmesh key new --out cluster.key          # a file, readable by you only
  export PUBMESH_KEY=$(pubmesh key new)      # or the environment
  pubmesh node --listen 127.0.0.1:7000 --key cluster.key
"""


def register(subparsers: Any) -> None:
    from pubmesh.net import cluster, node_cli

    node_cli.add_parser(subparsers)
    cluster.add_parser(subparsers)
    key = subparsers.add_parser(
        "key",
        help="make a cluster key for the shared-key mode",
        description=KEY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    key_sub = key.add_subparsers(dest="key_command", metavar="ACTION", required=True)
    new = key_sub.add_parser(
        "new",
        help="print a fresh random key (or write it to --out FILE, mode 0600)",
        description=KEY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    new.add_argument("--out", type=Path, metavar="FILE", help="write the key here, not stdout")
    new.add_argument("--force", action="store_true", help="replace FILE if it exists")
    new.set_defaults(func=_cmd_key_new)


def _cmd_key_new(args: argparse.Namespace) -> int:
    from pubmesh.net.security import new_key_text

    text = new_key_text()
    if args.out is None:
        print(text)
        return 0
    out: Path = args.out
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if args.force else os.O_EXCL)
    try:
        fd = os.open(out, flags, 0o600)
    except FileExistsError:
        raise UserError(f"{out}: exists; pass --force to replace the key in it") from None
    except OSError as error:
        raise UserError(f"{out}: cannot write it ({error.strerror})") from None
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (text + "\n").encode())
    except OSError as error:
        raise UserError(f"{out}: cannot write it ({error.strerror})") from None
    finally:
        os.close(fd)
    print(f"wrote a new cluster key to {out} (mode 0600)")
    return 0
