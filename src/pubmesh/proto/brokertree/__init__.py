"""The brokertree stack's protocol: δ-fault-tolerant content-based publish/subscribe over a
broker tree with exactly-once, per-publisher in-order delivery (Kazemzadeh & Jacobsen), built
to docs/protocols/brokertree.md. The stack's spec is :mod:`pubmesh.stacks.brokertree`.

Package map:

* ``node`` — BrokerTreeNode: the stack node; takes every input, composes the six parts below
  and routes what one means for another (its module essay says how it works and where it
  deviates).
* ``shared`` — TreeState, the state the parts share, and the typed effects one part has on
  another, which the node routes.
* ``connections`` — sessions, routes and link activation (a part).
* ``recovery`` — the LSeq handshake, subscription summaries, whole-table transfer (a part).
* ``flow`` — check-out with legitimate seqVects, stalls, confirmation by rule CF (a part).
* ``purge`` — Purger: sends depth acknowledgements and purges publications (a part).
* ``client`` — a client's subscriptions, publications and deliveries (a part; a broker's is
  empty).
* ``history`` — a client's topic history: publisher-side caches queried through the brokers
  (a part).
* ``session`` — FIFO, loss-free sessions over non-FIFO links, heartbeats, a failure detector.
* ``topology`` — the broker tree (the spec's seeded generator) and each node's topology map.
* ``view`` — one node's view of the broker tree: paths, distances, branches and frontiers.
* ``checkout`` — the check-out queue every forwarded message enters once.
* ``table`` — the subscription routing table (⟨pred, from, seqVect⟩ per subscription) and
  recipient sets.
* ``seqvect`` — sequence vectors: legitimacy, duplicate detection and ``from``.
* ``dack`` — DepthAcks: the depth-acknowledgement reports a node keeps and trades.
* ``state`` — the shared vocabulary: where a node is in its life, a session's check-out state.
* ``wire`` — checks of the values a peer's frame carries, turned into the form the node keeps.
* ``messages`` — the wire messages (tags 400–499).
* ``params`` — BrokerTreeParams: the ``[stack.brokertree]`` table of a scenario.
* ``guarantee`` — which lost (publication, subscriber) pairs the δ-fault-tolerance guarantee
  covers (pure functions, for the tests and the SRDS'11 benchmark).
"""
