"""Waiting for new source data in follow mode, with the broker's fetch wait (no busy polling).

One ``Tail`` per source cluster long-polls, for every partition parked in the engine, the
partition's leader at the offset the local log ends at: one Fetch per leader covering all
waiting partitions, with ``max_wait_ms`` and ``min_bytes=1``, so the broker answers the moment
data arrives. Each leader's polls run in an incremental fetch session (KIP-227,
``plan.fetch_session``): an idle poll names no partition and its answer lists none, however
many partitions wait. A partition with data (or an error worth re-planning for) has its wake
callback called (outside the tail's lock) and leaves the session at the next poll; the engine
then runs a normal verified copy round. The poll asks for little data per partition: it is a
doorbell, the copy round fetches the batches. What it does get is still reported
(``on_batch``): the newest data batch an answer holds, whose timestamp the lag in seconds of
the live metrics is measured with.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from partsync._kafka import LEADER_MOVED_CODES, Connection, error_name, raise_for_code
from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.plan.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSession,
)
from partsync.wire.batch import Batch, iter_batches

__all__ = ["Tail"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HighWatermarkFn = Callable[[str, str, int, int], None]  # (source, topic, partition, high watermark)
# (source, topic, partition, last offset, max timestamp ms) of the newest data batch an answer held
BatchSeenFn = Callable[[str, str, int, int, int], None]
WakeFn = Callable[[], None]

_DOORBELL_BYTES = 1024


def _each(wakes: list[WakeFn]) -> None:
    for wake in wakes:
        wake()


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
        self._waiting: dict[TopicPartition, tuple[int, WakeFn]] = {}
        # Rings the wake-ups of one answer, all at once (the engine's: so a worker takes the
        # partitions one answer woke in one round); by default one after another.
        self.ring_many: Callable[[list[WakeFn]], None] = _each
        self._cv = threading.Condition()
        self._closed = False
        self._conns: dict[int, Connection] = {}
        self._sessions: dict[int, FetchSession] = {}  # per leader, with its connection
        # Polls sent as full and as incremental fetch requests (KIP-227), for tests and bench.
        self.full_requests = 0
        self.incremental_requests = 0
        self._thread = threading.Thread(target=self._run, name=f"tail-{cluster.name}", daemon=True)
        self._thread.start()

    def watch(self, tp: TopicPartition, offset: int, wake: WakeFn) -> None:
        """Call ``wake`` once the source has data at or beyond ``offset`` for ``tp`` (or an
        answer worth re-planning for), once; a later watch of ``tp`` replaces this one."""
        with self._cv:
            self._waiting[tp] = (offset, wake)
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

    def _ring(self, due: list[tuple[TopicPartition, int]]) -> None:
        """Wake each partition still waiting at that offset."""
        wakes = []
        with self._cv:
            for tp, offset in due:
                cur = self._waiting.get(tp)
                if cur is not None and cur[0] == offset:
                    del self._waiting[tp]
                    wakes.append(cur[1])
        if wakes:
            self.ring_many(wakes)  # outside the lock: a callback may watch again

    def _ring_all(self) -> None:
        with self._cv:
            waiting, self._waiting = self._waiting, {}
        self.ring_many([wake for _off, wake in waiting.values()])

    def _conn(self, leader: int) -> Connection:
        c = self._conns.get(leader)
        if c is None or c.closed:
            c = self._conns[leader] = self.cluster.connect_to(
                self.cluster.metadata().brokers[leader], timeout=self.wait_ms / 1000 + 30
            )
            self._sessions[leader] = FetchSession()  # a session lives on its connection
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
                started = time.monotonic()
                rang = self._poll(snapshot)
                early = self.wait_ms / 2000 - (time.monotonic() - started)
                if not rang and early > 0:
                    # A broker that does not hold a Fetch for max_wait_ms (noida-db answers at
                    # once) would make this loop spin: after an answer with nothing new, the
                    # next poll waits until half the wait has passed since this one was sent,
                    # unless another partition comes to wait.
                    with self._cv:
                        self._cv.wait(early)
            except PartsyncError as e:
                if self._closed:
                    break
                # Let the workers re-plan: they read bounds themselves and report what is wrong.
                log.warning("tailing %s: %s", self.cluster.name, e)
                for c in self._conns.values():
                    c.close()
                self._conns.clear()
                self._sessions.clear()
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
        newest = _newest_batch(records, want)
        if newest is not None and self.on_batch is not None:
            self.on_batch(self.cluster.name, topic, p, newest.last_offset, newest.max_timestamp)

    def _poll(self, snapshot: dict[TopicPartition, tuple[int, WakeFn]]) -> int:
        """One long poll of every waiting partition: one Fetch per leader, in that leader's
        fetch session (``plan.fetch_session``: after the first, a request names only the
        partitions that changed, and an answer only those with something new). Returns how
        many partitions it woke."""
        due: list[tuple[TopicPartition, int]] = []
        by_leader: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        # Each topic's leaders looked up once a poll, not once a partition: an idle poll of
        # 10,000 partitions would spend most of its CPU in the metadata cache.
        leaders: dict[str, dict[int, int] | None] = {}
        for tp, (offset, _wake) in snapshot.items():
            topic, p = tp
            if topic not in leaders:
                leaders[topic] = _leaders(self.cluster, topic)
            leader = (leaders[topic] or {}).get(p)
            if leader is None:
                due.append((tp, offset))  # the round will find out what is wrong
                continue
            by_leader[leader][tp] = offset
        try:
            self._poll_leaders(by_leader, due)
        finally:
            self._ring(due)
        return len(due)

    def _poll_leaders(
        self, by_leader: dict[int, dict[TopicPartition, int]], due: list[tuple[TopicPartition, int]]
    ) -> None:
        """The Fetch of each leader's waiting partitions; those to wake into ``due``."""
        sent = []
        for leader, wanted in by_leader.items():
            conn = self._conn(leader)
            session = self._sessions.setdefault(leader, FetchSession())
            req = session.request(wanted)
            fetch: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
            for (topic, p), offset in req.fetch.items():
                fetch[topic].append((p, offset, _DOORBELL_BYTES))
            forgotten: dict[str, list[int]] = defaultdict(list)
            for topic, p in req.forgotten:
                forgotten[topic].append(p)
            conn.send_fetch_session(
                req.session_id, req.epoch, fetch, forgotten, max_wait_ms=self.wait_ms
            )
            sent.append((conn, session, req, wanted))
        stale = False
        for conn, session, req, wanted in sent:
            try:
                error, session_id, parts = conn.receive_fetch_session()
            except PartsyncError:
                session.lost()
                raise
            session.answered(req, error, session_id)
            self.full_requests += req.full
            self.incremental_requests += not req.full
            if error in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
                # Evicted (the broker's session slots are shared by every client) or out of
                # step: the next poll is a full request, in a new session if there is a slot.
                log.debug("fetch session of %s ended (%s)", self.cluster.name, error_name(error))
                continue
            if error:
                raise_for_code(error, "Fetch", cluster=self.cluster.name)
            for (topic, p), fp in parts.items():
                want = wanted.get((topic, p))
                if want is None:  # not waiting any more (it leaves the session next time)
                    continue
                if fp.error_code:
                    stale = stale or fp.error_code in LEADER_MOVED_CODES
                    due.append(((topic, p), want))
                    continue
                if self.on_high_watermark is not None:
                    self.on_high_watermark(self.cluster.name, topic, p, fp.high_watermark)
                if self.on_batch is not None and fp.records:
                    self._report_batch(topic, p, want, fp.records)
                if fp.records or fp.high_watermark > want:
                    due.append(((topic, p), want))
        if stale:
            self.cluster.metadata(refresh=True)


def _leaders(cluster: Cluster, topic: str) -> dict[int, int] | None:
    """The topic's leader of each partition (None: the topic is not known)."""
    try:
        info = cluster.topic(topic)
    except PartsyncError:
        return None
    return None if info is None else info.leaders


def _newest_batch(records: bytes | memoryview, want: int) -> Batch | None:
    """The newest whole data batch at or beyond ``want`` in a doorbell answer (a batch the
    answer cut short, or only control batches: None)."""
    newest = None
    try:
        for b in iter_batches(records, start=want):
            if not b.is_control and b.max_timestamp >= 0:
                newest = b
    except PartsyncError:  # a damaged answer: the copy round finds and reports it
        return None
    return newest
