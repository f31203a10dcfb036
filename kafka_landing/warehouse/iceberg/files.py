"""The Parquet files of a load, Spark's part: the landing hours' Avro files read (one read per
writer schema), their rows conformed to the table's schema and written as Parquet, one folder per
landing hour; and the table's other files written again when a widening cannot stay in metadata.
Nothing here commits: the files are the table's only once `commits` lists them.
"""

from __future__ import annotations

import json
import uuid

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from kafka_landing.errors import KafkaLandingError
from kafka_landing.handoff.manifests import LandedFile, Manifest
from kafka_landing.spark_setup import spark_readable, type_ddl
from kafka_landing.store.base import LandingStore
from kafka_landing.warehouse.backend import LoadError, SparkFactory
from kafka_landing.warehouse.iceberg.tables import DAY_CHARS, HOUR_COLUMN, Replaced, Tables, spans_hours
from kafka_landing.warehouse.schema_evolution import merge_schemas
from kafka_landing.warehouse.spark_types import ELEMENT, VALUE, Path, kind, zip_types


def with_columns(schema: dict, columns: tuple[str, ...]) -> dict:
    """`schema` with the partition columns last, as strings."""
    return {**schema, "fields": schema["fields"] + [{"name": c, "type": "string", "nullable": True, "metadata": {}}
                                                    for c in columns]}


def arrow_schema(schema: dict, columns: tuple[str, ...]):
    """The table's columns as Arrow (what pyiceberg takes), its partition columns last."""
    return to_arrow_schema(StructType.fromJson(with_columns(schema, columns)), timezone="UTC")


def read_landed(store: LandingStore, changed: dict[str, tuple[LandedFile, ...]], spark: SparkFactory, where: str,
               partition: str):
    """One Spark read per (landing hour, schema id) of the partition, each with its writer schema,
    and their schema merged: nothing is read yet (Spark reads as it writes)."""
    reads, schema = [], None
    session = None
    for hour, files in sorted(changed.items()):
        for sid in sorted({f.schema_id for f in files if f.rows}):
            session = session or spark()
            paths = [f.path for f in files if f.schema_id == sid and f.rows]
            reader = spark_readable(store.avro_schema(paths[0]))  # one header: the id's files share it
            df = session.read.format("avro").option("avroSchema", json.dumps(reader)) \
                .load([store.location(p) for p in paths])
            schema, _ = merge_schemas(schema, df.schema.jsonValue(), f"{where}, landing hour {hour}, schema id {sid}")
            reads.append((partition, hour, df))
    return reads, schema


def read_together(store: LandingStore, manifests: list[Manifest], spark: SparkFactory, where: str):
    """The landing hours' files, one Spark read per writer schema across all of them (each file's
    hour from its folder, `_kl_hour`), and each hour's schema: what `read_landed` gives one hour. The
    writer schema is read from each (hour, schema id)'s files, never assumed from the id."""
    by_schema: dict[str, list[str]] = {}  # reader schema (JSON) -> its files
    of_hour: dict[str, set[str]] = {}
    for m in manifests:
        for sid in sorted({f.schema_id for f in m.landed_files if f.rows}):
            paths = [f.path for f in m.landed_files if f.schema_id == sid and f.rows]
            reader = json.dumps(spark_readable(store.avro_schema(paths[0])), sort_keys=True)
            by_schema.setdefault(reader, []).extend(paths)
            of_hour.setdefault(m.partition, set()).add(reader)
    session, reads, spark_schema = spark(), [], {}
    hour = F.regexp_extract(F.col("_metadata.file_path"), rf"/{HOUR_COLUMN}=([^/]+)/[^/]+$", 1)
    for reader, paths in by_schema.items():
        df = session.read.format("avro").option("avroSchema", reader).load([store.location(p) for p in paths])
        spark_schema[reader] = df.schema.jsonValue()
        reads.append((None, None, df.withColumn("_kl_hour", hour)))
    schemas = {}
    for partition, readers in of_hour.items():
        schema = None
        for reader in sorted(readers):
            schema, _ = merge_schemas(schema, spark_schema[reader], f"{where}, landing hour {partition}")
        schemas[partition] = schema
    return reads, schemas


