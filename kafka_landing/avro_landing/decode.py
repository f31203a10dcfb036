"""DECODE: the Confluent framing (magic byte, schema id) and the Avro body, in the JVM
(`from_avro` per schema id). A record that cannot be decoded keeps its reason and becomes a
dead letter; a registry that cannot answer, or a writer schema that cannot land, fails the
hour before anything is written."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

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
    TIMESTAMP_MS_COLUMN,
    MAY_VOUCH,
    UNSURE,
)
from kafka_landing.avro_landing.read import OUT_OF_RANGE
from kafka_landing.avro_landing.route import EPOCH_MS_YEAR_1, EPOCH_MS_YEAR_10000
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError, is_transient
from kafka_landing.spark_setup import SparkUnavailable


def frame_columns(raw: DataFrame) -> DataFrame:
    """Kafka columns renamed to the landing metadata columns, plus the Confluent
    framing split into reason (why it cannot be decoded, if known now), schema id and body.

    A Kafka timestamp outside years 1-9999 is such a reason too: `_kafka_timestamp` is
    timestamp-millis, which fastavro (Python's datetime) cannot hold there. Its reason gives
    Kafka's milliseconds, and its `_kafka_timestamp` is null, as its dead letter's timestamp.
    The direct operator counts the same records, by the same bounds, as bad framing. Every
    other `_kafka_timestamp` is Kafka's milliseconds too, as the direct operator writes them:
    `raw`'s `_kl_ms` (read.py: Spark's Kafka column is days off before 1582)."""
    value = F.col("value")
    ms = F.col(TIMESTAMP_MS_COLUMN)
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
        .when(~stamped, F.concat(F.lit(OUT_OF_RANGE[0]), ms.cast("string"), F.lit(OUT_OF_RANGE[1])))
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

    @classmethod
    def of(cls, cfg: TopicConfig) -> Vouch:
        """What a topic's landing needs from a body it does not decode."""
        return cls(cfg.route.field if cfg.route else None, cfg.event_time_field)


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


def decode(framed: DataFrame, schema_id: int, writer: dict, vouch: Vouch | None = None) -> DataFrame:
    """Records of one schema id with the decoded struct `_rec` (null when it is not decoded) and
    `_reason`, why it cannot land.

    Every body goes through the body check first (see BODY_CHECK): one it refuses is never decoded
    (`_rec` null, `_reason` the walk's); with `vouch`, one it vouches for (status LANDS in
    `_kl_check`) is not decoded either: its `_rec` is null and its `_reason` too. The rest were
    walked by every rule, so Spark represents each of their values: no date or time outside years
    1-9999, no decimal with more digits than its precision (which Spark would build from the low 64
    bits of its unscaled value). One that Spark's decode still cannot read is a corrupt body."""
    check_key = register_body_check(framed.sparkSession, body_check_config(writer, vouch))
    rows = framed.where(F.col("_reason").isNull() & (F.col("_schema_id") == F.lit(schema_id)))
    rows = rows.withColumn("_kl_check", decoded_once(F.call_udf(BODY_CHECK, F.col(BODY_COLUMN), F.lit(check_key))))
    status = F.col("_kl_check").getField("status")
    unsure = status == F.lit(UNSURE)
    rows = rows.withColumn("_rec", decoded_once(F.when(unsure, _decoded(writer))))
    rows = rows.withColumn("_rec", F.when(F.col("_rec").getField(avro_schemas.OK_MARKER).isNotNull(), F.col("_rec")))
    corrupt = F.lit(f"corrupt body for schema id {schema_id}")  # the walk read it, Spark's decode did not
    return rows.withColumn("_reason", F.when(status == F.lit(DEAD), dead_reason(F.col("_kl_check"), schema_id))
                           .when(unsure & F.col("_rec").isNull(), corrupt))


def _decoded(writer: dict) -> F.Column:
    """The body decoded by Avro's reader in the JVM, with the marker field that is null when it
    could not be (avro_schemas.marked_reader_schema)."""
    marked = json.dumps(avro_schemas.marked_reader_schema(writer))
    return from_avro(F.col(BODY_COLUMN), json.dumps(writer), {"mode": "PERMISSIVE", "avroSchema": marked})


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
