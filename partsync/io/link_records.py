"""A link's records on the local cluster (``io.record_topic``): the promoted topics
(``partsync.promotions``, read by every run before it writes) and the sources' ends a follower
last saw (``partsync.source-ends``, read by ``promote`` for a source that no longer answers)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

from partsync._kafka import ErrorCode
from partsync.errors import BrokerError, ClusterError
from partsync.io.cluster import Cluster
from partsync.io.record_topic import RecordTopic
from partsync.plan.promotion import PROMOTIONS_TOPIC, SOURCE_ENDS_TOPIC, Promotion

__all__ = [
    "forget_promotions",
    "read_promotions",
    "read_source_ends",
    "write_promotions",
    "write_source_ends",
]

# topic -> partition -> source -> end
SourceEnds = Mapping[str, Mapping[int, Mapping[str, int]]]


def _promotions(cluster: Cluster) -> RecordTopic:
    return RecordTopic(cluster, PROMOTIONS_TOPIC, "the record of promoted topics")


def read_promotions(cluster: Cluster) -> dict[str, Promotion] | None:
    """The topics promoted on ``cluster`` (none before any was); None where this client may
    not describe the record's topic (it cannot tell)."""
    out = {}
    try:
        held = _promotions(cluster).read()
    except BrokerError as e:
        if e.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            return None
        raise
    for topic, value in held.items():
        try:
            out[topic] = Promotion.from_json(value)
        except ValueError as e:
            raise ClusterError(
                f"topic {PROMOTIONS_TOPIC} holds a record partsync did not write under key "
                f"{topic!r} ({e}): it is partsync's record of promoted topics",
                cluster=cluster.name,
                topic=PROMOTIONS_TOPIC,
            ) from None
    return out


def write_promotions(cluster: Cluster, promotions: Iterable[Promotion]) -> None:
    _promotions(cluster).write([(p.topic, p.to_json()) for p in promotions])


def forget_promotions(cluster: Cluster, topics: Iterable[str]) -> None:
    """Tombstone the promotion records of ``topics``: a failback made them mirrors again."""
    _promotions(cluster).write([(t, None) for t in topics])


def _ends(cluster: Cluster) -> RecordTopic:
    return RecordTopic(cluster, SOURCE_ENDS_TOPIC, "the sources' ends last seen")


def read_source_ends(cluster: Cluster) -> dict[str, dict[int, dict[str, int]]]:
    """Each topic's partitions' source ends as the followers last recorded them (one record
    per partition: the members of a group each record the partitions they own)."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for key, value in _ends(cluster).read().items():
        try:
            topic, partition = json.loads(key)
            ends = json.loads(value)["ends"]
            out.setdefault(str(topic), {})[int(partition)] = {
                str(s): int(e) for s, e in ends.items()
            }
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # not partsync's: nothing known of that partition
    return out


def write_source_ends(cluster: Cluster, ends: SourceEnds) -> None:
    now = int(time.time() * 1000)
    records = []
    for topic, parts in sorted(ends.items()):
        for p, e in sorted(parts.items()):
            key = json.dumps([topic, p], separators=(",", ":"))
            doc = {"at_ms": now, "ends": dict(e)}
            records.append((key, json.dumps(doc, separators=(",", ":")).encode()))
    _ends(cluster).write(records)
