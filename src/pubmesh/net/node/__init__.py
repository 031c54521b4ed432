"""``pubmesh node``: one node in its own process, with a shell on a terminal.

On a terminal the node opens the shell of Henriques & Pamplona §3.1 (help, subscribe, unsubscribe,
publish, neighbors, stats, quit) and prints deliveries as they arrive. On a content-based stack
(chord) ``subscribe`` takes a content filter and ``publish`` attributes, as JSON objects ending
the line (``subscribe quotes {"price": {"lt": 100}}``, ``publish quotes tick {"price": 99}``);
a topic-based stack (gossip, skipring) refuses them with an error line. Otherwise it speaks JSON
lines: one object per line on stdout for what happens (``ready``, ``deliver``, ``net``,
``result``, ``stats``, ``bye``), and it reads commands from stdin, either as shell lines
(``publish news hello``) or as JSON objects (``{"op": "publish", "topic": "news", ...}``), so a
script or :mod:`pubmesh.net.cluster` can drive it. Both directions are the typed control
protocol of :mod:`pubmesh.net.control`.

SIGTERM (and Ctrl-C) make the node leave gracefully: it hands its stack the ``Leave`` command,
waits briefly for the leave protocol (the stack unsubscribes where it has one), closes its
connections with goodbyes and writes the rest of its trace.

``--control`` is the mode :mod:`pubmesh.net.cluster` uses: the node waits for a ``start`` op
before it boots, exits when its stdin closes (its cluster is gone) and asks the kernel to
signal it when its parent dies, so a cluster can never leave orphans behind.

Modules
=======
``options``   the command line (``add_parser``), :class:`~pubmesh.net.node.options.NodeOptions`
              and their checks, all before any socket opens
``process``   :class:`~pubmesh.net.node.process.NodeProcess`: the running node, its shell, its
              JSON lines, its stdin reader, and ``main`` (``python -m pubmesh.net.node``)
"""
