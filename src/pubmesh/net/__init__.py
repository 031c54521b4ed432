"""pubmesh.net: the protocols of :mod:`pubmesh.proto` over real TCP, one node per process.

The same stack objects the simulator drives run here unchanged; this package adds sockets,
clocks, timers and what a real network needs (keys or certificates, signatures, ACLs, limits,
a trace, a shell). One publication's path, from a shell's ``publish`` to a subscriber's
stdout, is drawn in docs/design.md ("One publication through pubmesh.net").

The package map, from the bottom up:

==================  =========================================================================
module              what it does
==================  =========================================================================
``address``         node ids are addresses: ``ip << 16 | port`` (127.0.0.1:7000 is
                    0x7F000001_1B58), so a protocol can send to any id it learns
``codec``           every registered message type as a msgpack array of its fields, checked
                    against the registered schema on the way in (no pickle, no eval)
``framing``         the data frame, whole: length prefix, header, sealing and opening in each
                    security mode (AES-256-GCM with a shared key; TLS in identity mode), the
                    signed publication's block
``security``        shared-key mode: the cluster key (128+ random bits) and the four-frame
                    handshake (challenge-response both ways, per-direction session keys)
``identity``        identity mode's certificates: an authority, each node's key and
                    certificate, the checks a certificate must pass
``tls``             identity mode's TLS 1.3 session, driven by the connection over its socket
``revocation``      the authority's revocation list and how it spreads to every node
``signing``         signed publications: Merkle batches, the checks a copy passes (bound id,
                    fresh, not replayed, signature), the ids delivered within the window
``acl``             who may publish and subscribe on which topics
``connection``      one TCP connection: handshake, frames both ways, goodbyes; it reaches the
                    rest only through its ``Hub``
``transport``       the hub: the node's connections, dials with backoff, accepts, limits on
                    strangers, failure detection, flow control, troubles
``admission``       the checks on what enters and leaves the protocol: commands, room (flow
                    control), copies of publications (signature, ACL), charges and bans
``runtime``         :class:`~pubmesh.net.runtime.NodeRuntime`: one stack node driven by the event
                    loop through ``handle(event, now)``
``runtime_stats``   the runtime's counters as one typed object
``events``          the node's ``net.*`` events, rate-limited, for people and for JSON
``store``           the data directory: what a node remembers across restarts
``tracing``         a node's partial trace v1, in segments that survive SIGKILL
``metrics``         live metrics over HTTP in the OpenMetrics format, for Prometheus
``output``          stdout as lines a slow reader cannot make the node wait for
``control``         the typed control protocol between a node process and its controller:
                    one frozen dataclass per JSON line
``node``            ``pubmesh node``: its options, and the process (a shell on a terminal,
                    JSON lines otherwise)
``cluster``         ``pubmesh cluster``: options, child processes, the controller, the live
                    table, the workload plan and the gathered run directory
``command``         the CLI wiring (:func:`~pubmesh.net.command.register`)
==================  =========================================================================

Applications use :class:`pubmesh.api.Node` (also ``pubmesh.Node``).
"""
