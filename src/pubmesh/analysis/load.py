"""Reading trace v1 into Spark, after checking it can be read.

Two layouts are accepted, and any mix of them in one ``pubmesh analyze`` call:

* a *run directory* as ``pubmesh sim`` and ``pubmesh cluster`` write it:
  ``RUN_DIR/<table>/part-00000.parquet``, every file holding a ``run_id`` column;
* a *sweep dataset*: ``DATASET/<table>/run_id=<id>/part-*.parquet``, the files without the
  ``run_id`` column (Hive-style partitioning by run, as ``pubmesh sweep`` writes it).

Spark reports a bad file deep inside a Java stack trace, long after the job started. So every
file's footer and schema are checked first with pyarrow (cheap: footers only), and the ``runs``
table is read whole (one row a run): a missing table, a file that is not Parquet, a column of
the wrong type, a ``schema_version`` newer than this build, an empty run, each becomes one
:class:`TraceError` line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from pubmesh.analysis.metrics import Trace
from pubmesh.errors import TraceError
from pubmesh.trace.schema import REQUIRED_TABLES, SCHEMA_VERSION, SCHEMAS, TABLES


@dataclass(frozen=True)
class TraceSource:
    """One checked run directory or sweep dataset."""

    root: Path
    partitioned: bool
    tables: dict[str, list[Path]]
    run_ids: tuple[str, ...]
    messages_modes: frozenset[str]

    @property
    def size(self) -> int:
        """Bytes of Parquet this source holds."""
        return sum(f.stat().st_size for files in self.tables.values() for f in files)


def spark_type(arrow: pa.DataType) -> T.DataType:
    if pa.types.is_string(arrow):
        return T.StringType()
    if pa.types.is_int64(arrow):
        return T.LongType()
    if pa.types.is_int32(arrow):
        return T.IntegerType()
    if pa.types.is_float64(arrow):
        return T.DoubleType()
    if pa.types.is_boolean(arrow):
        return T.BooleanType()
    if pa.types.is_list(arrow):
        return T.ArrayType(spark_type(arrow.value_type))
    raise TypeError(f"no Spark type for {arrow}")


def spark_schema_of(schema: pa.Schema) -> T.StructType:
    """An Arrow schema as Spark's (every column nullable)."""
    return T.StructType([T.StructField(f.name, spark_type(f.type), nullable=True) for f in schema])


def spark_schema(table: str) -> T.StructType:
    return spark_schema_of(SCHEMAS[table])


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.parquet") if p.is_file())


def _check_file(path: Path, table: str, partitioned: bool) -> None:
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "unreadable"
        raise TraceError(f"{path}: not a readable Parquet file ({reason})") from None
    want = SCHEMAS[table]
    for field in want:
        if partitioned and field.name == "run_id":
            continue
        index = schema.get_field_index(field.name)
        if index < 0:
            raise TraceError(f"{path}: column {field.name!r} is missing (trace v1 {table} table)")
        if not schema.field(index).type.equals(field.type):
            raise TraceError(
                f"{path}: column {field.name!r} is {schema.field(index).type}, "
                f"trace v1 wants {field.type}"
            )


