"""Clusters across Linux network namespaces: traffic crosses real interfaces, not loopback.

``pubmesh cluster --netns K`` (root only) places the node processes in K network namespaces.
Each namespace has one interface, ``eth0``, the end of a veth pair whose other end is a port of
a bridge in a hub namespace of its own; every node listens on its own address in one private
/16, so any node reaches any other across two veth links and the bridge, as hosts on one
switch do. Nothing touches the machine's own network namespace: its interfaces, addresses,
routes and firewall stay as they are.

Layout for K = 3 (names carry the controller's pid, so two clusters never collide)::

    pubmesh-<pid>-0        pubmesh-<pid>-1        pubmesh-<pid>-2
      eth0 10.N.1.x/16       eth0 10.N.2.x/16       eth0 10.N.3.x/16
        |                      |                      |
        v0 ------------------ v1 ------------------- v2      pubmesh-<pid>-hub
                         br0 (a bridge)

Nodes go to namespaces in contiguous blocks: node ``i`` of ``n`` to namespace ``i·K div n``
(12 nodes over 3: 0–3, 4–7, 8–11), so a partition is written as node groups, as in the
simulator, e.g. ``groups = [[0, 1, 2, 3, 4, 5, 6, 7]]`` against nodes 8–11. The ``s``-th node
of namespace ``k`` listens at ``10.N.(k + 1).(s + 1)``; ``N`` is chosen so that the /16
overlaps no address or route of the machine's namespace (the range is used by nothing else
here).

Partitions cut real links (the kernel here has no netem: links are cut, not shaped): the
ports of every namespace group but the first move to a bridge of their own, so frames no
longer cross between groups while each group keeps its own switch; ``heal`` moves them back.
TCP connections across the cut see silence, not resets, as across a real network partition.

Cleanup: the cluster removes its namespaces (which removes their links and addresses) when it
ends, also on Ctrl-C and SIGTERM; a controller killed outright (SIGKILL) leaves them, and the
next cluster that starts removes the namespaces of any pubmesh controller no longer running.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from pubmesh.errors import UserError

PREFIX = "pubmesh-"
#: nodes per namespace and namespaces: each is one octet of the address
MAX_PER_NAMESPACE = 250
MAX_NAMESPACES = 250
_NAME = re.compile(rf"^{PREFIX}(\d+)-(hub|\d+)$")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise UserError(f"--netns: `ip {' '.join(args)}` failed: {detail[0] if detail else '?'}")
    return done


def require_root() -> None:
    """One line, before anything starts, when the cluster cannot make namespaces."""
    if os.geteuid() != 0:
        raise UserError(
            "--netns needs root (it creates network namespaces, veth links and a bridge); "
            "run as root or leave out --netns to run the nodes on 127.0.0.1"
        )
    if _ip("netns", "list", check=False).returncode != 0:
        raise UserError("--netns: the `ip` command (iproute2) is missing or cannot list namespaces")


def namespaces() -> list[str]:
    """The network namespaces on this machine (``ip netns list``), names only."""
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_leftovers() -> list[str]:
    """Remove the namespaces of pubmesh controllers that are no longer running (one killed
    with SIGKILL could not remove its own). Returns the names removed."""
    removed = []
    for name in namespaces():
        match = _NAME.match(name)
        stale = match is not None and not _alive(int(match.group(1)))
        if stale and _ip("netns", "delete", name, check=False).returncode == 0:
            removed.append(name)
    return removed


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 address and route of the machine's own namespace, as networks."""
    used = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        text = _ip(*args, check=False).stdout
        for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b", text):
            with contextlib.suppress(ValueError):
                used.append(ipaddress.IPv4Network(token, strict=False))
    return used


def free_subnet() -> ipaddress.IPv4Network:
    """A /16 in 10.0.0.0/8 that overlaps no address or route here (from 10.213 on)."""
    used = _used_networks()
    for second in [*range(213, 256), *range(1, 213)]:
        candidate = ipaddress.IPv4Network(f"10.{second}.0.0/16")
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise UserError("--netns: every /16 of 10.0.0.0/8 is in use on this machine")


