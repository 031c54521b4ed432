"""pubmesh: decentralized publish/subscribe on self-organizing overlay networks.

The protocols live in :mod:`pubmesh.proto` as sans-IO state machines, composed into
stacks in :mod:`pubmesh.stacks`; :mod:`pubmesh.sim` drives them deterministically,
:mod:`pubmesh.trace` records every run as Parquet and :mod:`pubmesh.analysis` turns
traces into metrics on Spark.
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
