"""Parameters of the gossip stack: one ``[stack.gossip]`` table for HyParView and Plumtree.

Defaults are the papers' (HyParView, Leitão et al., DSN 2007, §5; Plumtree, SRDS 2007, §4) and
the course report's Plumtree timers (Henriques & Pamplona §4); docs/protocols/gossip.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the ways the eager links are chosen (GossipParams.tree)
TREES = ("plumtree", "rooted")


@dataclass(frozen=True)
class GossipParams:
    """Parameters of the gossip stack, the ``[stack.gossip]`` table of a scenario.

    Defaults are the papers' (HyParView §5, Plumtree §4: fanout 4, active 5, passive 30,
    ARWL 6, PRWL 3, ka 3, kp 4) and the course report's Plumtree timers (Henriques & Pamplona §4:
    timeout1 500 ms, timeout2 100 ms, threshold 10).
    """

    #: gossip fanout; the active view holds fanout + 1 nodes unless active_view says otherwise
    fanout: int = 4
    #: active view size; 0 means fanout + 1
    active_view: int = 0
    #: passive view size
    passive_view: int = 30
    #: active random walk length (ForwardJoin TTL)
    arwl: int = 6
    #: passive random walk length: at this TTL a ForwardJoin also lands in the passive view
    prwl: int = 3
    #: shuffle random walk length; 0 means arwl
    shuffle_ttl: int = 0
    #: active and passive members a shuffle carries
    shuffle_ka: int = 3
    shuffle_kp: int = 4
    #: seconds between shuffles (the first one at a random phase)
    shuffle_interval: float = 10.0
    #: Plumtree: wait this long after the first IHAVE before grafting (timeout1) ...
    ihave_timeout1: float = 0.5
    #: ... and this long between further grafts for the same message (timeout2)
    ihave_timeout2: float = 0.1
    #: Plumtree: announcements of not-yet-received messages held per neighbour, at most
    #: (beyond it that neighbour's IHAVEs are ignored until some are settled). Not in the
    #: paper, which trusts its members: it bounds what an insider's flood of invented ids
    #: costs in memory. An honest neighbour holds at most the ids it announced within
    #: ihave_timeout1 that the tree has not brought yet
    max_announced: int = 1024
    #: Plumtree: bytes of payloads a node's caches (all its swarms') hold at most, to answer
    #: GRAFTs (beyond it the adding swarm's oldest are dropped before payload_retention;
    #: counted as cache_evicted_early). Not
    #: in the paper either: a cache bounded only by time grows with an insider's publication
    #: rate; the node's memory budget (pubmesh.net) counts what it holds
    cache_bytes: int = 16 << 20
    #: Plumtree: GRAFT requests for ids this node does not hold (never had, or evicted)
    #: answered per neighbour and second, at most; beyond it they are ignored, link and all,
    #: and counted as graft_over_limit. Not in the paper: an honest neighbour asks only for ids
    #: it was told of, so such requests are rare but for an insider's
    max_unknown_grafts: int = 100
    #: Plumtree's tree optimization (§3.8) on or off, and its hop threshold
    optimization: bool = True
    optimization_threshold: int = 10
    #: batch IHAVE announcements for this many seconds, one flush for every lazy peer (0 = send
    #: at once)
    ihave_batch_interval: float = 0.0
    #: eager flooding over the same overlay instead of Plumtree (a baseline for comparisons)
    flood: bool = False
    #: (experimental) a duplicate does not prune a link that carried the first copy of another
    #: message within this many seconds, so concurrent broadcasts prune the tree apart less
    #: (0: Plumtree's rule, prune on every one)
    prune_guard: float = 0.0
    #: how the eager links are chosen: "plumtree", the paper's (the first broadcast's
    #: duplicates prune the overlay to a tree, §3), or "rooted", a breadth-first tree towards
    #: the member with the lowest id kept by periodic beacons, which stays a tree under
    #: concurrent publications (pubmesh.proto.gossip.rooted)
    tree: str = "rooted"
    #: tree = "rooted": seconds between the root's beacon rounds ...
    beacon_interval: float = 2.0
    #: ... seconds without a new round before the root is held dead and replaced ...
    root_timeout: float = 6.0
    #: ... and how long a link a GRAFT (or a first copy outside the tree) made eager stays so
    temp_ttl: float = 2.0
    #: members the contact node remembers per topic (a uniform sample)
    directory_size: int = 8
    #: topics the contact's directory keeps at most (the least recently used goes) ...
    directory_topics: int = 4096
    #: ... topics one node may hold a place in (its least recent place is given up) ...
    directory_per_node: int = 256
    #: ... and seconds a topic nobody asks about or announces in is kept (SwarmDirectory)
    directory_expiry: float = 600.0
    #: seconds before a swarm join that got no answer is retried
    join_timeout: float = 5.0
    #: seconds a node that could not be reached (a dial failed, an invitation went
    #: unanswered) is not invited, asked or taken into the passive view again
    failed_memory: float = 60.0
    #: high-priority Neighbor requests that may each evict a member in a burst, one more every
    #: shuffle_interval, whoever asks (0: every one evicts, the paper's rule); see "What a
    #: member can bring into a view" in pubmesh.proto.gossip.hyparview
    forced_evictions: int = 3
    #: a joined member re-announces itself to the contact every this many shuffles (0: only
    #: when its join completes); see the Announce rule in pubmesh.proto.gossip.hyparview
    announce_every: int = 3
    #: the contact watches the component structure of swarms of up to this many members (from
    #: the active views their announces carry) and tells a member of one component about a
    #: member of another (0: off); see the Bridge rule in pubmesh.proto.gossip.hyparview
    component_watch: int = 64
    #: Plumtree's message cache (iroh-gossip's message_cache_retention and
    #: message_id_retention): a payload is kept this long after it was first seen, to answer
    #: GRAFTs ...
    payload_retention: float = 30.0
    #: ... and its id this long, to recognise duplicates
    id_retention: float = 90.0
    #: one eviction also drops what is due within this many seconds (fewer timers)
    evict_slack: float = 3.0
    #: topic history (pubmesh.proto.history; not in the papers): a member answers each
    #: neighbour's history query at most once per this many seconds ...
    history_interval: float = 10.0
    #: ... with at most this many publications (the newest the request asks for)
    history_items: int = 1024

    def __post_init__(self) -> None:
        if self.fanout < 1:
            raise ValueError(f"fanout must be ≥ 1, got {self.fanout}")
        if self.active_view < 0:
            raise ValueError(f"active_view must be ≥ 0 (0 = fanout + 1), got {self.active_view}")
        if self.passive_view < 0:
            raise ValueError(f"passive_view must be ≥ 0, got {self.passive_view}")
        if self.arwl < 0 or not 0 <= self.prwl <= self.arwl:
            raise ValueError(f"need 0 ≤ prwl ≤ arwl, got prwl={self.prwl} arwl={self.arwl}")
        if self.history_items < 0 or self.history_interval < 0:
            raise ValueError("history_items and history_interval must be ≥ 0")
        if self.forced_evictions < 0:
            raise ValueError(f"forced_evictions must be ≥ 0, got {self.forced_evictions}")
        if self.shuffle_ttl < 0 or self.shuffle_ka < 0 or self.shuffle_kp < 0:
            raise ValueError("shuffle_ttl, shuffle_ka and shuffle_kp must be ≥ 0")
        for name in (
            "shuffle_interval",
            "ihave_timeout1",
            "ihave_timeout2",
            "join_timeout",
            "failed_memory",
            "payload_retention",
            "evict_slack",
            "beacon_interval",
            "root_timeout",
            "temp_ttl",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_unknown_grafts < 1:
            raise ValueError(f"max_unknown_grafts must be ≥ 1, got {self.max_unknown_grafts}")
        if self.cache_bytes < 1:
            raise ValueError(f"cache_bytes must be ≥ 1, got {self.cache_bytes}")
        if self.max_announced < 1:
            raise ValueError(f"max_announced must be ≥ 1, got {self.max_announced}")
        if self.tree not in TREES:
            raise ValueError(f"tree must be one of {', '.join(TREES)}, got {self.tree!r}")
        if self.optimization_threshold < 1:
            raise ValueError("optimization_threshold must be ≥ 1")
        if self.ihave_batch_interval < 0:
            raise ValueError("ihave_batch_interval must be ≥ 0")
        if self.prune_guard < 0:
            raise ValueError(f"prune_guard must be ≥ 0, got {self.prune_guard}")
        if self.id_retention < self.payload_retention:
            raise ValueError(
                f"id_retention ({self.id_retention}) must be ≥ payload_retention "
                f"({self.payload_retention}): an id outlives its payload"
            )
        if self.announce_every < 0:
            raise ValueError(f"announce_every must be ≥ 0, got {self.announce_every}")
        if self.component_watch < 0:
            raise ValueError(f"component_watch must be ≥ 0, got {self.component_watch}")
        if self.directory_size < 1:
            raise ValueError("directory_size must be ≥ 1")
        if self.directory_topics < 1 or self.directory_per_node < 1:
            raise ValueError("directory_topics and directory_per_node must be ≥ 1")

    @property
    def active_size(self) -> int:
        return self.active_view or self.fanout + 1

    def inert(self) -> dict[str, str]:
        """Parameters these values make unused, each with the reason (``pubmesh sweep`` warns
        when a swept one changes nothing)."""
        found: dict[str, str] = {}
        if self.active_view:
            found["fanout"] = (
                f"active_view is set ({self.active_view}), so fanout is unused "
                "(the active view holds fanout + 1 nodes only when active_view = 0)"
            )
        if self.flood:
            for name in (
                "ihave_timeout1",
                "ihave_timeout2",
                "ihave_batch_interval",
                "optimization",
                "optimization_threshold",
                "prune_guard",
                "tree",
                "beacon_interval",
                "root_timeout",
                "temp_ttl",
            ):
                found[name] = f"flood = true sends no IHAVE and no PRUNE, so {name} is unused"
            return found
        if self.tree == "plumtree":
            for name in ("beacon_interval", "root_timeout", "temp_ttl"):
                found[name] = f'tree = "plumtree" sends no beacons, so {name} is unused'
        else:
            for name in ("optimization", "optimization_threshold"):
                found[name] = (
                    f'tree = "rooted" is breadth-first already and runs no §3.8 optimization, '
                    f"so {name} is unused"
                )
        if self.tree == "plumtree" and not self.optimization:
            found["optimization_threshold"] = (
                "optimization = false, so optimization_threshold is unused"
            )
        return found