def only_hours(reads: list, hours: list[str]) -> list:
    """`read_together`'s reads, of these landing hours only."""
    return [(p, h, df.where(F.col("_kl_hour").isin(hours))) for p, h, df in reads]


def write_parquet(tables: Tables, reads: list, schema: dict, staging: str) -> None:
    """The rows of `reads` ((partition, landing hour, dataframe); hour None: the dataframe's
    `_kl_hour` column says it) under the table's schema, in `staging/_kl_hour=<hour>/` (`staging`
    a path or a gs:// URI), their partition columns kept in the data (`add_files` takes a file's
    partition from its column statistics): one Spark job."""
    df = None
    for partition, hour, part in reads:
        if hour is None:
            part = conform(part, with_columns(schema, ("_kl_hour",))).withColumn(HOUR_COLUMN, F.col("_kl_hour"))
        else:
            part = conform(part, schema).withColumns({HOUR_COLUMN: F.lit(hour), "_kl_hour": F.lit(hour)})
        if tables.column != HOUR_COLUMN:
            part = part.withColumn(tables.column, F.lit(partition))
        df = part if df is None else df.unionByName(part)
    hours = {h for _, h, _ in reads}
    if len(hours) == 1 and None not in hours:  # no partitioned write: Spark would sort the rows by a constant
        df.drop("_kl_hour").coalesce(1).write.mode("error").parquet(f"{staging}/_kl_hour={hours.pop()}")
        return
    df.repartition("_kl_hour").write.partitionBy("_kl_hour").mode("error").parquet(staging)  # a file each


def rewrite_table(tables: Tables, t, merged: dict, spark: SparkFactory, replaced: Replaced, where: str
                  ) -> tuple[str | None, list[str]]:
    """Every file of the table but the rows the load replaces read again and written under `merged`
    (one Spark job), to commit with the schema change; the old files stay for the snapshots before
    it. Each new file holds one partition, its columns kept in the data. (Its folder, relative to
    the root, for removing it if the commit loses; the files' locations.)"""
    from pyiceberg.expressions import Not

    scan = t.scan(row_filter=Not(replaced.expression()))
    tasks = list(scan.plan_files())
    old = [task.file.file_path for task in tasks]
    if not old:
        return None, []
    target = tables.rel(*t.name()[-2:], "data", f"_rewrite-{uuid.uuid4().hex}")
    copies = {f"_kl_{i}": c for i, c in enumerate(tables.columns)}
    # Read under the table's schema, as `spark_table` reads: left to itself, Spark takes one file's
    # schema for all, and a column added after that file was written would read as null everywhere.
    # A compacted file holds the replaced rows beside others: they are left out here, not by the plan.
    read = tables.parquet_reader(spark()).schema(from_arrow_schema(scan.projection().as_arrow())).parquet(*old)
    df = conform(read.filter(kept(replaced)), with_columns(merged, tables.columns))
    df.withColumns({k: F.col(c) for k, c in copies.items()}).repartition(*copies) \
        .write.partitionBy(*copies).mode("error").parquet(tables.location(target))
    paths = [tables.location(r) for r in tables.store.glob(f"{target}/{'/'.join(['*'] * len(copies))}/part-*.parquet")]
    got = tables.rows_in(paths)
    want = sum(task.file.record_count - (tables.rows_of(task.file, replaced) if spans_hours(t, task.file) else 0)
               for task in tasks)
    if got != want:
        raise LoadError(f"{where}: rewriting the table under its widened schema gave {got} rows, it holds "
                        f"{want}; nothing was committed. Look at {tables.location(target)}")
    return target, paths


def kept(replaced: Replaced):
    """The rows a load keeps, as a Spark filter: not `replaced` (null never equals a value)."""
    dropped = F.lit(True)
    for column, values in replaced.values:
        dropped = dropped & F.col(column).isin(list(values))
    return ~F.coalesce(dropped, F.lit(False))


