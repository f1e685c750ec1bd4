"""Shared writers per local broker (``shared_pipelines.WRITER_LANES``, a partition always on the
same one): many partitions' batches in one Produce request.

Partition copies submit rewritten batches; the writer (an ``io.pipeline``) packs whatever is
waiting into Produce requests with at most one batch per partition (Apache Kafka's rule for
client appends), keeps a few requests in flight on one connection, and hands each partition's
answer back through a ``ProduceFuture`` whose callback checks it for the partition (base offset,
error code). Each partition's batches go out in submission order, one request after another, so
the idempotent sequence still orders them; a partition that has stopped (``cancelled()``) has
its waiting batches dropped, never sent.

Packing: while requests are in flight, waiting batches go out once the next answer has been
handed to its partitions, or at once when they already fill ``PACK_BYTES`` or come from
``PACK_PARTITIONS`` partitions. A partition has one append in flight, and its next batch is
usually submitted by the callback of the answer before (see the appender), so the partitions
answered together are sent together again, with no extra round trip. Sending every batch the
moment it arrived made requests of about two batches each: twice the local broker's work per
batch, and the client's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from partsync._kafka import Connection, ProducedPartition
from partsync._kafka.raw import Buffer, Parts
from partsync.errors import Cancelled, ClusterError, PartsyncError
from partsync.io.answer import Answer
from partsync.io.pipeline import Item, Pipeline

__all__ = ["ProduceFuture", "SharedWriter"]

# While requests are in flight, waiting batches go out as soon as they reach either bound.
PACK_BYTES = 1 << 20
PACK_PARTITIONS = 16


# One partition's answer in a Produce response (its callback runs in the writer's receiver).
ProduceFuture = Answer[ProducedPartition]


@dataclass(slots=True)
class _Submission(Item[ProducedPartition]):
    data: Buffer | Parts = b""


class SharedWriter(Pipeline[_Submission]):
    """Produce requests for many partitions over one connection to one broker."""

    api = "Produce"
    label = "writer"
    drain_on_close = True  # appends already submitted are sent and verified

    def __init__(
        self,
        conn: Connection,
        *,
        max_in_flight: int = 5,
        max_request_bytes: int = 16 << 20,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        super().__init__(
            conn,
            max_in_flight=max_in_flight,
            max_request_bytes=max_request_bytes,
            pack_partitions=PACK_PARTITIONS,
            pack_bytes=PACK_BYTES,
        )
        self._timeout_ms = timeout_ms
        # A transaction's writer: every batch it sends belongs to this id's open transaction.
        self._transactional_id = transactional_id
        self._start()

    def submit(
        self, topic: str, partition: int, data: Buffer | Parts, cancelled: Callable[[], bool]
    ) -> ProduceFuture:
        # Answer(), not ProduceFuture(): calling a subscripted generic goes through typing,
        # which also tries (and fails, __slots__) to set __orig_class__: ~0.8 us per batch.
        fut: ProduceFuture = Answer()
        self._enqueue(_Submission(topic, partition, len(data), cancelled, fut, data))
        return fut

    def _not_sent(self) -> PartsyncError:
        return Cancelled("partition stopped; batch not sent")

    def _send(self, batch: list[_Submission]) -> None:
        by_topic: dict[str, dict[int, Buffer | Parts]] = {}
        for s in batch:
            by_topic.setdefault(s.topic, {})[s.partition] = s.data
        self._conn.send_produce_many(
            by_topic, acks=-1, timeout_ms=self._timeout_ms, transactional_id=self._transactional_id
        )

    def _after_send(self, batch: list[_Submission]) -> None:
        # Sent (never sent again): drop the batches, which are views that keep whole fetch
        # responses alive, rather than hold them until the answer.
        for s in batch:
            s.data = b""

    def _receive(self) -> Mapping[tuple[str, int], Any]:
        return self._conn.receive_produce_many()

    def _hand_out(
        self, batch: list[_Submission], answers: Mapping[tuple[str, int], Any], throttle_ms: int
    ) -> None:
        for s in batch:
            res = answers.get((s.topic, s.partition))
            if res is None:
                s.future.set(
                    error=ClusterError(
                        "Produce response lacks the partition",
                        cluster=self.cluster,
                        topic=s.topic,
                        partition=s.partition,
                    )
                )
            else:
                s.future.set(res)

    def close(self, timeout: float | None = None) -> None:
        super().close(self._timeout_ms / 1000 + 5 if timeout is None else timeout)
