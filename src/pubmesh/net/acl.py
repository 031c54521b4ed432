"""Topic permissions (identity mode): which members may publish, and which may receive, on
which topics, enforced by every node.

The file
========
An ACL is a TOML file of rules; a rule names members and the topic patterns they may publish
and subscribe to::

    # the sensors publish their readings; everybody reads them and the news
    [[rule]]
    nodes = ["10.0.0.1:7000", "10.0.0.2:*"]
    publish = ["sensors.>"]

    [[rule]]
    nodes = ["*"]
    subscribe = ["sensors.>", "news"]

A member is named by the address its certificate names (``HOST:PORT``), ``HOST:*`` for every
port of a host, or ``*`` for every member. A topic pattern is matched token by token, the
tokens being separated by dots, as NATS subjects are: ``news`` is that topic, ``sensors.*``
any topic of two tokens starting with ``sensors``, ``sensors.>`` any topic of two or more, and
``>`` every topic. Rules only allow; a member may do what any rule that names it allows, and
nothing else. Every node of a cluster should hold the same file (as it holds the authority's
certificate).

Where it is enforced
====================
A member runs its own code, so its own node's checks stop only honest mistakes; what stops a
member that cheats is its neighbours. Every node (:class:`pubmesh.net.runtime.NodeRuntime`):

- refuses its application's publish and subscribe where its own identity may not;
- drops a copy of a publication whose publisher (the signature's, so it cannot be claimed:
  :mod:`pubmesh.net.signing`) may not publish on its topic, before its protocol sees it: a
  member cannot publish where it may not even through a friendly neighbour, because the next
  honest node drops it;
- never sends a copy of a publication to a neighbour that may not subscribe to its topic, so a
  member that joins a topic it may not read gets nothing from honest nodes.

Relaying is receiving: in a stack whose publications cross nodes that do not subscribe (a
brokertree broker, a skipring or chord node on the path), the relays must be allowed to
subscribe to the topics they carry, or publications stop at them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pubmesh.errors import UserError
from pubmesh.net.address import format_id, parse_hostport
from pubmesh.proto.core import NodeId

_KEYS = {"nodes", "publish", "subscribe"}
#: (what, node, topic) answers kept, at most (then forgotten together): topics are at most
#: 255 bytes (pubmesh.net.admission), so this stays under about 4 MiB
ACL_CACHE = 8192


def _check_pattern(pattern: str, where: str) -> tuple[str, ...]:
    tokens = tuple(pattern.split("."))
    if not pattern or any(not t for t in tokens):
        raise UserError(f"{where}: topic pattern {pattern!r} has an empty token")
    if ">" in tokens[:-1]:
        raise UserError(f"{where}: topic pattern {pattern!r}: '>' may only be the last token")
    return tokens


def topic_matches(tokens: tuple[str, ...], topic: str) -> bool:
    """Whether ``topic`` matches the pattern ``tokens`` (module docstring)."""
    parts = topic.split(".")
    for i, token in enumerate(tokens):
        if token == ">":
            return len(parts) > i
        if i >= len(parts) or (token != "*" and token != parts[i]):
            return False
    return len(parts) == len(tokens)


@dataclass(frozen=True)
class Rule:
    nodes: tuple[str, ...]
    publish: tuple[tuple[str, ...], ...]
    subscribe: tuple[tuple[str, ...], ...]

    def names(self, address: str) -> bool:
        host = address.rsplit(":", 1)[0]
        return any(n == "*" or n == address or n == f"{host}:*" for n in self.nodes)


class Acl:
    """A parsed ACL file; :meth:`may_publish` and :meth:`may_subscribe` answer per member."""

    def __init__(self, rules: list[Rule], source: str) -> None:
        self.rules = rules
        self.source = source
        self._cache: dict[tuple[str, NodeId, str], bool] = {}

    def _may(self, what: str, node: NodeId, topic: str) -> bool:
        key = (what, node, topic)
        allowed = self._cache.get(key)
        if allowed is None:
            address = format_id(node)
            allowed = any(
                rule.names(address) and any(topic_matches(p, topic) for p in getattr(rule, what))
                for rule in self.rules
            )
            if len(self._cache) > ACL_CACHE:
                self._cache.clear()
            self._cache[key] = allowed
        return allowed

    def may_publish(self, node: NodeId, topic: str) -> bool:
        return self._may("publish", node, topic)

    def may_subscribe(self, node: NodeId, topic: str) -> bool:
        return self._may("subscribe", node, topic)


def parse_acl(text: str, source: str) -> Acl:
    """The ACL in ``text``; a UserError naming ``source``, the rule and the problem otherwise."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{source}: not TOML ({error})") from None
    unknown = set(data) - {"rule"}
    if unknown:
        raise UserError(f"{source}: unknown key {sorted(unknown)[0]!r} (an ACL has [[rule]]s)")
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list) or not raw_rules:
        raise UserError(f"{source}: no [[rule]]: nobody could publish or subscribe")
    rules = []
    for index, raw in enumerate(raw_rules, 1):
        where = f"{source}: rule {index}"
        rules.append(_rule(raw, where))
    return Acl(rules, source)


def _strings(raw: dict[str, Any], key: str, where: str) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: {key} must be a list of strings")
    return value


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: not a table")
    unknown = set(raw) - _KEYS
    if unknown:
        raise UserError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (a rule has nodes, publish, subscribe)"
        )
    nodes = _strings(raw, "nodes", where)
    if not nodes:
        raise UserError(f"{where}: nodes is empty (name members as HOST:PORT, HOST:* or *)")
    for node in nodes:
        if node == "*":
            continue
        host, _, port = node.rpartition(":")
        if port == "*" and host:
            parse_hostport(f"{host}:1", what=f"{where}: node {node!r}")
        else:
            parse_hostport(node, what=f"{where}: node {node!r}")
    publish = [_check_pattern(p, where) for p in _strings(raw, "publish", where)]
    subscribe = [_check_pattern(p, where) for p in _strings(raw, "subscribe", where)]
    if not publish and not subscribe:
        raise UserError(f"{where}: allows nothing (give publish or subscribe patterns)")
    return Rule(tuple(nodes), tuple(publish), tuple(subscribe))


def load_acl(path: Path | str) -> Acl:
    """The ACL file at ``path``; a UserError naming the file otherwise."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"--acl {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--acl {path}: cannot read it ({error})") from None
    return parse_acl(text, str(path))
