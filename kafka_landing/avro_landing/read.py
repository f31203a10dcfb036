"""READ: exactly a frozen slice's offsets from Kafka, with Spark's Kafka source (read_committed,
so aborted transactions never land), split into Spark tasks of at most rows_per_task records.
Reading beyond the slice is impossible: the end offsets are the frozen ones."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession

from kafka_landing.kafka_slices.plan import SlicePlan

NO_EVENT_HOUR = "__HIVE_DEFAULT_PARTITION__"



def read_slice(spark: SparkSession, kafka_options: dict, plan: SlicePlan) -> DataFrame | None:
    """Exactly the frozen offsets, split into Spark tasks of at most rows_per_task records."""
    parts = [p for p in plan.partitions if p.records > 0]
    if not parts:
        return None
    topic = plan.topic
    return (
        spark.read.format("kafka")
        .options(**kafka_options)
        .option("assign", json.dumps({topic: [p.partition for p in parts]}))
        .option("startingOffsets", json.dumps({topic: {str(p.partition): p.start for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p.partition): p.end for p in parts}}))
        .option("maxRecordsPerPartition", str(plan.rows_per_task))
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .load()
    )
