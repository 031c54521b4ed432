"""CLI wiring of the network runtime: ``pubmesh node``, ``cluster``, ``key`` and ``ca``.

:func:`register` is called by :mod:`pubmesh.cli` with its subparsers; each subcommand sets
``func(args) -> exit code``. Bad input raises :class:`pubmesh.errors.UserError`, which the CLI
prints as one line with exit status 2.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

KEY_HELP = """\
A cluster key is what every node of a shared-key cluster holds: 256 random bits as hex digits.
Connections are authenticated with it and every frame is encrypted under keys derived from it
per connection (pubmesh.net.security). A passphrase is refused: from one handshake anyone can
test guesses of it offline.

examples:
  pubmesh key new --out cluster.key          # a file, readable by you only
  export PUBMESH_KEY=$(pubmesh key new)      # or the environment
  pubmesh node --listen 127.0.0.1:7000 --key cluster.key
  pubmesh key show cluster.key               # its fingerprint, as connection errors name it
"""


CA_HELP = """\
Identity mode: every node holds a certificate from the cluster's authority that names its
address (HOST:PORT, which is its node id), and a peer whose certificate is not from the
authority, has expired, or names another address is refused (pubmesh.net.identity).

examples:
  pubmesh ca init ca/                            # ca/ca.crt, ca/ca.key (keep ca.key private)
  pubmesh ca issue ca/ 127.0.0.1:7000 ids/n7000  # ids/n7000/node.crt, node.key, ca.crt
  pubmesh ca issue ca/ 127.0.0.1:7001 ids/n7001 --days 30
  pubmesh ca revoke ca/ 127.0.0.1:7001           # ca/revoked.list: every node refuses it
                                                 # once one node reads the list:
  pubmesh node --identity ids/n7000 --revocations ca/revoked.list ...
"""


DATA_HELP = """\
A node started with --data-dir DIR remembers in DIR/node.db (SQLite) its address, the
contacts it joined through, its subscriptions and the ids it delivered in the last 10
minutes. Started again on DIR it comes back as the same node (--listen HOST:0 takes its old
port), rejoins without --contact, subscribes again and delivers nothing twice, even after
kill -9.

  pubmesh node --stack gossip --listen 127.0.0.1:0 --contact 127.0.0.1:7000 \\
      --data-dir ./n1 --subscribe news
  pubmesh node --stack gossip --listen 127.0.0.1:0 --data-dir ./n1   # the same node again
  pubmesh data inspect ./n1
