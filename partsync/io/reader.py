"""The one fetch-and-walk loop: read a partition's batches over ``[start, end)`` from one broker.

Copy fetchers, boundary checks and diff all read through here, so the rules are written once:
a missing partition or an error code in the answer is an error naming the cluster, topic,
partition and offset; every batch's CRC32C is checked; a fetch begins at the batch that
*contains* the fetch offset (it may start below it) and a truncated tail batch is dropped and
fetched whole next time; a fetch that returns no whole batch grows its size (a batch bigger than
the fetch size) unless the high watermark moved back below the offset (truncation, a leader
change), which is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from partsync._kafka import PROBE_WAIT_MS, Connection, FetchedPartition, fetch_error
from partsync.errors import ClusterError, CorruptBatchError, UnsafeError
from partsync.wire.batch import Batch, iter_batches
from partsync.wire.filler import is_filler

__all__ = [
    "MAX_FETCH_BYTES",
    "Fetched",
    "RangeRead",
    "batch_at",
    "checked",
    "newest_data_timestamp",
    "read_batches",
    "read_fetches",
]

# The largest single fetch the reader grows to when a batch does not fit.
MAX_FETCH_BYTES = 64 << 20
_PROBE_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Fetched:
    """One fetch's answer: the whole batches it held inside the range, the bytes the broker
    sent, and the size the fetch asked for (what a byte budget reserved for it)."""

    batches: list[Batch]
    received: int
    requested: int
    # The base offset of the first batch at or past the range end, when the fetch saw one.
    beyond: int | None = None


def checked(
    f: FetchedPartition | None, *, cluster: str, topic: str, partition: int, offset: int
) -> FetchedPartition:
    """The partition's part of a Fetch answer, or the error it stands for."""
    if f is None:
        raise ClusterError(
            "fetch returned no data for the partition",
            cluster=cluster,
            topic=topic,
            partition=partition,
            offset=offset,
        )
    if f.error_code:
        raise fetch_error(cluster, topic, partition, offset, f.error_code)
    return f


def _verified(
    f: FetchedPartition, start: int, cluster: str, topic: str, partition: int
) -> Iterator[Batch]:
    for b in iter_batches(f.records, start=start):
        if not b.crc_ok():
            raise CorruptBatchError(
                f"stored batch {b.base_offset}..{b.last_offset} fails its CRC32C check "
                f"(stored {b.crc:#010x})",
                cluster=cluster,
                topic=topic,
                partition=partition,
                offset=b.base_offset,
            )
        yield b


