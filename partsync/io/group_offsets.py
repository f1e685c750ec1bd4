"""A consumer group's committed offsets, read and written as a standalone client: its
coordinator (FindCoordinator), its state and live members (DescribeGroups), its committed
offsets (OffsetFetch) and commits with the leader epoch left unknown (OffsetCommit); and the
offset a reset to a time commits (ListOffsets by timestamp, then the records themselves).

The requests are sent and their error codes read here, in ``io``; ``run.offsets`` decides
what to copy and reports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from partsync._kafka import GROUP_KEY, CommittedOffset, ErrorCode, broker_error
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.plan.comparator import Bounds
from partsync.wire.seek import first_data_at_or_after

__all__ = ["CommittedOffsets", "GroupCoordinator", "GroupDescription", "offset_at_time"]

# Group states in which no member is alive (Kafka's classic and consumer protocols).
_IDLE_STATES = {"Empty", "Dead", "", "EMPTY", "DEAD"}


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator describes it (DescribeGroups, or ConsumerGroupDescribe for
    a KIP-848 consumer group): its state and live members, or the broker's error."""

    group: str
    cluster: str
    error_code: int
    state: str
    members: int

    @property
    def unknown(self) -> bool:
        """Whether the coordinator does not know the group: Kafka describes an unknown group as
        Dead (or answers GROUP_ID_NOT_FOUND); others say Empty."""
        return self.error_code == ErrorCode.GROUP_ID_NOT_FOUND or (
            not self.error_code and self.state.lower() == "dead"
        )

    @property
    def idle(self) -> bool:
        """No live member: only then does Kafka take a standalone client's commits."""
        return not self.members and self.state in _IDLE_STATES

    def check(self) -> GroupDescription:
        """Itself, or the broker's error raised."""
        if self.error_code:
            raise broker_error(
                self.error_code, f"describing group {self.group!r}", cluster=self.cluster
            )
        return self


class GroupCoordinator:
    """A connection to ``group``'s coordinator on ``cluster`` (found on creation, which raises
    the broker's error if there is none); ``close`` it after use."""

    def __init__(self, cluster: Cluster, group: str) -> None:
        self.group = group
        self.cluster = cluster.name
        code, coord = cluster.find_coordinator(group, GROUP_KEY)
        if code or coord is None:
            raise broker_error(
                code, f"finding the coordinator of group {group!r}", cluster=cluster.name
            )
        self._conn = cluster.connect_to(coord)

    def close(self) -> None:
        self._conn.close()

    def describe(self) -> GroupDescription:
        code, state, members = self._conn.describe_group(self.group)
        return GroupDescription(self.group, self.cluster, code, state, members)

    def committed(self, topic: str, partitions: list[int]) -> CommittedOffsets:
        """The group's committed offsets for ``partitions`` of ``topic`` (OffsetFetch); raises
        the broker's error for the whole group (a partition's is raised when it is asked for)."""
        code, committed = self._conn.offset_fetch(self.group, topic, partitions)
        if code:
            raise broker_error(
                code, f"reading group {self.group!r}'s offsets", cluster=self.cluster, topic=topic
            )
        return CommittedOffsets(self.group, self.cluster, topic, committed)

    def commit(self, topic: str, offsets: dict[int, tuple[int, str | None]]) -> None:
        """Commit ``{partition: (offset, metadata)}`` as a standalone client (only an empty
        group takes it), with the leader epoch left unknown; raises the first partition's
        error the broker answers."""
        for p, err in self._conn.offset_commit(self.group, topic, offsets).items():
            if err:
                raise broker_error(
                    err,
                    f"committing group {self.group!r}'s offset",
                    cluster=self.cluster,
                    topic=topic,
                    partition=p,
                )


@dataclass(frozen=True)
class CommittedOffsets:
    """A group's committed offsets for a topic's partitions, as OffsetFetch answered them."""

    group: str
    cluster: str
    topic: str
    by_partition: dict[int, CommittedOffset]

    def at(self, partition: int) -> CommittedOffset | None:
        """The partition's committed offset, None if it has none (or a negative one); raises
        the broker's error for the partition."""
        c = self.by_partition.get(partition)
        if c is not None and c.error_code:
            raise broker_error(
                c.error_code,
                f"reading group {self.group!r}'s offset",
                cluster=self.cluster,
                topic=self.topic,
                partition=partition,
            )
        return None if c is None or c.offset < 0 else c


def offset_at_time(cluster: Cluster, topic: str, partition: int, ts: int, bounds: Bounds) -> int:
    """The offset of the first data record whose timestamp is at least ``ts`` in the
    partition (``wire.seek``), else its end (``bounds.end``). Kafka's own answer (ListOffsets
    by timestamp) is only where the search starts: on a mirror a replayed transaction marker,
    stamped by the local leader when it was written, can capture it."""
    conn = cluster.connect_leader(topic, partition)
    try:
        code, hint = conn.list_offsets(topic, [partition], ts)[partition]
        if code:
            raise broker_error(
                code,
                f"looking up offsets by time {ts}",
                cluster=cluster.name,
                topic=topic,
                partition=partition,
            )
        if hint < 0:  # no batch at all stamped at or after the time
            return bounds.end
        start = max(hint, bounds.log_start)
        read = read_batches(
            conn, cluster.name, topic, partition, start, bounds.end, fetch_bytes=4 << 20
        )
        found = first_data_at_or_after(read, ts, start)
    finally:
        cluster.release(conn)
    return bounds.end if found is None else found
