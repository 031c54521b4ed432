"""pubmesh.proto: the protocols, as sans-IO state machines with one handler shape.

Package map:

* ``core`` — the protocol contract: events, outputs, messages, timers, parts and StackNode.
* ``history`` — topic history for late subscribers: the request, its text form, its messages.
* ``content`` — content filters shared by the content-based stacks (chord, brokertree).
* ``gossip`` — the gossip stack: topic pub/sub over HyParView + Plumtree, a swarm per topic.
* ``skipring`` — the skipring stack: the supervised skip ring of Feldmann et al.
* ``chord`` — the chord stack: content-based pub/sub over a Chord-shaped overlay (Terpstra et
  al.).
* ``brokertree`` — the brokertree stack: δ-fault-tolerant content-based pub/sub over a broker
  tree (Kazemzadeh & Jacobsen).
* ``relay`` — the relay layer of the ``clique`` and ``d2g`` stacks.
* ``clique`` — the clique stack: topic groups as self-stabilizing cliques in the relay model
  (Build-Clique, docs/protocols/relay.md). A directory without ``__init__.py``; its modules:
  ``node`` (CliqueNode, the stack node), ``instance`` (Instance, one Build-Clique instance:
  the state the node and its parts share), ``build`` (the joining part: Join, AskForIntro,
  Introduce), ``leave`` (the Leave part), ``ops`` (RelayOps, what the parts may ask of the
  node, and BuildRules), ``messages`` (the group messages of clique and d2g),
  ``params`` (the ``[stack.clique]`` table), ``corruption`` (corrupted initial states) and
  ``legitimacy`` (the legitimate states).
* ``d2g`` — the d2g stack: topic groups as self-stabilizing random digraphs of diameter about
  2 (Build-D2G), on the clique's machinery. A directory without ``__init__.py``; its modules:
  ``node`` (D2GNode), ``build`` (BuildD2G, its joining rules), ``messages`` (Build-D2G's own
  group messages), ``params`` (the
  ``[stack.d2g]`` table), ``corruption`` (corrupted initial states, warm start) and
  ``legitimacy`` (the legitimate states and the graph figures).
"""