def write_compacted(tables: Tables, schema, files: list[str], spark: SparkFactory, target: str,
                    replaced: Replaced | None = None) -> list[str]:
    """The rows of `files` (read under the table's `schema`, as `spark_table` reads), but the
    `replaced` ones, written again as one file per partition (event partition, or landing day),
    sorted by landing hour, under `target` (relative to the root): one Spark job. The new files'
    locations."""
    column = tables.column
    key = F.substring(HOUR_COLUMN, 1, DAY_CHARS) if column == HOUR_COLUMN else F.col(column)
    df = tables.parquet_reader(spark()).schema(from_arrow_schema(schema.as_arrow())).parquet(*files)
    if replaced is not None:
        df = df.filter(kept(replaced))
    df.withColumn("_kl_p", key).repartition("_kl_p").sortWithinPartitions("_kl_p", HOUR_COLUMN) \
        .write.partitionBy("_kl_p").mode("error").parquet(tables.location(target))
    return [tables.location(r) for r in tables.store.glob(f"{target}/*/part-*.parquet")]


def spark_table(tables: Tables, spark, t, snapshot_id: int | None = None):
    """Table `t` as a Spark DataFrame: its current snapshot, or `snapshot_id`'s (time travel), under
    that snapshot's schema. pyiceberg lists the snapshot's data files; Spark reads them as Parquet by
    column name under that schema: a column a file lacks reads as nulls, a decimal a file holds at a
    smaller precision reads at the table's, as an Iceberg reader reads files without field ids (every
    load's: Spark wrote them). What Iceberg's own Spark catalog would give, were there one that
    loads on Spark 4.2 (jvm/pom.xml). Exact for these tables: loads write no delete file, and every
    other widening rewrites the files in the commit that widens the schema."""
    scan = t.scan(snapshot_id=snapshot_id)
    schema = from_arrow_schema(scan.projection().as_arrow())
    tasks = list(scan.plan_files())
    if any(task.delete_files for task in tasks):
        raise KafkaLandingError(f"{'.'.join(t.name()[-2:])}: the snapshot holds delete files, which no load writes "
                                "and this reader does not apply")
    if not tasks:
        return spark.createDataFrame([], schema)
    return tables.parquet_reader(spark).schema(schema).parquet(*[task.file.file_path for task in tasks])


def conform(df: DataFrame, schema: dict) -> DataFrame:
    """The rows under the table's schema: its columns in its order, each value widened to the
    column's type (`schema_evolution`), nested fields and columns the rows lack as typed nulls.
    Expressions only: Spark does it in the JVM as it writes. Casts name their types as DDL
    (`spark_setup.type_ddl`), so every file of a table has the one Spark schema."""
    have = df.schema.jsonValue()
    columns = zip_types(have, schema, _conformer)  # at the root: each column's conformer
    present = {f["name"] for f in have["fields"]}
    return df.select(*[columns[f["name"]](F.col(f["name"]) if f["name"] in present else None).alias(f["name"])
                       for f in schema["fields"]])


def _conformer(path: Path, have, want, inner: dict):
    """What makes a value of Spark type `have` one of `want` (`zip_types`' node): a function of its
    column, None where the rows lack it; at the root, the columns' own (`conform` selects them)."""
    if not path:
        return inner
    if want is None:
        return None  # a field the table's type lacks: left out by its struct
    if have is None:
        return lambda _col: F.lit(None).cast(type_ddl(_data_type(want)))
    if have == want:
        return lambda col: col
    ddl = type_ddl(_data_type(want))
    if kind(want) == "struct" and kind(have) == "struct":
        present = {f["name"] for f in have["fields"]}
        return lambda col: F.when(col.isNull(), F.lit(None)).otherwise(F.struct(*[
            inner[f["name"]](col.getField(f["name"]) if f["name"] in present else None).alias(f["name"])
            for f in want["fields"]])).cast(ddl)
    if kind(want) == "array" and kind(have) == "array":
        return lambda col: F.transform(col, inner[ELEMENT]).cast(ddl)
    if kind(want) == "map" and kind(have) == "map":
        return lambda col: F.transform_values(col, lambda _k, v: inner[VALUE](v)).cast(ddl)
    return lambda col: col.cast(ddl)  # a widening merge_schemas allowed: long -> double, string -> binary, decimals


def _data_type(t):
    """Spark type `t` (its JSON) as pyspark's type object, which `type_ddl` names."""
    return StructType.fromJson({"type": "struct", "fields": [
        {"name": "t", "type": t, "nullable": True, "metadata": {}}]}).fields[0].dataType