class RangeRead:
    """Where a read of ``[start, end)`` stands, and what each fetch answer means for it.

    ``request()`` is the (offset, size) to fetch next; ``take(answer)`` applies the rules to one
    answer and returns its batches inside the range. It does no I/O, so a blocking loop
    (``read_fetches``) and a pipelined fetcher (several requests in flight on one connection)
    apply the same rules. The range holds the batches whose *base* offset is below ``end``.
    """

    def __init__(
        self, cluster: str, topic: str, partition: int, start: int, end: int, fetch_bytes: int
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.offset = start
        self.end = end
        self.size = fetch_bytes
        # The least the next fetch must ask for: 4 times a fetch that held no whole batch.
        self.least = 0
        # Answers in a row that held no bytes at all (not even part of a batch).
        self.empty = 0
        self.done = start >= end

    def request(self) -> tuple[int, int]:
        return self.offset, self.size

    def take(self, answer: FetchedPartition | None, size: int | None = None) -> Fetched:
        """The batches of one answer to a fetch of ``request()`` (``size``: the bytes that
        fetch asked for, when the caller sized it itself)."""
        asked = self.size if size is None else size
        offset = self.offset
        f = checked(
            answer, cluster=self.cluster, topic=self.topic, partition=self.partition, offset=offset
        )
        got: list[Batch] = []
        beyond = None
        for b in _verified(f, offset, self.cluster, self.topic, self.partition):
            if b.base_offset >= self.end:
                self.done, beyond = True, b.base_offset
                break
            got.append(b)
            offset = b.next_offset
            if offset >= self.end:
                self.done = True
                break
        self.offset = offset
        if not got and not self.done:
            if 0 <= f.high_watermark <= offset:
                raise ClusterError(
                    f"high watermark {f.high_watermark} fell below the range end {self.end} "
                    "(truncated, or the leader changed)",
                    cluster=self.cluster,
                    topic=self.topic,
                    partition=self.partition,
                    offset=offset,
                )
            if asked >= MAX_FETCH_BYTES:
                raise ClusterError(
                    f"fetch returned no whole batch even with {asked} bytes",
                    cluster=self.cluster,
                    topic=self.topic,
                    partition=self.partition,
                    offset=offset,
                )
            # No bytes at all is first taken for a full response (Kafka fills a Fetch answer's
            # max_bytes partition by partition; later ones then get none) and asked again as
            # it was: growing it would have the broker send bytes past the range, which are
            # dropped (on a slow link a tenth of the copy). Part of a batch, or nothing twice:
            # a batch bigger than the fetch, so ask for more next time.
            self.empty = 0 if len(f.records) else self.empty + 1
            if self.empty != 1:
                self.least = min(MAX_FETCH_BYTES, asked * 4)
                self.size = max(self.size, self.least)
        else:
            self.empty = 0
        return Fetched(got, len(f.records), asked, beyond)


def read_fetches(
    conn: Connection,
    cluster: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fetch_bytes: int,
    wait_ms: int = PROBE_WAIT_MS,
    before_fetch: Callable[[int], None] | None = None,
) -> Iterator[Fetched]:
    """Every batch overlapping ``[start, end)``, one fetch's worth at a time, CRC-checked.

    ``before_fetch(size)`` runs before each fetch (a byte budget reserves ``size`` there, or a
    stopping copy raises). The loop ends after the batch that reaches ``end`` or at the first
    batch whose base offset is ``end`` or beyond.
    """
    read = RangeRead(cluster, topic, partition, start, end, fetch_bytes)
    while not read.done:
        offset, size = read.request()
        if before_fetch is not None:
            before_fetch(size)
        fetched = conn.fetch(
            topic, [(partition, offset, size)], max_wait_ms=wait_ms, min_bytes=1, max_bytes=size
        )
        yield read.take(fetched.get(partition))


def read_batches(
    conn: Connection,
    cluster: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    fetch_bytes: int,
    wait_ms: int = PROBE_WAIT_MS,
    counter: list[int] | None = None,
) -> Iterator[Batch]:
    """``read_fetches`` one batch at a time; ``counter[0]`` adds up the batch bytes read."""
    for fetched in read_fetches(
        conn, cluster, topic, partition, start, end, fetch_bytes=fetch_bytes, wait_ms=wait_ms
    ):
        for b in fetched.batches:
            if counter is not None:
                counter[0] += b.size
            yield b


def batch_at(conn: Connection, cluster: str, topic: str, partition: int, offset: int) -> Batch:
    """The batch holding ``offset`` on one cluster (CRC-checked).

    An offset inside the log that no batch holds was removed by compaction (the log cleaner
    drops batches whose records were all superseded): that is an ``UnsafeError``, since no
    retry brings it back and nothing can be compared there."""
    for fetched in read_fetches(
        conn, cluster, topic, partition, offset, offset + 1, fetch_bytes=_PROBE_BYTES
    ):
        for b in fetched.batches:
            if b.base_offset <= offset <= b.last_offset:
                return b
        if fetched.beyond is not None:
            raise UnsafeError(
                f"no batch holds offset {offset}: the log goes on at offset {fetched.beyond} "
                "(removed by compaction), so the histories cannot be compared there",
                cluster=cluster,
                topic=topic,
                partition=partition,
                offset=offset,
            )
        break
    raise ClusterError(
        f"no batch holding offset {offset} was returned",
        cluster=cluster,
        topic=topic,
        partition=partition,
        offset=offset,
    )


def newest_data_timestamp(
    conn: Connection,
    cluster: str,
    topic: str,
    partition: int,
    log_start: int,
    end: int,
    *,
    max_batches: int = 16,
) -> int | None:
    """The max timestamp of the partition's newest data batch below ``end``: transaction
    markers and filler batches are passed over (they carry the writing cluster's clock, not
    the data's). None for an empty log, or when ``max_batches`` batches back hold no data."""
    at = end - 1
    for _ in range(max_batches):
        if at < log_start:
            return None
        try:
            b = batch_at(conn, cluster, topic, partition, at)
        except UnsafeError:  # compacted away: nothing to stamp from there
            return None
        if not b.is_control and not is_filler(b):
            return b.max_timestamp
        at = b.base_offset - 1
    return None
