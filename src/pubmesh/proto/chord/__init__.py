"""The ``chord`` stack: content-based publish/subscribe over a Chord-shaped overlay
(Terpstra et al., DEBS 2003), built to docs/protocols/chord.md.

Package map:

* ``node`` — ChordNode: the stack node; dispatches its inputs to the parts below and routes
  what one means for another (its module essay says how the protocol works).
* ``shared`` — ChordState, the state the parts share (the node's life, subscriptions and the
  overlay they all read), and the typed effects one part has on another.
* ``ring`` — ChordRing: successor list, fingers, edges and ranges, maintenance subscriptions,
  stabilize and leaves (a part; a failure is the node's step across the parts).
* ``joins`` — ChordJoins: the join, location notifications and replies, join notices, the far
  fingers' lookups and fix_fingers (a part).
* ``filters`` — ChordFilters: the edge filters and their clipped variants, the loopback, h,
  and the RespChange/FilterUpdate exchange (a part).
* ``publish`` — ChordPublisher: publish and routing down the publisher's binomial tree (a part).
* ``history`` — ChordHistory: topic history, publisher-side caches queried down the late
  subscriber's own binomial tree (a part).
* ``life`` — a node's life: its phases and its timers.
* ``keys`` — the key space (keys computed from node ids) and the arcs of the ranges.
* ``routing`` — edge filters: the three routing strategies, the union filter h, and matching.
* ``messages`` — the wire messages (tags 300–399, and 540–541 for the topic history).
* ``params`` — ChordParams: the ``[stack.chord]`` table of a scenario.
* ``legitimacy`` — the quiet predicate Q of the stack (spec §11).
* ``warm`` — warm start: a quiet, legitimate overlay built by construction.
"""
