"""One cluster's share of a ``partsync diff``: its common range of a partition streamed over a
dedicated leader connection and digested chunk by chunk (``partsync.wire.digest``), on a thread
of its own a few chunks ahead of the comparison (``ChunkReader``), so clusters are fetched and
digested in parallel while memory stays bounded. Kept apart from ``run.diff``, which compares
what these streams yield and assembles the report.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from partsync.errors import ClusterError, CorruptBatchError
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.plan.diff_model import DiffOptions, Level
from partsync.wire.batch import Batch
from partsync.wire.digest import ChunkDigest, batch_unit, iter_chunks, record_unit
from partsync.wire.holes import as_filled, is_hole
from partsync.wire.records import Record, iter_records

__all__ = ["ChunkReader", "MarkerTimes", "chunk_stream"]


class MarkerTimes:
    """The largest difference between each cluster's transaction-marker timestamps and the
    reference cluster's at the same offsets, collected as the readers (each on its thread)
    pass the markers. An offset is forgotten once every cluster has passed it, so what is kept
    is bounded by how far the readers run apart (their prefetch)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.reference, self.names = names[0], frozenset(names)
        self.skew: dict[str, int] = {}
        self._seen: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def passed(self, name: str, batches: Iterator[Batch]) -> Iterator[Batch]:
        for b in batches:
            if b.is_control:
                self._add(name, b.base_offset, b.max_timestamp)
            yield b

    def _add(self, name: str, offset: int, ts: int) -> None:
        with self._lock:
            seen = self._seen.setdefault(offset, {})
            seen[name] = ts
            ref = seen.get(self.reference)
            if ref is not None:
                for n, t in seen.items():
                    if n != self.reference:
                        self.skew[n] = max(self.skew.get(n, 0), abs(t - ref))
            if len(seen) == len(self.names):
                del self._seen[offset]


def _records_in(
    batches: Iterator[Batch], start: int, end: int, opts: DiffOptions, holes: list[int]
) -> Iterator[Record]:
    for b in batches:
        for r in iter_records(b):
            if start <= r.offset < end:
                if opts.compaction_holes and is_hole(r.key, r.value, r.headers, opts.hole_key):
                    holes[0] += 1  # compared as the hole it fills
                    continue
                yield r


def chunk_stream(
    cluster: Cluster,
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
    counter: list[int],
    holes: list[int],
    markers: MarkerTimes,
) -> Iterator[ChunkDigest]:
    """One cluster's range as chunk digests, over a dedicated connection to the leader."""
    conn = cluster.connect_leader(topic, partition)
    try:
        batches = read_batches(
            conn,
            cluster.name,
            topic,
            partition,
            start,
            end,
            fetch_bytes=opts.fetch_bytes,
            wait_ms=opts.fetch_wait_ms,
            counter=counter,
        )
        batches = markers.passed(cluster.name, batches)
        if opts.level is Level.BATCH:
            if opts.compaction_holes:
                batches = as_filled(batches, start, opts.hole_key, opts.filler_records, holes)
            units = (batch_unit(b) for b in batches)
        else:
            units = (record_unit(r) for r in _records_in(batches, start, end, opts, holes))
        try:
            yield from iter_chunks(units, opts.chunk_offsets, start=start)
        except CorruptBatchError as e:
            raise CorruptBatchError(
                e.reason, cluster=cluster.name, topic=topic, partition=partition, offset=e.offset
            ) from None
    finally:
        conn.close()


class ChunkReader:
    """Runs one cluster's chunk stream on a thread, ``depth`` chunks ahead of the comparison, so
    clusters are fetched and digested in parallel while memory stays bounded."""

    def __init__(self, name: str, make: Callable[[], Iterator[ChunkDigest]], depth: int) -> None:
        self.name = name
        self._make = make
        self._q: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"diff-{name}", daemon=True)
        self._thread.start()

    def _put(self, msg: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._q.put(msg, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            it = self._make()
            try:
                for item in it:
                    if not self._put(("chunk", item)):
                        return
            finally:
                close = getattr(it, "close", None)
                if close is not None:
                    close()
            self._put(("end", None))
        except BaseException as e:  # noqa: BLE001 - handed to the comparing thread, which raises it
            self._put(("error", e))

    def __iter__(self) -> Iterator[ChunkDigest]:
        while True:
            try:
                kind, value = self._q.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    raise ClusterError("reader stopped unexpectedly", cluster=self.name) from None
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
