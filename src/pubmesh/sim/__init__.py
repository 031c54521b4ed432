"""pubmesh.sim: the deterministic discrete-event simulator that drives the stacks.

Package map:

* ``runner`` — run one scenario end to end: simulate, write the trace and ``run.json``, show
  progress.
* ``engine`` — Simulation: the deterministic discrete-event simulator (one queue of events
  ordered by time and sequence number).
* ``actions`` — what a scenario has the simulator do besides its nodes' own events: the warm
  start, the plan's events, the ``[init]`` corruption and the snapshots.
* ``sizes`` — the trace's message-size estimate, compiled once per message class.
* ``fastinit`` — faster construction of the messages and outputs of the simulator's hot path.
* ``insiders`` — colluding insiders: an adversary model for the gossip stack (tests, benchmark).
"""
