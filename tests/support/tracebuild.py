"""Tiny hand-built trace v1 tables as Spark DataFrames, for metric tests with known answers."""

from __future__ import annotations

from typing import Any

from pubmesh.analysis.load import spark_schema
from pubmesh.analysis.metrics import Trace
from pubmesh.trace.schema import SCHEMAS, TABLES

RUN = "r1"


def frame(spark: Any, table: str, rows: list[dict[str, Any]]) -> Any:
    """A DataFrame of ``table`` with the trace v1 schema; omitted columns are null and
    run_id defaults to "r1"."""
    names = [f.name for f in SCHEMAS[table]]
    full = [tuple({"run_id": RUN, **row}.get(n) for n in names) for row in rows]
    return spark.createDataFrame(full, spark_schema(table))


def trace(spark: Any, **tables: list[dict[str, Any]]) -> Trace:
    """A Trace with the given tables (row dicts) and every other table empty; ``runs``
    defaults to one run "r1" of 10 s with a full message trace."""
    tables.setdefault(
        "runs",
        [{"stack": "gossip", "runtime": "sim", "nodes": 4, "seed": 1, "scenario": "",
          "schema_version": 1, "duration": 10.0, "messages_mode": "full"}],
    )  # fmt: skip
    return Trace(**{t: frame(spark, t, tables.get(t, [])) for t in TABLES})
