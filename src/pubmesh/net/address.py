"""Node ids on the network are addresses.

The protocols name nodes by integers (:data:`pubmesh.proto.core.NodeId`). The simulator numbers
them 0..n-1; the TCP runtime packs a node's IPv4 listening address and port into one integer::

    node_id = ipv4_as_int << 16 | port          # 127.0.0.1:7000 -> 0x7F000001_1B58

so an id *is* an address: a protocol that learns a node id from a message (a HyParView
ForwardJoin, a skip-ring neighbour reference) can hand it to the runtime in a ``Send`` and the
runtime dials ``(ip, port)`` without a directory service. Ids fit in 48 bits, so they travel as
plain msgpack integers and sort the same way addresses do.

Only concrete IPv4 addresses are ids: ``0.0.0.0`` is not an address another node can dial, so a
node must listen on (or advertise) the address its peers reach it at.
"""

from __future__ import annotations

import ipaddress
import socket

from pubmesh.errors import UserError
from pubmesh.proto.core import NodeId

MAX_NODE_ID = (1 << 48) - 1


def node_id(host: str, port: int) -> NodeId:
    """The id of the node listening on ``host:port`` (``host`` a dotted IPv4 address)."""
    address = ipaddress.IPv4Address(host)
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    return int(address) << 16 | port


def address_of(node: NodeId) -> tuple[str, int]:
    """``(ip, port)`` of a node id, the inverse of :func:`node_id`."""
    if not 0 <= node <= MAX_NODE_ID:
        raise ValueError(f"{node} is not a network node id (48 bits: ip << 16 | port)")
    return str(ipaddress.IPv4Address(node >> 16)), node & 0xFFFF


def format_id(node: NodeId) -> str:
    """``ip:port`` for humans, or the bare number if ``node`` is not a network id."""
    try:
        host, port = address_of(node)
    except ValueError:
        return str(node)
    return f"{host}:{port}"


def parse_hostport(
    text: str, *, what: str = "address", allow_port_zero: bool = False
) -> tuple[str, int]:
    """Parse ``HOST:PORT`` into a dotted IPv4 address and a port.

    ``HOST`` may be a name (``localhost``) that resolves to IPv4; ``0.0.0.0`` is refused because
    a node's address is its id and other nodes must be able to dial it. Raises
    :class:`~pubmesh.errors.UserError` with a one-line message naming ``what``.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text:
        raise UserError(f"{what} {text!r}: write HOST:PORT, e.g. 127.0.0.1:7000")
    try:
        port = int(port_text)
    except ValueError:
        raise UserError(f"{what} {text!r}: port {port_text!r} is not a number") from None
    low = 0 if allow_port_zero else 1
    if not low <= port <= 65535:
        raise UserError(f"{what} {text!r}: port must be in {low}..65535")
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        try:
            ip = ipaddress.IPv4Address(socket.gethostbyname(host))
        except (OSError, ValueError):
            raise UserError(
                f"{what} {text!r}: {host!r} is not an IPv4 address or a name that resolves to one"
            ) from None
    if ip.is_unspecified:
        raise UserError(
            f"{what} {text!r}: 0.0.0.0 is not an address peers can dial (a node's address is its "
            "id); give the address other nodes reach this one at, e.g. 127.0.0.1"
        )
    return str(ip), port
