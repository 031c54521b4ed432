"""Parameters of the skipring stack: the ``[stack.skipring]`` table of a scenario.

Every field has a default and says where it comes from (Feldmann et al.,
docs/protocols/skipring.md). The paper lost its formulas; the spec's recommendations (§10) are the
defaults here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SkipRingParams:
    """Parameters of BuildSR and the publish/subscribe layer on top of it (Feldmann et al.)."""

    #: Period of every subscriber's Timeout action in seconds (Feldmann et al. §1.1: "an action
    #: that is executed periodically by each node"). One *timeout interval* (every subscriber
    #: runs Timeout once) is the unit of the paper's "per timeout interval" and of our rounds.
    timeout_interval: float = 1.0
    #: Period of the supervisor's Timeout (round-robin configuration and database repair,
    #: Feldmann et al. §3.1). The paper fixes no relation to the subscribers' period (spec §10.12,
    #: free choice); the supervisor sends one configuration per topic per Timeout, so this sets
    #: how fast a corrupted system converges (about one full round-robin sweep) against the
    #: supervisor's steady load (timeout_interval / supervisor_interval messages per topic per
    #: timeout interval in a legitimate state).
    supervisor_interval: float = 0.1
    #: Base b of p(k) = b^-k, the probability that a subscriber with a label of length k asks
    #: for its configuration in Timeout (action (ii), Feldmann et al. §3.2.1). Spec §5 [R]: 4 keeps
    #: the expected number of requests per timeout interval below 3/4 for every n.
    request_base: float = 4.0
    #: q, the probability of action (iv): a subscriber whose local state says its label is
    #: minimal asks for its configuration (Feldmann et al. §3.2.1; spec §5 [R]: 1/2).
    minimal_request_probability: float = 0.5
    #: Flood new publications over ring edges and shortcuts (PublishNew, Feldmann et al. §4.3).
    flooding: bool = True
    #: Run the self-stabilizing Patricia-trie exchange (CheckTrie, Feldmann et al. §4.2). Turning it
    #: off leaves flooding alone: late subscribers then miss old publications.
    anti_entropy: bool = True
    #: Quiet Timeouts after which a subscriber that got permission to leave releases its topic
    #: instance (spec §10.11). Until then it answers every introduction with RemoveConnection.
    release_after: int = 3
    #: A subscriber whose send to a peer failed (the runtime's PeerDown for a failed send; a
    #: subscriber monitors no peer, so it gets no other PeerDown) drops every reference to that
    #: peer. This is the "eventually correct failure detector" Feldmann et al. §1.1 assumes for
    #: references to crashed nodes; without it a dead reference is handed on by linearization
    #: forever. Set false to keep the failure detector at the supervisor only (§3.3).
    drop_unreachable: bool = True

    def check(self) -> str | None:
        """Refuse impossible values (called by the scenario loader)."""
        if self.timeout_interval <= 0:
            return f"timeout_interval must be > 0, got {self.timeout_interval}"
        if self.supervisor_interval <= 0:
            return f"supervisor_interval must be > 0, got {self.supervisor_interval}"
        if self.request_base <= 1:
            return f"request_base must be > 1 (p(k) = base^-k), got {self.request_base}"
        if not 0 <= self.minimal_request_probability <= 1:
            return (
                "minimal_request_probability must be in [0, 1], got "
                f"{self.minimal_request_probability}"
            )
        if self.release_after < 1:
            return f"release_after must be >= 1, got {self.release_after}"
        return None