def inspect(root: Path | str) -> TraceSource:
    """Check a run directory or sweep dataset; raise :class:`TraceError` naming what is wrong."""
    root = Path(root)
    if not root.exists():
        raise TraceError(f"{root}: no such run directory")
    if not root.is_dir():
        raise TraceError(f"{root}: not a directory (give the run directory, not a file in it)")
    tables: dict[str, list[Path]] = {}
    partitioned = False
    for table in TABLES:
        directory = root / table
        if not directory.is_dir():
            continue
        files = _files(directory)
        if not files and table in REQUIRED_TABLES:
            raise TraceError(f"{directory}: table has no Parquet files")
        if any(p.parent != directory for p in files):
            partitioned = True
        tables[table] = files
    if "runs" not in tables:
        raise TraceError(
            f"{root}: not a trace v1 run directory (no runs/ table); "
            "give a directory written by pubmesh sim, cluster or sweep"
        )
    for table in REQUIRED_TABLES:
        if table not in tables:
            raise TraceError(f"{root / table}: missing table (trace v1 requires it)")
    for table, files in tables.items():
        for path in files:
            _check_file(path, table, partitioned and path.parent != root / table)

    runs = read_files(tables["runs"], partitioned, "runs")
    if runs.num_rows == 0:
        raise TraceError(f"{root / 'runs'}: empty run (no rows); nothing to analyse")
    versions = runs.column("schema_version").to_pylist()
    newest = max(v for v in versions if v is not None) if any(versions) else None
    if newest is None:
        raise TraceError(f"{root / 'runs'}: schema_version is missing")
    if newest > SCHEMA_VERSION:
        raise TraceError(
            f"{root / 'runs'}: schema_version {newest} is newer than this pubmesh reads "
            f"({SCHEMA_VERSION}); upgrade pubmesh"
        )
    modes = frozenset(m for m in runs.column("messages_mode").to_pylist() if m)
    for mode, table in (("full", "messages"), ("counts", "message_counts")):
        if mode in modes and table not in tables:
            raise TraceError(f"{root / table}: missing table (runs say messages_mode={mode!r})")
    run_ids = tuple(str(r) for r in runs.column("run_id").to_pylist())
    return TraceSource(root, partitioned, tables, run_ids, modes)


def read_table(sources: list[TraceSource], table: str) -> pa.Table:
    """Table ``table`` of every source, whole, with pyarrow (for the small ones: ``runs``,
    ``faults``); an empty table where no source has it."""
    parts = [
        read_files(source.tables[table], source.partitioned, table)
        for source in sources
        if source.tables.get(table)
    ]
    return pa.concat_tables(parts) if parts else SCHEMAS[table].empty_table()


def read_files(files: list[Path], partitioned: bool, name: str) -> pa.Table:
    """Table ``name``'s ``files`` (of a sweep dataset's partitions when ``partitioned``: their
    run_id from the partition's path), in trace v1's columns and types; a file pyarrow cannot
    read is one :class:`TraceError` naming it."""
    parts = []
    for path in files:
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as error:
            raise TraceError(f"{path}: not a readable Parquet file ({error})") from None
        if "run_id" not in table.column_names:
            run_id = path.parent.name.partition("=")[2] if partitioned else ""
            table = table.append_column("run_id", pa.array([run_id] * table.num_rows))
        parts.append(table.select([f.name for f in SCHEMAS[name]]).cast(SCHEMAS[name]))
    return pa.concat_tables(parts)


def check_distinct(sources: list[TraceSource]) -> None:
    """Refuse a run given twice (in two sources, or twice the same source)."""
    seen: dict[str, Path] = {}
    for source in sources:
        for run_id in source.run_ids:
            if run_id in seen:
                raise TraceError(
                    f"{source.root}: run {run_id} is also in {seen[run_id]}; give each run once"
                )
            seen[run_id] = source.root


def load(spark: SparkSession, sources: list[TraceSource]) -> Trace:
    """The union of every source's tables as Spark DataFrames (empty where absent)."""
    check_distinct(sources)
    frames: dict[str, DataFrame] = {}
    for table in TABLES:
        schema = spark_schema(table)
        parts = [
            spark.read.schema(schema).parquet(str((source.root / table).resolve()))
            for source in sources
            if source.tables.get(table)
        ]
        frame = parts[0] if parts else _empty(spark, schema)
        for part in parts[1:]:
            frame = frame.unionByName(part)
        frames[table] = frame.select(*schema.fieldNames())
    return Trace(**frames)


def _empty(spark: SparkSession, schema: T.StructType) -> DataFrame:
    """An empty table of ``schema`` built in the JVM: ``createDataFrame([])`` is a Python RDD,
    and every job that scanned it started Python workers for nothing."""
    from pyspark.sql import functions as F

    return spark.range(0).select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in schema))
