"""The Kafka log as planning sees it (`plan.LogView`), on a real cluster through librdkafka:
offsets for times, watermarks and, for the rare doubtful boundary, records read.
Pure of Dagster and Spark, so the CLI and the bench use it as the assets do."""

from __future__ import annotations

import time

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from kafka_landing.errors import ServiceUnavailable


class KafkaUnavailable(ServiceUnavailable, RuntimeError):
    """The brokers did not answer: names the bootstrap servers, never credentials."""


_TRANSIENT = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TIMED_OUT}


class KafkaLogView:
    """`plan.LogView` on a real cluster, as a read_committed consumer sees it: the log end
    is the last stable offset, so an open transaction's records are never planned."""

    def __init__(self, client_config: dict, bootstrap_servers: str, timeout_seconds: float):
        self._timeout = timeout_seconds
        self._servers = bootstrap_servers  # named in errors; client_config may hold credentials, never shown
        conf = {**client_config, "group.id": "kafka-landing-planner", "enable.auto.commit": False,
                "isolation.level": "read_committed"}
        self._consumer = Consumer(conf)
        self._admin = AdminClient(client_config)
        self._reader: Consumer | None = None  # for the rare boundary that needs records read
        self._topic_ids: dict[str, str | None] = {}  # a view lives for one run: the id cannot change under it
        self._conf = conf

    def close(self) -> None:
        self._consumer.close()
        if self._reader is not None:
            self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def partitions(self, topic: str) -> list[int] | None:
        md = self._retry(f"reading the metadata of topic {topic!r}",
                         lambda: self._consumer.list_topics(topic, timeout=self._timeout))
        t = md.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            return None
        return sorted(t.partitions)

    def topic_id(self, topic: str) -> str | None:
        if topic not in self._topic_ids:
            def ask():
                futures = self._admin.describe_topics(TopicCollection([topic]), request_timeout=self._timeout)
                try:
                    return futures[topic].result().topic_id
                except KafkaException as exc:
                    if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        return None  # partitions() says so, with its own error
                    raise

            # Asked once the brokers answered (partitions, watermarks): two attempts, not ten timeouts.
            uuid = self._retry(f"describing topic {topic!r}", ask, attempts=2)
            # a broker older than 2.8 has no topic ids: all zeros, nothing to compare
            self._topic_ids[topic] = None if uuid is None or str(uuid) == "AAAAAAAAAAAAAAAAAAAAAA" else str(uuid)
        return self._topic_ids[topic]

    def compacted(self, topic: str) -> bool:
        """Whether the log cleaner may remove records of the topic's closed hours (`cleanup.policy`
        holds `compact`): two reads of the same offsets can then see different records."""
        def ask():
            resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
            futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
            entry = futures[resource].result().get("cleanup.policy")
            return entry is not None and "compact" in (entry.value or "")

        return self._retry(f"reading the cleanup policy of topic {topic!r}", ask, attempts=2)

    def _retry(self, what: str, call, attempts: int = 10):
        # A partition just created or moving leader answers NOT_LEADER for a moment: retry retriable errors.
        for attempt in range(attempts):
            try:
                return call()
            except KafkaException as exc:
                err = exc.args[0]
                if attempt == attempts - 1 or not (err.retriable() or err.code() in _TRANSIENT):
                    raise KafkaUnavailable(
                        f"Kafka brokers {self._servers}: {what} failed: {err.str()}. Check that the brokers are up "
                        "and reachable from here, and the bootstrap servers and security settings "
                        "(KAFKA_BOOTSTRAP_SERVERS, KAFKA_SECURITY_PROTOCOL, KAFKA_SASL_*)."
                    ) from None
                time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self._retry(f"reading the offsets of {topic}[{partition}]", lambda: self._consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self._timeout, cached=False))

    def offsets_for_time(self, topic: str, partitions: list[int], millis: int) -> dict[int, tuple[int, int] | None]:
        def ask():
            futures = self._admin.list_offsets(
                {TopicPartition(topic, p): OffsetSpec.for_timestamp(millis) for p in partitions},
                isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=self._timeout,
            )
            return {tp.partition: f.result() for tp, f in futures.items()}

        found = self._retry(f"offsets_for_times({millis}) of {topic}", ask)
        return {p: (r.offset, r.timestamp) if r.offset >= 0 else None for p, r in found.items()}

    def first_record(self, topic: str, partition: int, start: int, end: int,
                     min_millis: int | None = None) -> tuple[int, int] | None:
        if start >= end:
            return None
        if self._reader is None:
            # A boundary read wants its few records now: the broker need not wait to fill a fetch.
            self._reader = Consumer({**self._conf, "enable.partition.eof": True, "fetch.wait.max.ms": 10})
        reader = self._reader
        reader.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self._timeout
        try:
            while time.monotonic() < deadline:
                # poll, not consume(n): consume waits out its whole timeout unless n records come,
                # which made every doubtful boundary cost a second.
                msg = reader.poll(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                if msg is None:
                    position = reader.position([TopicPartition(topic, partition)])[0].offset
                    if position >= end:
                        return None
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        return None
                    raise KafkaUnavailable(f"Kafka at {self._servers}: reading {topic}[{partition}] from offset "
                                           f"{start} failed: {msg.error()}", transient=msg.error().retriable())
                if msg.offset() >= end:
                    return None
                stamped = msg.timestamp()[1]
                if min_millis is None or stamped >= min_millis:
                    return msg.offset(), stamped
                if msg.offset() + 1 >= end:
                    return None  # the range is read: no need to wait for the next fetch
                deadline = time.monotonic() + self._timeout  # progress: keep reading
        finally:
            reader.unassign()
        raise KafkaUnavailable(f"Kafka at {self._servers}: no answer reading {topic}[{partition}] from offset {start} "
                           f"within {self._timeout:.0f} s; check that the brokers are up and reachable")


