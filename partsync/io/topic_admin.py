"""Topic administration on one cluster: the configs that decide byte identity, creating a topic
(the apply step of ``--create-missing``) and growing one whose sources gained partitions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from partsync._kafka.codes import ErrorCode, error_name
from partsync.errors import ClusterError, TopicError
from partsync.plan.topic_rules import (
    IDENTITY_CONFIGS,
    KAFKA_TOPIC_DEFAULTS,
    RETENTION_CONFIGS,
    TIMESTAMP_CONFIGS,
)
from partsync.retry import Backoff

if TYPE_CHECKING:
    from partsync._kafka import Connection
    from partsync.io.cluster import Cluster

__all__ = ["create_topic", "grow_topic", "topic_configs"]


def topic_configs(cluster: Cluster, topic: str) -> tuple[dict[str, str], list[str]]:
    """The identity-relevant topic configs (plus retention and timestamp limits, where
    reported) and warnings
    about what could not be read.

    Identity keys a broker does not report are filled with Apache Kafka's defaults, with a
    warning.
    """
    warnings: list[str] = []
    info = cluster.topic(topic)
    if info is None:
        raise TopicError("topic does not exist", cluster=cluster.name, topic=topic)
    leader = next(iter(info.leaders.values()))
    try:
        raw = cluster.broker_conn(leader).describe_topic_configs(topic)
    except ClusterError as e:
        # Some brokers drop the connection on DescribeConfigs (a Tansu quirk); broker_conn()
        # replaces the closed connection on the next request.
        warnings.append(
            f"cluster {cluster.name}: could not read configs of topic {topic} ({e.reason}); "
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
            f"cluster {cluster.name}: topic {topic} does not report {', '.join(missing)}; "
            "assuming Apache Kafka defaults"
        )
    return out, warnings


def create_topic(
    cluster: Cluster, topic: str, partitions: int, configs: dict[str, str], replication: int = -1
) -> None:
    """Create a topic on the controller (any broker forwards in KRaft); -1 = broker default RF."""
    _any_broker(cluster).create_topic(topic, partitions, replication, configs)
    _wait_ready(cluster, topic, partitions, "created topic")


def grow_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    """Grow ``topic`` to ``partitions`` partitions (CreatePartitions: new partitions start
    empty at offset 0, which is where their sources' copies start too) and wait until they
    have leaders. A topic that already has that many (another process grew it) is fine."""
    conn = _any_broker(cluster)
    if not conn.supports("CreatePartitions"):
        raise TopicError(
            f"the local cluster does not support CreatePartitions, needed to grow the topic to "
            f"its sources' {partitions} partitions",
            cluster=cluster.name,
            topic=topic,
        )
    code, message = conn.create_partitions(topic, partitions)
    if code and code != ErrorCode.INVALID_PARTITIONS:
        detail = f": {message}" if message else ""
        raise TopicError(
            f"growing the topic to {partitions} partitions failed: {error_name(code)}{detail}",
            cluster=cluster.name,
            topic=topic,
        )
    if code:  # INVALID_PARTITIONS: fine only if the topic already has that many
        info = cluster.topic(topic, refresh=True)
        if info is None or info.partitions < partitions:
            raise TopicError(
                f"growing the topic to {partitions} partitions was refused: "
                f"{message or 'INVALID_PARTITIONS'}",
                cluster=cluster.name,
                topic=topic,
            )
    _wait_ready(cluster, topic, partitions, "grown topic")


def _any_broker(cluster: Cluster) -> Connection:
    """A connection to one of the cluster's brokers (any broker forwards admin requests to the
    controller in KRaft)."""
    md = cluster.metadata()
    return cluster.broker_conn(next(iter(sorted(md.brokers))))


def _wait_ready(cluster: Cluster, topic: str, partitions: int, what: str) -> None:
    # Wait until metadata shows every partition with a leader, and the leaders answer for them:
    # Apache Kafka's metadata names a new partition's leader before that broker has taken the
    # partition on (it answers NOT_LEADER_OR_FOLLOWER until then).
    backoff = Backoff(0.1, 0.1, deadline=cluster.timeout)
    while True:
        try:
            info = cluster.topic(topic, refresh=True)
            if info is not None and info.partitions >= partitions:
                cluster.bounds(topic, list(range(partitions)))
                return
        except ClusterError:
            pass
        if not backoff.wait():
            raise ClusterError(
                f"{what} did not become ready (metadata and leaders)",
                cluster=cluster.name,
                topic=topic,
            )
