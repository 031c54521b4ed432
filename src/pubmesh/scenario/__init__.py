"""What a run is, shared by both runtimes, the planner and the analysis.

* :mod:`pubmesh.scenario.model`: the scenario (a TOML file's typed model, its parser and
  validation, ``--set`` overrides);
* :mod:`pubmesh.scenario.workload`: the workload plan drawn from a scenario (subscriptions,
  publications, faults), the same for the simulator and a real cluster.

Neither imports a runtime: the simulator (:mod:`pubmesh.sim`) and the network runtime
(:mod:`pubmesh.net`) import them.
"""
