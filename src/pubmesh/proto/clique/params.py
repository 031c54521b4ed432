"""Parameters of the ``clique`` stack: the ``[stack.clique]`` table (docs/protocols/relay.md §8)."""

from __future__ import annotations

from dataclasses import dataclass

#: Leave's second phase (spec §3): "anchor" (the repair: the leaver hands its remaining
#: out-neighbours its anchor), "slides" (Scheideler's lecture as written, which can disconnect)
LEAVE_PHASE2 = ("anchor", "slides")


@dataclass(frozen=True)
class CliqueParams:
    #: T, seconds between Timeouts of an instance (spec §8: 0.25 s; at least 5× a 3-hop chain)
    timeout: float = 0.25
    #: Search forwards a request at random at most this many times (Scheideler's lecture §9.2)
    search_d: int = 3
    #: a Join is answered with the member's own relay too (spec §3 [R]: else the joiner has no
    #: out-link for Θ(n) rounds)
    join_intro: bool = True
    #: Leave's phase 2 (spec §3): "anchor" hands the leaver's out-neighbours its anchor so the
    #: last links through it are replaced around it (ours, the spec's repair); "slides" as
    #: written, which can leave a path through the leaver with its far end isolated
    leave_phase2: str = "anchor"
    #: the feedback speed-up (Scheideler's lecture Theorem 9.5 discussion; spec §3.5): u is drawn
    #: with probability ∝ ω, halved when an introduction brought nothing new, doubled otherwise
    feedback: bool = False
    #: relay GC (spec §2.3), in multiples of T: ask holders after this long, skip a holder
    #: counted within grace
    probe_after: float = 3.0
    grace: float = 2.0
    #: rejoin through the contact after this many T with no relay (spec §7)
    rejoin_after: float = 5.0
    #: flooding (spec §7): seen sets above this size go as empty (plain flooding)
    seen_cap: int = 4096
    #: seconds a publication id is remembered against duplicates
    dedup_ttl: float = 60.0
    #: topic history (not in the lecture; docs/protocols/clique.md "Topic history"): the
    #: contact retains, per topic, the newest history_count publications it had (0: it keeps
    #: none, and a late subscriber gets nothing), none older than history_seconds, at most
    #: history_bytes of payload
    history_count: int = 1024
    history_seconds: float = 600.0
    history_bytes: int = 4 * 1024 * 1024
    #: the contact answers each node's request for a topic at most once per
    #: history_interval seconds, with at most history_items publications; a member takes at
    #: most history_items of them, for history_wait seconds after it asked
    history_interval: float = 10.0
    history_items: int = 1024
    history_wait: float = 30.0

    def check(self) -> str | None:
        if not self.timeout > 0:
            return f"timeout must be > 0, got {self.timeout}"
        if self.search_d < 0:
            return f"search_d must be >= 0, got {self.search_d}"
        if self.leave_phase2 not in LEAVE_PHASE2:
            return (
                f"leave_phase2 must be one of {', '.join(LEAVE_PHASE2)}, got {self.leave_phase2!r}"
            )
        for name in ("probe_after", "grace", "rejoin_after", "dedup_ttl"):
            if not getattr(self, name) > 0:
                return f"{name} must be > 0, got {getattr(self, name)}"
        for name in ("history_count", "history_bytes", "history_items"):
            if getattr(self, name) < 0:
                return f"{name} must be >= 0, got {getattr(self, name)}"
        for name in ("history_seconds", "history_interval", "history_wait"):
            if not getattr(self, name) >= 0:
                return f"{name} must be >= 0, got {getattr(self, name)}"
        if self.seen_cap < 0:
            return f"seen_cap must be >= 0, got {self.seen_cap}"
        return None