def namespace_of(node: int, count: int, nodes: int) -> int:
    """The namespace of node ``node`` when ``nodes`` nodes go to ``count`` namespaces in
    contiguous blocks (nodes beyond ``nodes``, e.g. churn joiners, to the last)."""
    return min(node * count // nodes, count - 1)


@dataclass
class NetnsLayout:
    """K namespaces on one bridge; see the module docstring."""

    count: int
    nodes: int
    subnet: ipaddress.IPv4Network
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    created: list[str] = field(default_factory=list)
    #: the namespace groups cut off from the first one (empty: no partition)
    cut: list[list[int]] = field(default_factory=list)

    @classmethod
    def plan(cls, count: int, nodes: int) -> NetnsLayout:
        cls.check(count, nodes)
        return cls(count, nodes, free_subnet())

    @staticmethod
    def check(count: int, nodes: int) -> None:
        """One line when K namespaces cannot hold the nodes."""
        if not 1 <= count <= MAX_NAMESPACES:
            raise UserError(f"--netns {count}: give 1..{MAX_NAMESPACES} namespaces")
        if count > nodes:
            raise UserError(f"--netns {count}: more namespaces than the {nodes} nodes")
        if -(-nodes // count) > MAX_PER_NAMESPACE:
            raise UserError(
                f"--netns {count}: {nodes} nodes need more than {MAX_PER_NAMESPACE} per "
                "namespace; give more namespaces"
            )

    # ---------------------------------------------------------------- placement
    @property
    def hub(self) -> str:
        return f"{self.tag}-hub"

    def name(self, namespace: int) -> str:
        return f"{self.tag}-{namespace}"

    def namespace_of(self, node: int) -> int:
        return namespace_of(node, self.count, self.nodes)

    def address(self, node: int) -> str:
        namespace = self.namespace_of(node)
        slot = self.members(namespace).index(node)
        base = int(self.subnet.network_address)
        return str(ipaddress.IPv4Address(base + ((namespace + 1) << 8) + slot + 1))

    def exec_prefix(self, node: int) -> list[str]:
        """The command prefix that runs a node's process inside its namespace."""
        return ["ip", "netns", "exec", self.name(self.namespace_of(node))]

    def members(self, namespace: int) -> list[int]:
        return [n for n in range(self.nodes) if self.namespace_of(n) == namespace]

    # ---------------------------------------------------------------- life
    def create(self) -> None:
        """Namespaces, veth pairs, the bridge and the addresses; removed at exit whatever
        happens (and by the next cluster if this process is SIGKILLed)."""
        atexit.register(self.remove)
        self._add(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for namespace in range(self.count):
            name = self.name(namespace)
            self._add(name)
            port = f"v{namespace}"
            _ip("-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", name)  # fmt: skip
            _ip("-n", self.hub, "link", "set", port, "master", "br0")
            _ip("-n", self.hub, "link", "set", port, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            for node in self.members(namespace):
                _ip("-n", name, "addr", "add", f"{self.address(node)}/16", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")

    def _add(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)

    def remove(self) -> None:
        """Delete every namespace this layout made (their links and addresses go with them)."""
        while self.created:
            _ip("netns", "delete", self.created.pop(), check=False)

    # ---------------------------------------------------------------- partitions
    def namespace_groups(self, groups: Sequence[Sequence[int]]) -> list[list[int]]:
        """Node groups as namespace groups (the plan checked that none splits a namespace);
        namespaces with no node in any group join the first."""
        out = [sorted({self.namespace_of(n) for n in group}) for group in groups]
        out = [g for g in out if g]
        placed = {k for g in out for k in g}
        rest = [k for k in range(self.count) if k not in placed]
        if out:
            out[0] = sorted(out[0] + rest)
        return out

    def partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Cut the links between namespace groups: every group after the first gets a bridge
        of its own (``br1``, ``br2``, …) and its namespaces' ports move there."""
        self.heal()
        for number, group in enumerate(groups[1:], start=1):
            bridge = f"br{number}"
            _ip("-n", self.hub, "link", "add", bridge, "type", "bridge")
            _ip("-n", self.hub, "link", "set", bridge, "up")
            for namespace in group:
                _ip("-n", self.hub, "link", "set", f"v{namespace}", "master", bridge)
        self.cut = [list(g) for g in groups[1:]]

    def heal(self) -> None:
        """Every port back on ``br0``; the partition bridges removed."""
        for number, group in enumerate(self.cut, start=1):
            for namespace in group:
                _ip("-n", self.hub, "link", "set", f"v{namespace}", "master", "br0")
            _ip("-n", self.hub, "link", "delete", f"br{number}", check=False)
        self.cut = []
