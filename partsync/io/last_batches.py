"""The batch holding one offset in each of many partitions of a topic, read with one Fetch per
leader: a plan's look at the last batch of every partition whose ends agree
(``run.planner``), which one fetch per partition would make the cost of a run that copies
nothing."""

from __future__ import annotations

from collections.abc import Mapping

from partsync.io.cluster import Cluster
from partsync.wire.batch import Batch, iter_batches

__all__ = ["batches_at"]

# Per partition: a usual last batch fits. Kafka returns a bigger one whole only as the answer's
# first; past it the answer holds part of a batch, and that partition is left out.
_PARTITION_BYTES = 1 << 16
_MAX_BYTES = 16 << 20


def batches_at(cluster: Cluster, topic: str, offsets: Mapping[int, int]) -> dict[int, Batch]:
    """The CRC-checked batch holding ``offsets[p]`` of each partition ``p``. A partition the
    answer holds no such whole batch for (an error code, a batch bigger than its share of the
    fetch, an offset compaction removed) is left out: the caller reads it alone, which says
    why. Connection failures raise (``ClusterError``)."""
    by_leader: dict[int, list[int]] = {}
    for p in sorted(offsets):
        by_leader.setdefault(cluster.leader(topic, p), []).append(p)
    out: dict[int, Batch] = {}
    for parts in by_leader.values():
        conn = cluster.connect_leader(topic, parts[0])
        try:
            answers = conn.fetch(
                topic,
                [(p, offsets[p], _PARTITION_BYTES) for p in parts],
                max_bytes=min(_MAX_BYTES, len(parts) * _PARTITION_BYTES),
            )
        finally:
            cluster.release(conn)
        for p in parts:
            f = answers.get(p)
            if f is None or f.error_code:
                continue
            at = offsets[p]
            for b in iter_batches(f.records, start=at):
                if b.base_offset <= at <= b.last_offset and b.crc_ok():
                    out[p] = b
                break
    return out
