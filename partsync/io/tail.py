"""Waiting for new source data in follow mode, with the broker's fetch wait (no busy polling).

One ``Tail`` per source cluster long-polls, for every partition whose worker is idle, the
partition's leader at the offset the local log ends at: one Fetch per (leader, topic) covering
all waiting partitions, with ``max_wait_ms`` and ``min_bytes=1``, so the broker answers the
moment data arrives. A partition with data (or an error worth re-planning for) has its event set;
the worker then runs a normal verified copy round. The poll asks for little data per partition:
it is a doorbell, the copy round fetches the batches. What it does get is still reported
(``on_batch``): the newest data batch an answer holds, whose timestamp the lag in seconds of
the live metrics is measured with.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable

from partsync._kafka import LEADER_MOVED_CODES, Connection
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.wire.batch import iter_batches

__all__ = ["Tail"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HighWatermarkFn = Callable[[str, str, int, int], None]  # (source, topic, partition, high watermark)
# (source, topic, partition, last offset, max timestamp ms) of the newest data batch an answer held
BatchSeenFn = Callable[[str, str, int, int, int], None]

_DOORBELL_BYTES = 1024


class Tail:
    def __init__(
        self,
        cluster: Cluster,
        wait_ms: int = 500,
        on_high_watermark: HighWatermarkFn | None = None,
        on_batch: BatchSeenFn | None = None,
    ) -> None:
        self.cluster = cluster
        self.wait_ms = max(1, wait_ms)
        self.on_high_watermark = on_high_watermark
        self.on_batch = on_batch
        self._waiting: dict[TopicPartition, tuple[int, threading.Event]] = {}
        self._cv = threading.Condition()
        self._closed = False
        self._conns: dict[int, Connection] = {}
        self._thread = threading.Thread(target=self._run, name=f"tail-{cluster.name}", daemon=True)
        self._thread.start()

    def watch(self, tp: TopicPartition, offset: int, event: threading.Event) -> None:
        """Set ``event`` once the source has data at or beyond ``offset`` for ``tp``."""
        with self._cv:
            self._waiting[tp] = (offset, event)
            self._cv.notify()

    def unwatch(self, tp: TopicPartition) -> None:
        with self._cv:
            self._waiting.pop(tp, None)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        for c in list(self._conns.values()):
            c.close()  # ends a long poll in progress
        self._thread.join(timeout=self.wait_ms / 1000 + 5)

    def _ring(self, tp: TopicPartition, offset: int) -> None:
        with self._cv:
            cur = self._waiting.get(tp)
            if cur is not None and cur[0] == offset:
                del self._waiting[tp]
                cur[1].set()

    def _ring_all(self) -> None:
        with self._cv:
            waiting, self._waiting = self._waiting, {}
        for _off, ev in waiting.values():
            ev.set()

    def _conn(self, leader: int) -> Connection:
        c = self._conns.get(leader)
        if c is None or c.closed:
            c = self._conns[leader] = self.cluster.connect_to(
                self.cluster.metadata().brokers[leader], timeout=self.wait_ms / 1000 + 30
            )
        return c

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._waiting and not self._closed:
                    self._cv.wait()
                if self._closed:
                    break
                snapshot = dict(self._waiting)
            try:
                self._poll(snapshot)
            except PartsyncError as e:
                if self._closed:
                    break
                # Let the workers re-plan: they read bounds themselves and report what is wrong.
                log.warning("tailing %s: %s", self.cluster.name, e)
                for c in self._conns.values():
                    c.close()
                self._conns.clear()
                self._ring_all()
                with self._cv:
                    self._cv.wait(1.0)
            except Exception:  # pragma: no cover - a bug: wake everyone rather than hang them
                log.exception("tail of %s crashed", self.cluster.name)
                self._ring_all()
                return
        for c in self._conns.values():
            c.close()

    def _report_batch(self, topic: str, p: int, want: int, records: bytes | memoryview) -> None:
        """The newest whole data batch at or beyond ``want`` in a doorbell answer (a batch the
        answer cut short, or only control batches: nothing)."""
        newest = None
        try:
            for b in iter_batches(records, start=want):
                if not b.is_control and b.max_timestamp >= 0:
                    newest = b
        except PartsyncError:  # a damaged answer: the copy round finds and reports it
            return
        if newest is not None and self.on_batch is not None:
            self.on_batch(self.cluster.name, topic, p, newest.last_offset, newest.max_timestamp)

    def _poll(self, snapshot: dict[TopicPartition, tuple[int, threading.Event]]) -> None:
        groups: dict[tuple[int, str], list[tuple[int, int, int]]] = defaultdict(list)
        for (topic, p), (offset, _ev) in snapshot.items():
            try:
                leader = self.cluster.leader(topic, p)
            except PartsyncError:
                self._ring((topic, p), offset)  # the worker will find out what is wrong
                continue
            groups[(leader, topic)].append((p, offset, _DOORBELL_BYTES))
        sent = []
        for (leader, topic), wanted in groups.items():
            conn = self._conn(leader)
            conn.send_fetch(topic, wanted, max_wait_ms=self.wait_ms, min_bytes=1)
            sent.append((conn, topic, {p: o for p, o, _ in wanted}))
        stale = False
        for conn, topic, offsets in sent:
            for p, fp in conn.receive_fetch().items():
                want = offsets.get(p)
                if want is None:
                    continue
                if fp.error_code:
                    stale = stale or fp.error_code in LEADER_MOVED_CODES
                    self._ring((topic, p), want)
                    continue
                if self.on_high_watermark is not None:
                    self.on_high_watermark(self.cluster.name, topic, p, fp.high_watermark)
                if self.on_batch is not None and fp.records:
                    self._report_batch(topic, p, want, fp.records)
                if fp.records or fp.high_watermark > want:
                    self._ring((topic, p), want)
        if stale:
            self.cluster.metadata(refresh=True)
