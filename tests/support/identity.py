"""Identity-mode node processes (certificates issued by a test authority, no cluster key)."""

from __future__ import annotations

import contextlib
import shutil
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from pubmesh.net.identity import issue, load_identity
from support.netnode import NodeProcess, node_env, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def keyless_env() -> dict[str, str]:
    """Identity mode needs no cluster key: the nodes run without one."""
    return {k: v for k, v in node_env().items() if k != "PUBMESH_KEY"}


def identity_node(
    tmp_path: Path,
    authority: Path,
    name: str,
    contact: NodeProcess | None = None,
    extra: Sequence[str] = (),
    prefix: Sequence[str] = (),
) -> NodeProcess:
    """A node process with a new identity ``tmp_path/name`` (or the one there already: the
    same node started again), ``extra`` arguments after the usual ones, run by ``prefix``
    (NodeProcess)."""
    directory = tmp_path / name
    fresh = not (directory / "node.crt").exists()
    for attempt in range(3):
        if fresh:
            # the certificate names the port, so it is chosen first; another test may take it
            # before the node binds it: then a new port and a new certificate
            address = f"127.0.0.1:{free_port()}"
            issue(authority, address, directory)
        else:
            address = load_identity(directory).address
        args = ["--stack", STACK, "--listen", address, "--identity", str(directory), *extra]
        if contact is not None:
            args += ["--contact", contact.address]
        try:
            return NodeProcess(args, log=tmp_path / f"{name}.log", env=keyless_env(), prefix=prefix)
        except AssertionError as error:
            if not fresh or "the port is in use" not in str(error) or attempt == 2:
                raise
            shutil.rmtree(directory)
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def api_pair(tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """Two nodes of the Python API in identity mode (a contact, and a member that joins it),
    each with its identity from a new authority in ``tmp_path``."""
    from pubmesh.api import Node
    from pubmesh.net.identity import init_authority

    init_authority(tmp_path / "ca")
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    for i, address in enumerate(addresses):
        issue(tmp_path / "ca", address, tmp_path / f"n{i}")
    async with (
        Node(STACK, listen=addresses[0], identity=tmp_path / "n0") as contact,
        Node(
            STACK, listen=addresses[1], contact=contact.address, identity=tmp_path / "n1"
        ) as member,
    ):
        yield contact, member
