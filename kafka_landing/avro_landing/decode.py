"""DECODE: the Confluent framing (magic byte, schema id) and the Avro body, in the JVM
(`from_avro` per schema id). A record that cannot be decoded keeps its reason and becomes a
dead letter; a registry that cannot answer, or a writer schema that cannot land, fails the
hour before anything is written."""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass
from decimal import Decimal
from functools import reduce
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import ArrayType, DataType, DecimalType, MapType, StructType

from kafka_landing.avro_landing import avro_schemas, body_rules, registry_answers
from kafka_landing.avro_landing.contract import (
    BODY_CHECK_CLASS,
    BODY_CHECK_CONFIG,
    BODY_COLUMN,
    CHUNK_KEY,
    DEAD,
    FIELD_SEP,
    HOUR_KEY,
    MAY_NOT_VOUCH,
    MAY_VOUCH,
    UNSURE,
)
from kafka_landing.avro_landing.read import kafka_millis
from kafka_landing.avro_landing.route import EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000
from kafka_landing.errors import LandingError, is_transient
from kafka_landing.spark_setup import SparkUnavailable


def frame_columns(raw: DataFrame) -> DataFrame:
    """Kafka columns renamed to the landing metadata columns, plus the Confluent
    framing split into reason (why it cannot be decoded, if known now), schema id and body.

    A Kafka timestamp outside years 1-9999 is such a reason too: `_kafka_timestamp` is
    timestamp-millis, which fastavro (Python's datetime) cannot hold there. Its reason gives
    Kafka's milliseconds, and its `_kafka_timestamp` is null, as its dead letter's timestamp.
    The direct operator counts the same records, by the same bounds, as bad framing. Every
    other `_kafka_timestamp` is Kafka's milliseconds too, as the direct operator writes them
    (read.kafka_millis: Spark's column is days off before 1582)."""
    value = F.col("value")
    ms = kafka_millis(F.col("timestamp"))
    stamped = ms.between(EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000 - 1)
    return raw.select(
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.when(stamped, F.timestamp_millis(ms)).alias("_kafka_timestamp"),  # not Spark's days apart before 1582
        F.col("key").alias("_kafka_key"),
        F.col("headers").alias("_kafka_headers"),
        value.alias("_value"),
        F.when(value.isNull(), F.lit("null value"))
        .when(F.length(value) < 5, F.lit("shorter than the 5-byte header"))
        .when(F.hex(F.substring(value, 1, 1)) != F.lit("00"), F.lit("bad magic byte"))
        .when(~stamped, F.concat(F.lit("Kafka timestamp "), ms.cast("string"),
                                 F.lit(" ms is out of range (before year 1 or after 9999)")))
        .alias("_reason"),
        F.when(F.length(value) >= 5, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")).alias("_schema_id"),
        F.expr("substring(value, 6)").alias(BODY_COLUMN),
        # The record's hour and frozen task (read_hours): files are written per task, so each
        # file holds a contiguous offset range of one partition, whichever hours were read together.
        F.col(HOUR_KEY),
        F.col("_kl_hour_ix"),
        F.col(CHUNK_KEY),
    )


# The body check (jvm/splice FastCheck, a Java UDF in the splice writer's jar, over BodyCheck and
# BodyWalk): the strict walk through each body under its writer schema, building no value, by the
# rules of body_rules.py.
# Every body goes through it before anything else reads it: a body it refuses (DEAD) is a dead
# letter with the walk's reason and is never decoded (so no body reaches a decoder that could
# allocate beyond its bytes); a body it vouches for (LANDS) lands without being decoded, with its
# routing value and event time; the rest (UNSURE: a routing value or event time the walk does not
# compute as Spark does) are decoded for those values. Whatever lands is the walked bytes, whole.
# Its verdicts (status) and the config it reads are contract.py's.
BODY_CHECK = "kafka_landing_body_check"
BODY_CHECK_TYPE = "struct<status:int,route:string,event:bigint,rule:int,field:string>"


def dead_reason(check: F.Column, schema_id: int) -> F.Column:
    """The dead-letter reason of a body the walk refused (`check`: its verdict), in the words of
    body_rules.reason, built in the JVM."""
    rule, field = check.getField("rule"), check.getField("field")
    words = F.create_map(*[F.lit(x) for n, (_kind, w) in sorted(body_rules.RULES.items()) for x in (n, w)])[rule]
    values = [n for n, (kind, _w) in body_rules.RULES.items() if kind == body_rules.VALUE]
    named = F.when(field.isNotNull(), F.concat(F.lit(" (field '"), field, F.lit("')"))).otherwise(F.lit(""))
    return (F.when(rule.isin(values), F.concat(F.lit("field '"), field, F.lit("' "), words))
            .otherwise(F.concat(F.lit(f"corrupt body for schema id {schema_id}: "), words, named)))


@dataclass(frozen=True)
class Vouch:
    """What the body check reads from a body it vouches for: the routing field's value and the
    event time field's (None: the topic has none)."""
    route_field: str | None = None
    event_field: str | None = None


def register_body_check(spark, config: str) -> str:
    """The body check as a function of the session (again on each call: registering is idempotent),
    and `config` as a session setting its tasks read; the key that names it (see FastCheck). A
    Spark engine without the check runs an older jar: a LandingError naming the jar and what to do."""
    key = hashlib.sha256(config.encode()).hexdigest()[:20]
    try:
        spark.conf.set(BODY_CHECK_CONFIG + key, config)
        spark.udf.registerJavaFunction(BODY_CHECK, BODY_CHECK_CLASS, BODY_CHECK_TYPE)
    except Exception as exc:  # noqa: BLE001 - sorted below: the engine away, or the class missing
        if is_transient(exc):
            raise SparkUnavailable(f"the Spark engine went away while registering the body check ({_spark_message(exc)})"
                                   "; nothing was published, it is tried again on a new session") from None
        raise LandingError(f"the Spark engine has no body check ({BODY_CHECK_CLASS} in kafka-landing-splice-0.jar from "
                           f"`make jvm`): {_spark_message(exc)}. Nothing was published. Restart the Spark Connect server "
                           "with the connector jars of `make jvm` (locally: make stack-down; make stack-up)") from None
    return key


def body_check_config(writer: dict, vouch: Vouch | None) -> str:
    """The check's config (see contract.BODY_CHECK_CONFIG): whether it may vouch, the routing and
    event time fields, the writer schema."""
    return FIELD_SEP.join([MAY_VOUCH if vouch else MAY_NOT_VOUCH, (vouch and vouch.route_field) or "",
                           (vouch and vouch.event_field) or "", json.dumps(writer)])


def decoded_once(column: F.Column) -> F.Column:
    """The same value, evaluated once per record. Spark pushes a filter on `_reason` (which
    depends on the decoded record) below the projection of the record, copying the decode into
    every check that reads a field of it: without this a record is decoded once per check (the
    physical plan of the ~1 KB benchmark case held 15 `from_avro`; the value checks took 9 s for
    300,000 records). A nondeterministic condition that is always true is what stops that
    pushdown; persisting the decoded records would too, at the cost of a copy of every record.
    Not `rand() >= 0`: Spark 4.2 folds that to true (rand's range is known), and the copies came
    back. `integration/test_splice_writer.py` counts the decodes in the plan."""
    return F.when(F.spark_partition_id() >= 0, column)


def _wider_than_declared(col: F.Column, wide: DataType, declared: DataType) -> F.Column | None:
    """True (never null) when a decimal anywhere inside `col` (records, arrays, map values, union
    members), read with the widened type `wide`, holds more digits than its declared type in
    `declared` allows (|x| >= 10^(p-s)); None when no decimal inside was widened. In the JVM."""
    no = F.lit(False)
    if isinstance(wide, DecimalType):
        if wide == declared:
            return None
        limit = F.lit(Decimal(10) ** (declared.precision - declared.scale)).cast(wide)
        return F.coalesce(F.abs(col) >= limit, no)

    def in_array(array: F.Column, wide_el: DataType, declared_el: DataType) -> F.Column | None:
        if _wider_than_declared(F.lit(None), wide_el, declared_el) is None:  # nothing widened inside
            return None
        return F.coalesce(F.exists(array, lambda x: _wider_than_declared(x, wide_el, declared_el)), no)

    if isinstance(wide, StructType):
        parts = [_wider_than_declared(col.getField(w.name), w.dataType, d.dataType)
                 for w, d in zip(wide.fields, declared.fields)]
    elif isinstance(wide, ArrayType):
        parts = [in_array(col, wide.elementType, declared.elementType)]
    elif isinstance(wide, MapType):  # Avro map keys are strings
        parts = [in_array(F.map_values(col), wide.valueType, declared.valueType)]
    else:
        parts = []
    parts = [p for p in parts if p is not None]
    return reduce(operator.or_, parts) if parts else None


def _once(value: F.Column, f: Callable[[F.Column], F.Column]) -> F.Column:
    """f(value), with `value` evaluated once however often f uses it: a lambda binds it. Spark
    would otherwise decode once per use (no common subexpression inside CASE and AND branches),
    and storing the value as a column of its own costs a copy of every record."""
    return F.transform(F.array(value), f)[0]


def decode(framed: DataFrame, schema_id: int, writer: dict, vouch: Vouch | None = None) -> DataFrame:
    """Records of one schema id with the decoded struct `_rec` (null when it cannot be decoded)
    and `_reason`, why not. A body that decodes once one field's logical types are dropped is
    valid Avro holding a value Spark cannot represent (timestamp-millis past year 294247, a
    decimal wider than its precision): its reason names that field instead of a corrupt body.

    Spark builds a decimal of precision <= 18 from the low 64 bits of the unscaled value (2**64 + 5
    as decimal(18,2) would be 0.05): such decimals are decoded wider (avro_schemas.widened_decimals),
    checked against their declared precision and narrowed back, in the JVM. `_rec` has the
    declared types; a value wider than its declaration is a dead letter naming the field.

    Every body goes through the body check first (see BODY_CHECK): one it refuses is never decoded
    (`_rec` null, `_reason` the walk's); with `vouch`, one it vouches for (status LANDS in
    `_kl_check`) is not decoded either: its `_rec` is null and its `_reason` too."""
    writer_json = json.dumps(writer)
    check_key = register_body_check(framed.sparkSession, body_check_config(writer, vouch))

    def decoded_as(reader: dict) -> F.Column:
        marked = json.dumps(avro_schemas.marked_reader_schema(reader))
        return from_avro(F.col(BODY_COLUMN), writer_json, {"mode": "PERMISSIVE", "avroSchema": marked})

    def decoded(rec: F.Column) -> F.Column:
        return rec.getField(avro_schemas.OK_MARKER).isNotNull()

    def out_of_range_in(name: str) -> F.Column:
        kinds = avro_schemas.field_logical_types(writer, name)
        return F.lit(f"field {name!r} ({', '.join(kinds)}) is out of range for schema id {schema_id}")

    logical = [f["name"] for f in writer["fields"] if avro_schemas.field_logical_types(writer, f["name"])]
    two_or_more = F.lit(f"values out of range in two or more of the fields {', '.join(repr(n) for n in logical)} "
                        f"for schema id {schema_id}")
    # Evaluated only for records that did not decode (a CASE branch), so good hours pay nothing.
    out_of_range = []

    rows = framed.where(F.col("_reason").isNull() & (F.col("_schema_id") == F.lit(schema_id)))
    rows = rows.withColumn("_kl_check", decoded_once(F.call_udf(BODY_CHECK, F.col(BODY_COLUMN), F.lit(check_key))))
    status = F.col("_kl_check").getField("status")
    unsure = status == F.lit(UNSURE)
    wide = avro_schemas.widened_decimals(writer)
    if wide == writer:  # no decimal that could wrap
        rows = rows.withColumn("_rec", decoded_once(F.when(unsure, decoded_as(writer))))
        rows = rows.withColumn("_rec", F.when(decoded(F.col("_rec")), F.col("_rec")))
    else:
        declared = rows.select(decoded_as(writer).alias("r")).schema["r"].dataType  # analysis only
        wide_type = rows.select(decoded_as(wide).alias("r")).schema["r"].dataType

        def too_wide(rec: F.Column) -> list[tuple[str, F.Column]]:
            """(field, whether a decimal inside it holds more digits than declared), for the fields
            that hold a widened decimal."""
            return [(w.name, c) for w, d in zip(wide_type.fields, declared.fields)
                    if (c := _wider_than_declared(rec.getField(w.name), w.dataType, d.dataType)) is not None]

        def narrowed(rec: F.Column) -> F.Column:
            # The cast cannot overflow: only records whose values fit reach it.
            fits = reduce(operator.and_, [decoded(rec), *[~c for _, c in too_wide(rec)]])
            return F.when(fits, rec.cast(declared))

        def why_too_wide(rec: F.Column) -> F.Column:
            checks = too_wide(rec)
            named = [F.when(c, out_of_range_in(name)) for name, c in checks]
            if len(checks) > 1:
                n = reduce(operator.add, [F.when(c, 1).otherwise(0) for _, c in checks])
                named.insert(0, F.when(n > 1, two_or_more))
            return F.coalesce(*named, F.lit(None).cast("string"))

        rows = rows.withColumn("_rec", decoded_once(F.when(unsure, _once(decoded_as(wide), narrowed))))
        out_of_range.append(_once(decoded_as(wide), why_too_wide))
    for name in logical:
        raw = decoded_as(avro_schemas.with_field_stripped(writer, name))
        out_of_range.append(F.when(decoded(raw), out_of_range_in(name)))
    if len(logical) > 1:
        out_of_range.append(F.when(decoded(decoded_as(avro_schemas.strip_logical_types(writer))), two_or_more))
    corrupt = F.lit(f"corrupt body for schema id {schema_id}")  # the walk read it, Spark's decode did not
    return rows.withColumn("_reason", F.when(status == F.lit(DEAD), dead_reason(F.col("_kl_check"), schema_id))
                           .when(unsure & F.col("_rec").isNull(), F.coalesce(*out_of_range, corrupt)))


def _unlandable(where: str, schema_id: int, why: str) -> str:
    return (f"{where}: the writer schema of schema id {schema_id} cannot be landed: {why}. "
            f"Nothing of the hour was published; re-landing it fails the same way while it holds records "
            f"of schema id {schema_id}.")


def _spark_message(exc: BaseException) -> str:
    """The JVM's own messages (cause chain) instead of py4j's 'An error occurred while calling'."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return " ".join(str(exc).split())[:500] or type(exc).__name__
    msgs = []
    while java is not None and len(msgs) < 4:
        msgs.append(" ".join(str(java.toString()).split()))
        java = java.getCause()
    return " <- ".join(msgs)[:500]


def resolve_schemas(fetch_schema: Callable[[int], object], ids: list[int],
                    where: str) -> tuple[dict[int, dict], dict[int, str]]:
    """({schema id: writer schema} to decode, {schema id: dead-letter reason for all its records}).
    A registry that cannot answer, or a writer schema that cannot land, is a LandingError here,
    before anything of the hour is decoded or written. A writer schema fastavro cannot read
    (`avro_schemas.fastavro_refusal`) makes its records dead letters."""
    writers: dict[int, dict] = {}
    dead: dict[int, str] = {}
    for sid in ids:
        try:
            answer = fetch_schema(sid)
        except registry_answers.RegistryError as exc:
            raise LandingError(f"{where}: {exc}", transient=exc.transient) from exc
        if answer is None:
            dead[sid] = registry_answers.UNKNOWN_SCHEMA_ID
        elif isinstance(answer, registry_answers.DeadSchema):
            dead[sid] = answer.reason
        else:
            try:
                writer = avro_schemas.parse(answer)
            except avro_schemas.SchemaError as exc:
                raise LandingError(_unlandable(where, sid, str(exc))) from None
            # Landable but for fastavro: dead letters rather than a failed hour, so the records
            # are kept and the hour's others land.
            if (why := avro_schemas.fastavro_refusal(writer, sid)) is not None:
                dead[sid] = why
            else:
                writers[sid] = writer
    return writers, dead


def decode_checked(framed: DataFrame, schema_id: int, writer: dict, where: str,
                   vouch: Vouch | None = None) -> DataFrame:
    """decode(), with a schema Spark cannot take (recursive, unknown type names, ...) a LandingError
    naming the schema id: Spark parses the schema when it resolves the plan, here. On Spark Connect
    that analysis is a call to the server: one that went away says so, transient, and blames no schema."""
    try:
        decoded = decode(framed, schema_id, writer, vouch)
        decoded.schema  # noqa: B018 - forces analysis
    except LandingError as exc:  # the engine has no body check: say which topic and hours it stops
        raise LandingError(f"{where}: {exc}", transient=exc.transient) from None
    except Exception as exc:  # noqa: BLE001 - any analysis failure means this schema cannot be decoded
        if is_transient(exc):
            raise SparkUnavailable(f"{where}: the Spark engine went away while analysing the decode of schema id "
                                   f"{schema_id} ({_spark_message(exc)}). Nothing of the hour was published; it is "
                                   "tried again on a new session") from None
        raise LandingError(_unlandable(where, schema_id, f"Spark cannot decode it ({_spark_message(exc)})")) from None
    return decoded