"""


def _cmd_cluster(args: argparse.Namespace) -> int:
    # the controller (and the trace gatherer's pyarrow) only when a cluster runs: every
    # pubmesh command builds this parser
    from pubmesh.net.cluster.controller import run

    return run(args)


def register(subparsers: Any) -> None:
    from pubmesh.net.cluster import options as cluster_options
    from pubmesh.net.node import options as node_options

    node_options.add_parser(subparsers)
    cluster_options.add_parser(subparsers).set_defaults(func=_cmd_cluster)
    key = _actions(subparsers, "key", "make a cluster key for the shared-key mode", KEY_HELP)
    new = _action(
        key, "new", "print a fresh random key (or write it to --out FILE, mode 0600)", KEY_HELP
    )
    new.add_argument("--out", type=Path, metavar="FILE", help="write the key here, not stdout")
    new.add_argument("--force", action="store_true", help="replace FILE if it exists")
    new.set_defaults(func=_cmd_key_new)
    show = _action(
        key,
        "show",
        "print a key's fingerprint, as connection errors name it (FILE, else $PUBMESH_KEY)",
        KEY_HELP,
    )
    show.add_argument("file", type=Path, nargs="?", metavar="FILE", help="a key file")
    show.set_defaults(func=_cmd_key_show)

    ca = _actions(
        subparsers, "ca", "make a cluster authority and node identities (certificates)", CA_HELP
    )
    init = _action(ca, "init", "a new authority in DIR: ca.crt and ca.key (Ed25519)", CA_HELP)
    init.add_argument("dir", type=Path, metavar="DIR")
    init.add_argument("--days", type=int, default=3650, help="validity (default 3650)")
    init.add_argument("--force", action="store_true", help="replace an authority in DIR")
    init.set_defaults(func=_cmd_ca_init)
    issue = _action(
        ca,
        "issue",
        "an identity for the node at HOST:PORT in OUTDIR: node.crt, node.key, ca.crt",
        CA_HELP,
    )
    issue.add_argument("dir", type=Path, metavar="DIR", help="the authority's directory")
    issue.add_argument("address", metavar="HOST:PORT", help="the node's address (its id)")
    issue.add_argument("out", type=Path, metavar="OUTDIR")
    issue.add_argument("--days", type=int, default=365, help="validity (default 365)")
    issue.add_argument("--force", action="store_true", help="replace an identity in OUTDIR")
    issue.set_defaults(func=_cmd_ca_issue)
    revoke = _action(
        ca,
        "revoke",
        "revoke every certificate issued for HOST:PORT: DIR/revoked.list, signed; load it into "
        "any node (pubmesh node --revocations FILE) and it reaches the whole cluster",
        CA_HELP,
    )
    revoke.add_argument("dir", type=Path, metavar="DIR", help="the authority's directory")
    revoke.add_argument("address", metavar="HOST:PORT", help="the node to put out")
    revoke.set_defaults(func=_cmd_ca_revoke)

    data = _actions(subparsers, "data", "look into a node's data directory (--data-dir)", DATA_HELP)
    inspect = _action(
        data, "inspect", "print what DIR holds: address, contacts, subscriptions", DATA_HELP
    )
    inspect.add_argument("dir", type=Path, metavar="DIR", help="a node's --data-dir")
    inspect.set_defaults(func=_cmd_data_inspect)


def _cmd_data_inspect(args: argparse.Namespace) -> int:
    from pubmesh.net.store import describe

    print(describe(args.dir))
    return 0


def _action(actions: Any, name: str, summary: str, text: str) -> argparse.ArgumentParser:
    """One ACTION of a command with actions (``key new``, ``ca issue``): its help teaches."""
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=summary, description=text, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    return parser


def _actions(subparsers: Any, name: str, summary: str, text: str) -> Any:
    """A command made of ACTIONs (``pubmesh key``, ``pubmesh ca``); returns their subparsers."""
    command = _action(subparsers, name, summary, text)
    return command.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)


def _cmd_ca_init(args: argparse.Namespace) -> int:
    from pubmesh.net.identity import init_authority

    cert = init_authority(args.dir, days=args.days, force=args.force)
    print(f"a new cluster authority in {args.dir}: {cert.name} (share it), ca.key (keep it)")
    return 0


def _cmd_ca_issue(args: argparse.Namespace) -> int:
    from pubmesh.net.identity import issue

    made = issue(args.dir, args.address, args.out, days=args.days, force=args.force)
    until = made.certificate.not_valid_after_utc
    print(f"an identity for {made.address} in {args.out}, valid until {until:%Y-%m-%d} UTC")
    return 0


def _cmd_ca_revoke(args: argparse.Namespace) -> int:
    from pubmesh.net.address import parse_hostport
    from pubmesh.net.revocation import LIST_FILE, revoke

    host, port = parse_hostport(args.address, what="HOST:PORT")
    revoked, new = revoke(args.dir, f"{host}:{port}")
    print(
        f"{host}:{port}: {new} certificate(s) revoked; {args.dir / LIST_FILE} lists "
        f"{len(revoked.entries)}; load it into any node (--revocations FILE) and every "
        f"connected node gets it"
    )
    return 0


def _cmd_key_show(args: argparse.Namespace) -> int:
    from pubmesh.net.security import load_key

    key = load_key(args.file)
    print(f"{key.fingerprint}  ({key.source})")
    return 0


def _cmd_key_new(args: argparse.Namespace) -> int:
    from pubmesh.net.security import new_key_text, write_private

    text = new_key_text()
    if args.out is None:
        print(text)
        return 0
    write_private(args.out, (text + "\n").encode(), args.force)
    print(f"wrote a new cluster key to {args.out} (mode 0600)")
    return 0
