"""Parameters of the chord stack: the ``[stack.chord]`` table of a scenario.

Every field has a default and names its source: Terpstra et al. (the paper, § = its sections) or
docs/protocols/chord.md (the spec, §10 "Timers" and §12 "Left to the implementer").
"""

from __future__ import annotations

from dataclasses import dataclass

#: Routing strategies of Terpstra et al. §2.1 (Rebeca): every subscription forwarded on its own,
#: covered ones suppressed, or covered ones suppressed and the rest merged.
ROUTING_MODES = ("simple", "covering", "merging")


@dataclass(frozen=True)
class ChordParams:
    """How a chord node routes and repairs (spec §10, §12)."""

    #: Successor-list length L (Terpstra et al. §5.1: "a list of its log N successors"). 0 = auto:
    #: max(4, |p(u)| − 1), about ⌈log₂N⌉ (spec §3). Set 2⌈log₂N⌉ when ≥ 30% of the nodes may
    #: fail at once (spec §8: surviving half the nodes failing needs it).
    succ_len: int = 0
    #: Test-only evenly spaced keys (spec §2): key(i) = ⌊i·2^64/even_keys⌋ for i < even_keys,
    #: the paper's evenly spaced figures. 0 = hashed keys (SHA-256 of the node id).
    even_keys: int = 0
    #: Terpstra et al. §2.1 routing strategy: "simple", "covering" or "merging" (covering plus
    #: perfect merges, and imperfect merges beyond the size bounds).
    routing: str = "merging"
    #: Conjunctions per edge filter before imperfect merging (spec §4, merging only).
    max_conj: int = 128
    #: Values of one ``in`` list before it is hulled (spec §4, merging only).
    max_in: int = 64
    #: The paper's "may choose not to update" (§4.4): keep an edge filter that covers the
    #: update. Off (spec §6): filters would then never shrink after unsubscribes.
    lazy_shrink: bool = False
    #: Seconds between JoinRequests, and between a joiner's ``lookup_tries`` join notices
    #: (spec §7 step 1, 7); the first retries come sooner (life.py ``backoff``).
    join_retry: float = 2.0
    #: Seconds before a location lookup is retried (≤ ``lookup_tries`` tries, spec §7.7;
    #: the first retries come sooner, life.py ``backoff``).
    location_timeout: float = 2.0
    #: Tries of a location lookup, and join notices a joiner sends (spec §7 step 1, 7.7).
    lookup_tries: int = 5
    #: Seconds between retransmissions of an unacknowledged RespChange (spec §7).
    resp_retry: float = 1.0
    #: Chord's stabilize period: ask the successor for its predecessor and list (spec §7).
    stabilize_period: float = 5.0
    #: Chord's fix_fingers period: one far finger re-resolved per period (spec §7).
    fix_period: float = 5.0
    #: Seconds between re-sends of the last FilterUpdate to every in-neighbour (spec §8.4).
    filter_refresh: float = 15.0
    #: Seconds a leaving node still forwards publications (spec §9).
    leave_linger: float = 1.0
    #: Publications held while the node has no successor yet (spec §5).
    queue_limit: int = 1024
    #: Topic history (spec §14, not in the paper): each node retains the newest this many of
    #: its own publications per topic for late subscribers (0: it retains none) ...
    history_count: int = 1024
    #: ... none older than this many seconds (0: no age limit) ...
    history_seconds: float = 600.0
    #: ... within this many payload bytes per topic (4 MiB).
    history_bytes: int = 4 * 1024 * 1024
    #: Items a node sends for one history query, and a subscriber accepts for one (spec §14).
    history_items: int = 1024
    #: A node answers (and forwards) one history query per asker and topic per this many
    #: seconds (spec §14).
    history_interval: float = 10.0
    #: Seconds from a history subscription (or the join that follows it) to its query: time
    #: for the subscription's filter wave, so that nothing published meanwhile misses both
    #: the live tree and the query (spec §14).
    history_delay: float = 1.0
    #: Seconds after its query that a subscriber takes items and checks live copies against
    #: the replayed ones (spec §14).
    history_window: float = 30.0

    def inert(self) -> dict[str, str]:
        """Parameters these values make unused, each with the reason (``pubmesh sweep`` warns
        when a swept one changes nothing)."""
        if self.routing != "merging":
            return {
                "max_conj": f"routing = {self.routing!r} never merges beyond a bound, so "
                "max_conj is unused (it bounds merging only)"
            }
        return {}

    def check(self) -> str | None:
        """Refuse impossible values (called by the scenario loader)."""
        if self.routing not in ROUTING_MODES:
            return f"routing must be one of {', '.join(ROUTING_MODES)}, got {self.routing!r}"
        if self.succ_len < 0:
            return f"succ_len must be >= 0 (0 = auto), got {self.succ_len}"
        if self.even_keys < 0:
            return f"even_keys must be >= 0 (0 = hashed keys), got {self.even_keys}"
        if self.max_conj < 1 or self.max_in < 1:
            return f"max_conj and max_in must be >= 1, got {self.max_conj}, {self.max_in}"
        if self.lookup_tries < 1:
            return f"lookup_tries must be >= 1, got {self.lookup_tries}"
        if self.queue_limit < 0:
            return f"queue_limit must be >= 0, got {self.queue_limit}"
        for name in ("history_count", "history_bytes", "history_items"):
            if getattr(self, name) < 0:
                return f"{name} must be >= 0, got {getattr(self, name)}"
        for name in ("history_seconds", "history_interval", "history_delay"):
            if getattr(self, name) < 0:
                return f"{name} must be >= 0, got {getattr(self, name)}"
        for name in (
            "join_retry",
            "location_timeout",
            "resp_retry",
            "stabilize_period",
            "fix_period",
            "filter_refresh",
            "leave_linger",
            "history_window",
        ):
            value = getattr(self, name)
            if not value > 0:
                return f"{name} must be > 0, got {value}"
        return None
