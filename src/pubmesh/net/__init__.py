"""pubmesh.net: the protocols of :mod:`pubmesh.proto` over real TCP, one node per process.

The same stack objects the simulator drives run here unchanged; this package only adds
sockets, clocks and timers (docs/design.md, Layers). From the bottom up:

=================  ==========================================================================
module             what it does
=================  ==========================================================================
``address``        node ids are addresses: ``ip << 16 | port`` (127.0.0.1:7000 is
                   0x7F000001_1B58), so a protocol can send to any id it learns
``codec``          every registered message type as a msgpack array of its fields, checked
                   against the annotations on the way in (no pickle, no eval)
``framing``        length-prefixed frames: version, type tag, sequence number, send time,
                   encrypted payload, tag; oversized lengths refused before reading
``security``       the cluster key (128+ random bits, passphrases refused): HMAC-SHA256
                   challenge-response both ways, the dialer proving first, per-connection and
                   per-direction frame keys (AES-256-GCM), replay-proof sequence numbers
``transport``      asyncio connections: dial with backoff, accept, graceful goodbyes, bounded
                   queues, peer-down notices (the papers' failure detector)
``runtime``        :class:`~pubmesh.net.runtime.NodeRuntime`: one stack node driven by the
                   event loop through ``handle(event, now)``; with it ``admission`` (the checks
                   on publications, subscriptions and signed copies, flow control's room),
                   ``events`` (its ``net.*`` events, rate-limited) and ``runtime_stats`` (its
                   counters)
``tracing``        a node's partial trace v1, in segments that survive SIGKILL
``control``        the typed control protocol between a node process and its controller:
                   one frozen dataclass per JSON line, ``encode``/``decode``
``node_cli``       ``pubmesh node``: a shell on a terminal, JSON lines otherwise
``workload``       the cluster's view of :mod:`pubmesh.scenario.workload`, the one planner both
                   runtimes run
``cluster``        ``pubmesh cluster``: options, child processes (an enum state each), the
                   controller with a typed timeline, the live table
``gather``         the partial traces of a cluster into one run directory (runtime "net")
``command``        the CLI wiring (:func:`~pubmesh.net.command.register`)
=================  ==========================================================================

Applications use :class:`pubmesh.api.Node` (also ``pubmesh.Node``).
"""
