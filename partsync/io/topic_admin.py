"""Topic administration on one cluster: the configs that decide byte identity, creating a topic
(the apply step of ``--create-missing``), growing one whose sources gained partitions, and
moving a partition's log start (DeleteRecords)."""

from __future__ import annotations

from collections.abc import Sequence

from partsync._kafka.codes import ErrorCode, broker_error, error_name
from partsync.errors import BrokerError, ClusterError, PartsyncError, TopicError, UnsafeError
from partsync.io.bounds import BoundsReader
from partsync.io.connections import Connections
from partsync.io.metadata import MetadataCache
from partsync.plan.topic_rules import (
    IDENTITY_CONFIGS,
    KAFKA_TOPIC_DEFAULTS,
    RETENTION_CONFIGS,
    TIMESTAMP_CONFIGS,
)
from partsync.retry import Backoff, retry_until

__all__ = ["TopicAdmin", "all_topics_configs"]


class TopicAdmin:
    def __init__(self, conns: Connections, meta: MetadataCache, reader: BoundsReader) -> None:
        self.name = conns.name
        self._conns = conns
        self._meta = meta
        self._reader = reader

    def topic_configs(self, topic: str) -> tuple[dict[str, str], list[str]]:
        """The identity-relevant topic configs (plus retention and timestamp limits, where
        reported) and warnings
        about what could not be read.

        Identity keys a broker does not report are filled with Apache Kafka's defaults, with a
        warning.
        """
        warnings: list[str] = []
        info = self._meta.topic(topic)
        if info is None:
            raise TopicError("topic does not exist", cluster=self.name, topic=topic)
        leader = next(iter(info.leaders.values()))
        try:
            raw = self._conns.broker_conn(leader).describe_topic_configs(topic)
        except ClusterError as e:
            # Some brokers drop the connection on DescribeConfigs (a Tansu quirk); broker_conn()
            # replaces the closed connection on the next request.
            warnings.append(
                f"cluster {self.name}: could not read configs of topic {topic} ({e.reason}); "
                "assuming Apache Kafka defaults (compression.type=producer, CreateTime)"
            )
            return dict(KAFKA_TOPIC_DEFAULTS), warnings
        out: dict[str, str] = {}
        missing = []
        for key in IDENTITY_CONFIGS:
            value = raw.get(key)
            if value is None:
                missing.append(key)
                out[key] = KAFKA_TOPIC_DEFAULTS[key]
            else:
                out[key] = value
        for key in (*RETENTION_CONFIGS, *TIMESTAMP_CONFIGS):
            if raw.get(key) is not None:
                out[key] = str(raw[key])
        if missing:
            warnings.append(
                f"cluster {self.name}: topic {topic} does not report {', '.join(missing)}; "
                "assuming Apache Kafka defaults"
            )
        return out, warnings

    def all_topic_configs(self, topic: str) -> dict[str, str | None]:
        """Every config ``topic`` reports, as the broker reports it (DescribeConfigs, to a
        leader of the topic as ``topic_configs`` asks)."""
        info = self._meta.topic(topic)
        if info is None:
            raise TopicError("topic does not exist", cluster=self.name, topic=topic)
        leader = next(iter(info.leaders.values()))
        return self._conns.broker_conn(leader).describe_topic_configs(topic)

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        """Set ``configs`` on ``topic``, leaving the others (IncrementalAlterConfigs)."""
        conn = self._conns.any_broker()
        if not conn.supports("IncrementalAlterConfigs"):
            raise TopicError(
                "the cluster does not support IncrementalAlterConfigs, needed to set "
                f"{', '.join(sorted(configs))} as the source has them",
                cluster=self.name,
                topic=topic,
            )
        conn.set_topic_configs(topic, configs)

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str], replication: int = -1
    ) -> None:
        """Create a topic on the controller (any broker forwards in KRaft); -1 = broker default RF.
        A topic another process of the job created meanwhile (followers that noticed a new
        source topic together) is fine when it has the partitions asked for."""
        try:
            self._conns.any_broker().create_topic(topic, partitions, replication, configs)
        except BrokerError as e:
            if e.error_code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise
            info = self._meta.topic(topic, refresh=True)
            if info is None or info.partitions != partitions:
                raise
        self._wait_ready(topic, partitions, "created topic")

    def grow_topic(self, topic: str, partitions: int) -> None:
        """Grow ``topic`` to ``partitions`` partitions (CreatePartitions: new partitions start
        empty at offset 0, which is where their sources' copies start too) and wait until they
        have leaders. A topic that already has that many (another process grew it) is fine."""
        conn = self._conns.any_broker()
        if not conn.supports("CreatePartitions"):
            raise TopicError(
                f"the local cluster does not support CreatePartitions, needed to grow the topic to "
                f"its sources' {partitions} partitions",
                cluster=self.name,
                topic=topic,
            )
        code, message = conn.create_partitions(topic, partitions)
        if code and code != ErrorCode.INVALID_PARTITIONS:
            detail = f": {message}" if message else ""
            raise TopicError(
                f"growing the topic to {partitions} partitions failed: {error_name(code)}{detail}",
                cluster=self.name,
                topic=topic,
            )
        if code:  # INVALID_PARTITIONS: fine only if the topic already has that many
            info = self._meta.topic(topic, refresh=True)
            if info is None or info.partitions < partitions:
                raise TopicError(
                    f"growing the topic to {partitions} partitions was refused: "
                    f"{message or 'INVALID_PARTITIONS'}",
                    cluster=self.name,
                    topic=topic,
                )
        self._wait_ready(topic, partitions, "grown topic")

    def _wait_ready(self, topic: str, partitions: int, what: str) -> None:
        # Wait until metadata shows every partition with a leader, and the leaders answer for them:
        # Apache Kafka's metadata names a new partition's leader before that broker has taken the
        # partition on (it answers NOT_LEADER_OR_FOLLOWER until then).
        def ready() -> tuple[bool, bool]:
            try:
                info = self._meta.topic(topic, refresh=True)
                if info is not None and info.partitions >= partitions:
                    self._reader.bounds(topic, list(range(partitions)))
                    return True, True
            except ClusterError:
                pass
            return False, False

        if not retry_until(ready, Backoff(0.1, 0.1, deadline=self._conns.timeout)):
            raise ClusterError(
                f"{what} did not become ready (metadata and leaders)",
                cluster=self.name,
                topic=topic,
            )

    def check_delete_records(self, topic: str, partition: int, at: int, before: int) -> None:
        """Refuse (unsafe) unless the partition's leader can DeleteRecords: it must offer the
        API and carry out a no-op one (up to ``at``, the log end), since some brokers advertise
        it and drop the connection instead (Tansu). Tried twice, so a connection lost by chance
        is not taken for a missing capability."""
        missing = UnsafeError(
            f"the broker does not support DeleteRecords, which starting a mirror at offset "
            f"{before} needs (moving the log start past the filler records); nothing written",
            cluster=self.name,
            topic=topic,
            partition=partition,
            offset=before,
        )
        for attempt in (1, 2):
            conn = self._conns.broker_conn(self._meta.leader(topic, partition))
            if not conn.supports("DeleteRecords"):
                raise missing
            try:
                code, _low = conn.delete_records(topic, partition, at)
            except ClusterError:
                if attempt == 2:
                    raise missing from None
                continue
            if code in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST):
                raise missing
            if code:
                raise broker_error(
                    code,
                    f"DeleteRecords before offset {at}",
                    cluster=self.name,
                    topic=topic,
                    partition=partition,
                    offset=at,
                )
            return

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Move the partition's log start to ``before`` (DeleteRecords on its leader)."""
        conn = self._conns.broker_conn(self._meta.leader(topic, partition))
        code, low = conn.delete_records(topic, partition, before)
        if code:
            raise broker_error(
                code,
                f"DeleteRecords before offset {before}",
                cluster=self.name,
                topic=topic,
                partition=partition,
                offset=before,
            )
        if low < before:
            raise ClusterError(
                f"DeleteRecords left the log start at {low}, not {before}",
                cluster=self.name,
                topic=topic,
                partition=partition,
                offset=before,
            )


def all_topics_configs(
    conns: Connections, cluster: str, topics: Sequence[str]
) -> dict[str, dict[str, str | None] | PartsyncError]:
    """Every config of many topics in one DescribeConfigs request (a link's topic check: one
    request per cluster, not one per topic); a topic's error is its value."""
    if not topics:
        return {}
    answers = conns.any_broker().describe_topics_configs(list(topics))
    out: dict[str, dict[str, str | None] | PartsyncError] = {}
    for t in topics:
        code, configs = answers.get(t, (-1, {}))
        out[t] = (
            broker_error(code, "DescribeConfigs", cluster=cluster, topic=t) if code else configs
        )
    return out
