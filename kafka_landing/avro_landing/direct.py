"""READ + WRITE without rows: a schema id's records landed straight from Kafka (or from the hours'
archive, when they are landed again from it) into their
landing files by one JVM operator per Spark task (jvm/splice DirectLanding), the body check as its
validator and the splice writer's encoding as its writer; the likely id first, then each other id
the hours hold (`job.py`), one pass over the offsets each. What Spark's Kafka source, the body
check as a UDF and the file format do with one Spark row per record, it does with none: the only
rows are what each task wrote and counted.

It lands only what it is sure of, and the landing goes the decoding way (read -> decode -> route
-> write, one row per record) whenever it is not: a topic read into a snapshot, a body the check is
not sure of (that task stops, removes its files and says so; every task's files are then removed),
a frozen task whose records spread over more event hours than a task keeps files open for
(`MAX_EVENT_FILES`; the decoding way writes them one after the other), or a Spark engine whose jar
has no such operator. A topic split by event hour gets a file per event hour too, the hour of the
event time the check read. In a pass, records of other schema ids, bad framing and bodies with
lying block sizes are only counted: they get passes or jobs of their own (the dead letters'
decodes them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from kafka_landing.avro_landing import avro_schemas
from kafka_landing.avro_landing import contract
from kafka_landing.avro_landing.contract import DIRECT_FORMAT, ResultRow
from kafka_landing.avro_landing.decode import Vouch, body_check_config
from kafka_landing.avro_landing.read import READ_OPTIONS
from kafka_landing.avro_landing.write import StagedKey
from kafka_landing.config import TopicConfig
from kafka_landing.errors import LandingError
from kafka_landing.kafka_slices.plan import HourTask, read_segments
from kafka_landing.spark_setup import default_parallelism


@dataclass
class DirectPass:
    """What the tasks wrote ({key: file under `out`}) and counted."""

    files: dict[StagedKey, str] = field(default_factory=dict)
    read_by_hour: dict[str, int] = field(default_factory=dict)
    ids_by_hour: dict[int, set[str]] = field(default_factory=dict)
    unclaimed: int = 0
    bad_framing: int = 0
    records: int = 0  # of the schema id
    dead: int = 0  # of the schema id: bodies the strict walk refused
    unsure: bool = False
    spread: bool = False  # a task's records held more event hours than it keeps files open for
    gaps_by_hour: dict[str, int] = field(default_factory=dict)  # offsets the consumer gave no record for
    gaps_shown: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)  # (partition, first offset, offsets)


def routing_options(cfg: TopicConfig, writer: dict) -> dict[str, str]:
    """Every record's table, or the routing value -> table map and its default, as classify()
    routes a record the body check vouched for."""
    if cfg.route is None:
        return {contract.OPTION_TABLE: cfg.table}
    if cfg.route.field not in avro_schemas.field_names(writer):
        return {contract.OPTION_TABLE: cfg.route.default}
    pairs = (f"{v}{contract.FIELD_SEP}{t}" for v, t in sorted(cfg.route.tables.items()))
    out = {contract.OPTION_ROUTES: contract.ITEM_SEP.join(pairs)}
    if cfg.route.default is not None:
        out[contract.OPTION_DEFAULT_TABLE] = cfg.route.default
    return out


def _numbers(items) -> str:
    """Items of numbers as an option holds them (ranges, tasks)."""
    return contract.LIST_SEP.join(contract.NUMBER_SEP.join(str(n) for n in item) for item in items)


def land_directly(spark: SparkSession, read_options: dict, cfg: TopicConfig, tasks: list[HourTask],
                  schema_id: int, writer: dict, out: str) -> DirectPass:
    """Run the operator over every frozen task of the run: files under `out` (a location). The body
    check vouches for what the topic's landing reads (`Vouch.of`), as on the decoding way.
    `read_options`: the Kafka consumer's settings, or the hours' archive (contract.OPTION_SEGMENTS,
    `read.archive_segments`: the same ranges), read instead of Kafka."""
    hours = sorted({t.hour for t in tasks})
    ix = {h: i for i, h in enumerate(hours)}
    ranges = [(p, s, e) for seg in read_segments(tasks, default_parallelism(spark)) for p, (s, e) in sorted(seg.items())]
    options = {
        # The consumer's settings, each under contract.OPTION_KAFKA_PREFIX as Spark's Kafka source takes them.
        **{k: str(v) for k, v in READ_OPTIONS.items()}, **{k: str(v) for k, v in read_options.items()},
        contract.OPTION_TOPIC: cfg.topic,
        contract.OPTION_RANGES: _numbers(ranges),
        contract.OPTION_TASKS: _numbers((ix[t.hour], t.partition, t.start, t.end) for t in tasks),
        contract.OPTION_HOURS: contract.LIST_SEP.join(hours),
        contract.OPTION_SCHEMA_ID: str(schema_id),
        contract.OPTION_CHECK: body_check_config(writer, Vouch.of(cfg)),
        contract.OPTION_LANDING_SCHEMA: json.dumps(avro_schemas.landing_schema(writer)),
        contract.OPTION_OUT: out,
        contract.OPTION_TIMEOUT_MS: str(cfg.read_stall_seconds * 1000),
        **routing_options(cfg, writer),
        **({contract.OPTION_EVENT_HOURS: contract.MAY_VOUCH} if cfg.event_time_field else {}),
    }
    rows = spark.read.format(DIRECT_FORMAT).options(**options).load().collect()
    got = DirectPass(read_by_hour={h: 0 for h in hours})
    for r in (ResultRow.of(row.asDict()) for row in rows):
        kind = r.kind
        if kind == contract.KIND_UNSURE:
            got.unsure = True
        elif kind == contract.KIND_SPREAD:
            got.spread = True
        elif kind == contract.KIND_FILE:
            key = StagedKey(hours[r.hour_ix], r.chunk, r.table, r.part, StagedKey.of(r.path).event_hour)
            if key in got.files:
                raise LandingError(f"{cfg.topic}: two files were reported for one frozen task and table {key} under {out}; "
                                   "nothing was published")
            got.files[key] = r.path
        elif kind == contract.KIND_HOUR:
            got.read_by_hour[hours[r.hour_ix]] += r.n
        elif kind == contract.KIND_ID:
            got.ids_by_hour.setdefault(r.schema_id, set()).add(hours[r.hour_ix])
        elif kind == contract.KIND_UNCLAIMED:
            got.unclaimed += r.n
        elif kind == contract.KIND_BAD_FRAMING:
            got.bad_framing += r.n
        elif kind == contract.KIND_RECORDS:
            got.records += r.n
        elif kind == contract.KIND_DEAD:
            got.dead += r.n
        elif kind == contract.KIND_GAPS:
            h = hours[r.hour_ix]
            got.gaps_by_hour[h] = got.gaps_by_hour.get(h, 0) + r.n
        elif kind == contract.KIND_GAP:
            got.gaps_shown.setdefault(hours[r.hour_ix], []).append((r.part, r.offset, r.n))
    for shown in got.gaps_shown.values():
        shown.sort()
    return got
