"""Metadata and ListOffsets (a mixin of ``Connection``): where each partition's leader is, and
the offsets that bound its log."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from partsync._kafka.connection import CONSUMER_REPLICA
from partsync._kafka.group_requests import BrokerInfo

__all__ = ["Metadata", "MetadataRequests", "PartitionMeta", "TopicMeta"]


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int
    error_code: int
    # The leader's epoch (-1 when the broker does not say): sent with requests that must reach
    # the current leader, so a stale one answers FENCED_LEADER_EPOCH instead of old data.
    leader_epoch: int = -1
    # How many replicas the partition has (0 when the broker does not say).
    replicas: int = 0


@dataclass(frozen=True)
class TopicMeta:
    name: str
    error_code: int
    partitions: dict[int, PartitionMeta]
    # Metadata v10+: the id a topic keeps for its life (a topic deleted and created again under
    # the same name gets a new one). None where the broker does not say.
    topic_id: str | None = None


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicMeta]


_NO_TOPIC_ID = uuid.UUID(int=0)


def _topic_id(t: Any) -> str | None:
    raw = getattr(t, "topic_id", None)
    if raw is None:
        return None
    tid = raw if isinstance(raw, uuid.UUID) else uuid.UUID(bytes=bytes(raw))
    return None if tid == _NO_TOPIC_ID else str(tid)


class MetadataRequests:
    """Metadata and ListOffsets over ``call`` (from ``BrokerConnection``)."""

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

    def metadata(self, topics: list[str] | None) -> Metadata:
        topic_reqs = (
            None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        )
        resp = self.call(
            "Metadata",
            MetadataRequest(topics=topic_reqs, allow_auto_topic_creation=False),
        )
        brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port) for b in resp.brokers}
        out: dict[str, TopicMeta] = {}
        for t in resp.topics:
            parts = {
                p.partition_index: PartitionMeta(
                    p.partition_index,
                    p.leader_id,
                    p.error_code,
                    getattr(p, "leader_epoch", -1),
                    len(getattr(p, "replica_nodes", None) or ()),
                )
                for p in t.partitions
            }
            out[t.name] = TopicMeta(t.name, t.error_code, parts, _topic_id(t))
        return Metadata(brokers, out)

    def list_offsets(
        self,
        topic: str,
        partitions: list[int],
        timestamp: int,
        *,
        replica_id: int = CONSUMER_REPLICA,
        leader_epochs: dict[int, int] | None = None,
        isolation_level: int = 0,
    ) -> dict[int, tuple[int, int]]:
        """Returns {partition: (error_code, offset)} for EARLIEST/LATEST.

        ``isolation_level`` 1 (read_committed) answers LATEST with the last stable offset.

        ``replica_id`` CONSUMER_REPLICA (-1) answers LATEST with the high watermark;
        DEBUG_REPLICA (-2) with the log end offset, where the next append lands (Kafka lets any
        replica answer it: pass ``leader_epochs`` so that only the current leader does)."""
        epochs = leader_epochs or {}
        P = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        req = ListOffsetsRequest(
            replica_id=replica_id,
            isolation_level=isolation_level,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        P(
                            partition_index=p,
                            timestamp=timestamp,
                            current_leader_epoch=epochs.get(p, -1),
                        )
                        for p in partitions
                    ],
                )
            ],
        )
        resp = self.call("ListOffsets", req)
        out: dict[int, tuple[int, int]] = {}
        for t in resp.topics:
            for p in t.partitions:
                out[p.partition_index] = (p.error_code, p.offset)
        return out
