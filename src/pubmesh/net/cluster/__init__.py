"""``pubmesh cluster``: a local cluster of node processes, a workload, faults, one trace.

How it works
============
The controller starts N ``pubmesh node --control`` processes on 127.0.0.1 (any free ports;
each reports its address, which is its id), all with the same cluster key (``--key``,
``$PUBMESH_KEY`` or a fresh random one handed down through the environment). It drives them
through their stdin with JSON commands and follows their stdout (answers, stats lines every
half second) — the control protocol of :mod:`pubmesh.net.control` — then:

1. boots the nodes at the start times of the workload plan (:mod:`pubmesh.net.cluster.workload`: the
   same draws as the simulator, so one scenario means one workload in both runtimes),
   infrastructure and contact nodes first, and subscribes them;
2. keeps the workload's clock, as the simulator does: at the first publication it says in one
   line (and traces) which subscribers have no neighbour in a topic yet, and publishes on
   time; only ``--wait-overlay S`` waits up to S seconds for the overlay and shifts the rest
   of the schedule by the wait (``run.json`` says by how much; :mod:`.controller`);
3. issues the publications at their planned times from their planned publishers, SIGKILLs the
   planned victims at ``--kill FRACTION@SECONDS`` (and runs any ``[[faults]]`` of kind crash
   or leave), all while a live table shows every node's neighbours and deliveries;
4. at ``--duration`` tells every live node to stop (without leaving, as a simulation just
   ends), waits for them to write their partial traces, and gathers one run directory
   (:mod:`pubmesh.net.cluster.gather`): trace v1, ``runtime = "net"``, times from the run's start,
   node ids 0..N-1 in launch order — what ``pubmesh analyze`` reads.

No orphans, ever: every child runs in its own process group, and however the controller ends,
its children end with it (:mod:`pubmesh.net.cluster.children`).

Modules
=======
``options``     the command line, :class:`ClusterConfig`, ``--kill``, the scenario as data
``children``    one node process (:class:`Child`, :class:`ChildState`) and its supervision
``controller``  :class:`Cluster`: the run, played as a typed timeline of events
``live``        the live table and the summary
``workload``    the cluster's view of :mod:`pubmesh.scenario.workload`, the one planner both
                runtimes run
``gather``      the partial traces of a cluster into one run directory (runtime "net")
``netns``       each node in a network namespace of its own, on veth pairs (``--netns``)
"""
