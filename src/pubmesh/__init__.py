"""pubmesh: decentralized publish/subscribe on self-organizing overlay networks.

The protocols live in :mod:`pubmesh.proto` as sans-IO state machines, composed into
stacks in :mod:`pubmesh.stacks`; :mod:`pubmesh.sim` drives them deterministically,
:mod:`pubmesh.trace` records every run as Parquet and :mod:`pubmesh.analysis` turns
traces into metrics on Spark.
"""

__version__ = "0.1.0"
