"""pubmesh.stacks: the stacks as the runtimes, the analysis and the demo see them.

Each module but ``base`` is one stack's spec module (its ``SPEC = register(StackSpec(...))``);
the protocols and nodes themselves live in :mod:`pubmesh.proto`.

Package map:

* ``base`` — one pub/sub interface for every stack: StackSpec, the registry and the loading of
  spec modules (this package's and those of ``$PUBMESH_STACK_MODULES``).
* ``gossip`` — the ``gossip`` stack: HyParView + Plumtree per topic swarm.
* ``skipring`` — the ``skipring`` stack: the self-stabilizing supervised skip ring.
* ``chord`` — the ``chord`` stack: content-based pub/sub over a Chord-shaped overlay.
* ``brokertree`` — the ``brokertree`` stack: content-based pub/sub over a broker tree; brokers
  are nodes 0 … B−1, the workload's nodes its clients.
* ``clique`` — the ``clique`` stack: topic groups as self-stabilizing cliques (relay model).
* ``d2g`` — the ``d2g`` stack: topic groups as self-stabilizing random digraphs of diameter
  about 2 (relay model).
"""
