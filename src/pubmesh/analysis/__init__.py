"""pubmesh.analysis: from trace v1 to metrics, sweeps and reports, on Spark (docs/design.md).

Package map:

* ``command`` — the Spark subcommands: ``pubmesh analyze``, ``pubmesh sweep``, ``pubmesh demo``.
* ``job`` — ``pubmesh analyze``: one Spark job from trace v1 to metrics, a summary and a report.
* ``load`` — reading trace v1 into Spark (run directories, sweep datasets), after checking it.
* ``metrics`` — the metrics of docs/design.md, as pure ``DataFrame -> DataFrame`` functions.
* ``runtask`` — a small run's metrics in one Spark task, over its tables in memory.
* ``graph`` — graph figures of one overlay snapshot (run inside Spark tasks).
* ``sweep`` — ``pubmesh sweep``: a base scenario × a parameter grid × seeds, as Spark tasks.
* ``demo`` — ``pubmesh demo``: the default experiment (every stack × failed fraction), a sweep,
  and its report.
* ``compare`` — the stack comparison that opens the demo report.
* ``report`` — reports: a self-contained ``report.html`` and rich tables.
* ``charts`` — the reports' interactive Plotly charts (the bundle inlined once per page).
* ``draw`` — ``--static`` reports' PNGs, drawn by Kaleido in a child process with a deadline.
* ``progress`` — an analysis's progress on the terminal: a bar over its steps, Spark's stages.
* ``spark`` — the Spark session the analysis runs on (local mode, or ``--master`` a cluster).
* ``warm`` — a warm Spark to come back to: one long-lived local Spark Connect server per user.
* ``standalone`` — a Spark standalone cluster on this machine (for the tests, and to try
  ``--master spark://...``).
"""
