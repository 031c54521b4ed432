"""pubmesh: decentralized publish/subscribe on self-organizing overlay networks.

The protocols live in :mod:`pubmesh.proto` as sans-IO state machines, composed into
stacks in :mod:`pubmesh.stacks`; :mod:`pubmesh.sim` drives them deterministically,
:mod:`pubmesh.trace` records every run as Parquet and :mod:`pubmesh.analysis` turns
traces into metrics on Spark.

Package map:

* ``proto`` — the protocols: sans-IO state machines behind one handler contract.
* ``stacks`` — the stacks as the runtimes see them: each one's StackSpec, and the registry.
* ``scenario`` — what a run is: the scenario model and the workload plan drawn from it.
* ``sim`` — the deterministic discrete-event simulator and the runner of one scenario.
* ``net`` — the same stacks over real TCP, one node per process.
* ``trace`` — trace v1: the schema both runtimes write and the buffered Parquet writer.
* ``analysis`` — trace v1 to metrics, sweeps, the demo and reports, on Spark.
* ``api`` — the Python API: ``pubmesh.Node``, a pubmesh node inside an asyncio application.
* ``cli`` — the ``pubmesh`` command (``__main__`` makes ``python -m pubmesh`` the same).
* ``harness`` — the protocol test harness: stack nodes over a message pool the test drives.
* ``durable`` — what a node keeps across its lives, for both runtimes.
* ``catalog`` — the scenarios and grids pubmesh ships (``pubmesh/scenarios``), found by name.
* ``errors`` — UserError and its kinds: errors a user can act on (one line, exit status 2).
* ``settings`` — process-wide settings read from the environment, in one place.
* ``private`` — files only their owner can read, written only where they are named.
* ``tomlio`` — the project's one TOML writer (scenarios, ``--set`` overrides).
* ``typed`` — values read into the types a dataclass declares (scenario TOML, control JSON).
"""

__version__ = "0.1.0"

__all__ = ["Congestion", "Lagged", "Node", "Receipt", "UserError", "__version__"]

#: the application API's names (pubmesh.api)
_API = frozenset({"Congestion", "Lagged", "Node", "Receipt"})


def __getattr__(name: str) -> object:
    # `pubmesh.Node` is the application API (pubmesh.api); import it on first use so that the
    # simulator and the analysis do not pay for asyncio networking they do not use.
    if name == "UserError":  # what every entry point raises for input it refuses
        from pubmesh.errors import UserError

        return UserError
    if name in _API:
        import pubmesh.api

        return getattr(pubmesh.api, name)
    raise AttributeError(f"module 'pubmesh' has no attribute {name!r}")
