"""Parameters of the brokertree stack: the ``[stack.brokertree]`` table of a scenario.

Every field has a default and names its source: Kazemzadeh & Jacobsen (Kazemzadeh & Jacobsen, the
paper, [P §n]) or docs/protocols/brokertree.md (the spec, §n; its §10 lists the parameters, §12 what
was left to the implementer).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Tree layouts of spec §2: a seeded random tree, or three core brokers in a line with
#: ``core_fanout`` edge nodes each (Kazemzadeh & Jacobsen Figs. 14/15: "core degree 11").
LAYOUTS = ("random", "chain3")
#: Where a client attaches (spec §2): any broker, or a leaf of the broker tree.
ATTACH = ("any", "leaves")
#: What a session does with an illegitimate copy past ``stall_timeout`` (see the field).
PAST_STALL = ("skip", "forward")
#: Acknowledgement schemes (spec §8): a Conf per message and hop [P §2.2], or depth acks [P §8].
ACKS = ("conf", "dack")
#: Who matches publications (spec §6.2): brokers only (Kazemzadeh & Jacobsen fn. 7). The spec's
#: ``"full"`` (clients hold tables too) needs every broker to enumerate the clients of its
#: map, which the join-free tree of this implementation does not give (see node.py); it is
#: refused with that reason rather than accepted and ignored.
CLIENT_TABLES = ("broker",)


@dataclass(frozen=True)
class BrokerTreeParams:
    """The tree, its fault tolerance and the protocol's periods (spec §2, §10)."""

    #: δ, the number of concurrent failures tolerated [P §2.1]; the paper's runs use 3.
    delta: int = 3
    #: Nodes 0 … brokers−1 are brokers (the stack's infrastructure); the rest are clients
    #: (spec §2). 0: a fifth of the run's nodes, at least 2 (:func:`broker_count`); the
    #: spec §11 base scenario sets 20 (86 nodes: 20 brokers, 66 clients).
    brokers: int = 0
    #: Broker neighbours a broker may have before the generator stops attaching to it (§2).
    max_degree: int = 4
    #: ``"random"`` or ``"chain3"`` (spec §2).
    layout: str = "random"
    #: Edge nodes per core broker in ``chain3`` (spec §2: 9, for a core degree of 11).
    core_fanout: int = 9
    #: ``"any"`` broker or a leaf broker (spec §2).
    attach: str = "any"
    #: Seed of the tree generator; every node computes the same tree from it (spec §2). The
    #: spec's runs set it to the run's seed.
    topology_seed: int = 0
    #: ``"conf"`` or ``"dack"`` for publications (spec §8; subscriptions always use Conf).
    ack: str = "dack"
    #: Heartbeats on idle sessions and silence-based suspicion (spec §2); off: the runtime's
    #: PeerDown alone.
    hb: bool = True
    #: Seconds between heartbeats on an idle session (spec §10: 0.5 s).
    hb_period: float = 0.5
    #: Silence before a peer is suspected, and the handshake's timeout (spec §10: 1.5 s).
    fd_timeout: float = 1.5
    #: Seconds between a lead's probes of the beingReplaced nodes [P §4.1] (spec §10: 2 s).
    probe_period: float = 2.0
    #: Seconds between depth acknowledgements and between purges (spec §8, §10: 1 s each).
    dack_period: float = 1.0
    purge_period: float = 1.0
    #: ``"broker"`` (clients hold no subscription table, [P §9 fn. 7]) or ``"full"`` (§6.2).
    client_tables: str = "broker"
    #: Seconds an unsubscription's tombstone stays in SubSummary (spec §9).
    tombstone_ttl: float = 60.0
    #: With ``hb = false``, partitions are seen through explicit notices (spec §2).
    partition_notices: bool = False
    #: Seconds a session may stay stalled at a copy that would break legitimacy before the nodes it
    #: bypasses are presumed gone for good (Kazemzadeh & Jacobsen, *Highly Available Distributed
    #: Publish/Subscribe Systems* §5.5: an illegitimate copy waits "until node or link recoveries
    #: trigger retransmission"; spec §4 blocks the session behind it until it is re-activated). The
    #: session is active only while every node it bypasses is down, so after this long they have
    #: been down this long: well past a probe period and a handshake (Kazemzadeh & Jacobsen §4.1),
    #: the time a falsely suspected node takes to come back. From then on the session does what
    #: ``past_stall`` says with such copies and goes on, so no session stalls for good behind a copy
    #: whose bypassed broker never returns (ours; the copies the δ guarantee covers are legitimate
    #: and never wait here). 0: the spec's rule (wait until re-activated, for ever if the bypassed
    #: broker is gone).
    stall_timeout: float = 5.0
    #: What a session does with an illegitimate copy once its bypassed nodes are presumed gone
    #: (``stall_timeout``): ``"forward"`` (default; ours, beyond the paper): send it all the same,
    #: and let the nodes after it forward it without holding it again; Fig. 5 may then miss a
    #: duplicate beyond the guarantee, and the subscriber's per-publisher high-water mark (spec
    #: §6.5's safety net) keeps exactly-once and order, across a restart too since the marks are
    #: kept in the data directory (BrokerTreeNode.durable). ``"skip"``: give the copy up
    #: for this session, as Kazemzadeh & Jacobsen §5.5 never propagates one ("nodes stop to
    #: propagate messages if they become illegitimate"); the pairs lost are beyond the δ
    #: guarantee (SRDS'11 setup: 0.915 pooled over 5 seeds against forward's 0.992).
    past_stall: str = "forward"
    #: Topic history (spec §14, not in the paper): each client retains the newest this many
    #: of its own publications per topic (0: none, and it answers no history query) …
    history_count: int = 1024
    #: … none older than this many seconds …
    history_seconds: float = 600.0
    #: … within this many bytes of payload per topic.
    history_bytes: int = 4 * 1024 * 1024
    #: Items a client sends for one history query, and a subscriber accepts for one (§14).
    history_items: int = 1024
    #: A broker forwards, and a client answers, one history query per asker and topic per
    #: this many seconds (§14).
    history_interval: float = 10.0
    #: Seconds from the confirmation of a history subscription (every broker has its tuple,
    #: so what is published from then on reaches it live) to its query (§14).
    history_delay: float = 1.0
    #: Seconds the subscriber waits for the answers after its query, holding the topic's live
    #: copies, before it delivers the history and then them, in each publisher's order (§14).
    history_wait: float = 1.0
    #: Seconds from the subscription to the end of its history: items after it are ignored,
    #: and anything still held is delivered then (§14).
    history_window: float = 30.0

    def check(self) -> str | None:
        """Refuse impossible values (called by the scenario loader; spec §12.8)."""
        if self.delta < 1:
            return f"delta must be >= 1, got {self.delta}"
        if self.brokers != 0 and self.brokers < 2:
            return f"brokers must be >= 2 (or 0: a fifth of the nodes), got {self.brokers}"
        if self.max_degree < 2:
            return f"max_degree must be >= 2 (a tree needs inner brokers), got {self.max_degree}"
        if self.layout not in LAYOUTS:
            return f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}"
        if self.layout == "chain3" and 0 < self.brokers < 3:
            return f'layout "chain3" needs brokers >= 3, got {self.brokers}'
        if self.core_fanout < 1:
            return f"core_fanout must be >= 1, got {self.core_fanout}"
        if self.attach not in ATTACH:
            return f"attach must be one of {', '.join(ATTACH)}, got {self.attach!r}"
        if self.ack not in ACKS:
            return f"ack must be one of {', '.join(ACKS)}, got {self.ack!r}"
        if self.client_tables == "full":
            return (
                'client_tables = "full" is not supported: clients here hold no subscription '
                'table (Kazemzadeh & Jacobsen fn. 7); use "broker"'
            )
        if self.client_tables not in CLIENT_TABLES:
            return (
                f"client_tables must be one of {', '.join(CLIENT_TABLES)}, "
                f"got {self.client_tables!r}"
            )
        for name in (
            "hb_period",
            "fd_timeout",
            "probe_period",
            "dack_period",
            "purge_period",
            "tombstone_ttl",
        ):
            value = getattr(self, name)
            if not value > 0:
                return f"{name} must be > 0, got {value}"
        if self.stall_timeout < 0:
            return (
                f"stall_timeout must be >= 0 (0: wait until re-activated), got {self.stall_timeout}"
            )
        if self.past_stall not in PAST_STALL:
            return f"past_stall must be one of {', '.join(PAST_STALL)}, got {self.past_stall!r}"
        for name in ("history_count", "history_bytes", "history_items"):
            if getattr(self, name) < 0:
                return f"{name} must be >= 0, got {getattr(self, name)}"
        for name in ("history_seconds", "history_interval", "history_delay", "history_wait"):
            value = getattr(self, name)
            if not value >= 0:
                return f"{name} must be >= 0, got {value}"
        if not self.history_window > self.history_delay + self.history_wait:
            return (
                f"history_window ({self.history_window}) must exceed history_delay + "
                f"history_wait ({self.history_delay + self.history_wait})"
            )
        if self.hb and not self.fd_timeout > self.hb_period:
            return (
                f"fd_timeout ({self.fd_timeout}) must exceed hb_period ({self.hb_period}), "
                "or every idle peer would be suspected"
            )
        return None


def broker_count(nodes: int, params: BrokerTreeParams) -> int:
    """Brokers of a run of ``nodes`` nodes: ``params.brokers``, or a fifth of the nodes
    (at least 2) when it is 0."""
    if params.brokers:
        return params.brokers
    return max(2, nodes // 5)
