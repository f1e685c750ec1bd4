"""A small compacted topic on the local cluster where partsync keeps its own records, one value
per key (the latest; a tombstone forgets a key): the ACLs it created (``io.acls``), the topics
it promoted and the sources' ends it last saw (``run.promote``). One partition, created on
first write; written with plain acks=all appends, read from the log start to the end."""

from __future__ import annotations

import time
from collections.abc import Sequence

from partsync.errors import BrokerError
from partsync.io.broker_errors import broker_error
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.wire.keyed import keyed_batch
from partsync.wire.records import iter_records

__all__ = ["RecordTopic", "append_plain"]

_READ_BYTES = 1 << 20
# Compaction soon after a key is written again: these topics are read whole by every run.
_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
}
# Records per appended batch: a write of many keys (every moved partition's sources' ends)
# goes out as several batches, each well inside Kafka's default max.message.bytes (1 MiB).
_BATCH_RECORDS = 500


class RecordTopic:
    def __init__(self, cluster: Cluster, topic: str, what: str) -> None:
        """``what`` names the record in errors (e.g. "the record of the ACLs partsync
        created")."""
        self.cluster = cluster
        self.topic = topic
        self.what = what

    def read(self) -> dict[str, bytes]:
        """Every key's latest value (none before the topic exists)."""
        if self.cluster.topic(self.topic, refresh=True) is None:
            return {}
        b = self.cluster.bounds(self.topic, [0])[0]
        held: dict[str, bytes | None] = {}
        if b.end > b.log_start:
            conn = self.cluster.connect_leader(self.topic, 0)
            try:
                for batch in read_batches(
                    conn,
                    self.cluster.name,
                    self.topic,
                    0,
                    b.log_start,
                    b.end,
                    fetch_bytes=_READ_BYTES,
                ):
                    if batch.is_control:
                        continue
                    for r in iter_records(batch):
                        if r.key is not None:
                            held[r.key.decode(errors="replace")] = r.value
            finally:
                self.cluster.release(conn)
        return {k: v for k, v in held.items() if v is not None}

    def write(self, records: Sequence[tuple[str, bytes | None]]) -> None:
        """Append ``records`` (key, value; None forgets the key), acks=all, in batches of at
        most ``_BATCH_RECORDS``, one after the other."""
        if not records:
            return
        if self.cluster.topic(self.topic) is None:
            self.cluster.create_topic(self.topic, 1, dict(_CONFIGS))
        for i in range(0, len(records), _BATCH_RECORDS):
            self._append(records[i : i + _BATCH_RECORDS])

    def _append(self, records: Sequence[tuple[str, bytes | None]]) -> None:
        batch = keyed_batch([(k.encode(), v) for k, v in records], int(time.time() * 1000))
        append_plain(self.cluster, self.topic, 0, batch, f"writing {self.what}")


def append_plain(cluster: Cluster, topic: str, partition: int, batch: bytes, what: str) -> None:
    """Append one batch without a producer identity, acks=all, and wait for its answer: a
    request lost with the connection is not sent again (the caller reads what landed)."""
    conn = cluster.connect_leader(topic, partition)
    try:
        conn.send_produce(topic, {partition: batch})
        res = conn.receive_produce()[partition]
    except BrokerError:
        cluster.metadata(refresh=True)
        raise
    finally:
        cluster.release(conn)
    if res.error_code:
        raise broker_error(
            res.error_code,
            f"{what} to topic {topic}",
            cluster=cluster.name,
            topic=topic,
            partition=partition,
        )
