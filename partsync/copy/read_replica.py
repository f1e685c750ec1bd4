"""Which broker one fetcher reads a partition from on a source (KIP-392): its leader, or the
replica in the client's rack the leader pointed at (``Cluster.prefer_read_replica``; the
cluster's routes remember the choice for every copy fetching the partition).

The fetcher (``copy.fetcher``) asks after each answer whether it moves the partition's fetches
elsewhere (``ReadReplicas.reroute``), and after a failed fetch whether to stop reading from the
replica it went to (``ReadReplicas.failed``).
"""

from __future__ import annotations

import threading

from partsync.io.cluster import Cluster
from partsync.io.kafka_types import FetchedPartition

__all__ = ["ReadReplicas"]

# A rack replica whose high watermark is below the range the leader's covers is asked again
# every _BEHIND_WAIT_S, for up to _BEHIND_LIMIT_S; then the leader serves.
_BEHIND_WAIT_S = 0.05
_BEHIND_LIMIT_S = 3.0


class ReadReplicas:
    """The read replica choice for one partition on one source cluster."""

    def __init__(
        self, cluster: Cluster, topic: str, partition: int, stopping: threading.Event
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.stopping = stopping

    def is_replica(self, broker: int) -> bool:
        """Whether ``broker`` is a rack replica of the partition, not its leader."""
        return broker >= 0 and broker != self.cluster.leader(self.topic, self.partition)

    def failed(self, broker: int) -> None:
        """A fetch from ``broker`` failed: a rack replica is read from no more (for a while)."""
        if self.is_replica(broker):
            self.cluster.forget_read_replica(self.topic, self.partition, broker)

    def reroute(
        self, answer: FetchedPartition, broker: int, offset: int, end: int, behind_s: float
    ) -> float | None:
        """Whether this answer moves the partition's fetches elsewhere (KIP-392), and the
        fetch of ``[offset, end)`` is to be asked again: the leader points at a replica in this
        client's rack (its answer holds no records); the replica answered an error; or its high
        watermark stays below the range, which the leader's reached (the plan's), for more than
        ``_BEHIND_LIMIT_S``. Then its leader serves the partition, without the rack, for a
        while. A replica's high watermark trails the leader's by up to a replication round.

        None when the answer stands; else the seconds waited so far for the replica to reach
        the range (``behind_s``, plus the wait just done when it is behind)."""
        cluster, topic, partition = self.cluster, self.topic, self.partition
        if answer.error_code:
            if self.is_replica(broker):
                cluster.forget_read_replica(topic, partition, broker)
                return behind_s
            return None
        if answer.preferred_read_replica >= 0 and not len(answer.records):
            cluster.prefer_read_replica(topic, partition, answer.preferred_read_replica)
            return behind_s
        if (
            not len(answer.records)
            and 0 <= answer.high_watermark <= offset < end
            and self.is_replica(broker)
        ):
            if behind_s >= _BEHIND_LIMIT_S:
                cluster.forget_read_replica(topic, partition, broker)
            else:
                behind_s += _BEHIND_WAIT_S
                self.stopping.wait(_BEHIND_WAIT_S)
            return behind_s
        return None
