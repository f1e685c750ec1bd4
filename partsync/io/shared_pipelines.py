"""The request pipelines a process's partition copies share, per broker: writers (Produce) to
the local cluster's leaders and fetch lanes (Fetch) to the sources' brokers, each packing many
partitions into one request."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TypeVar

from partsync._kafka import Connection
from partsync.errors import ClusterError, PartsyncError
from partsync.io.connections import Connections
from partsync.io.fetch_lane import FetchLane
from partsync.io.metadata import MetadataCache
from partsync.io.routes import ReadRoutes
from partsync.io.writer import SharedWriter

__all__ = ["WRITER_LANES", "SharedPipelines"]

# A shared writer or fetch lane idle this long is replaced before use: well within the
# broker's connections.max.idle.ms (10 minutes), after which it closes them itself.
_PIPELINE_IDLE_S = 300.0
# Shared writers (Produce connections) per local broker, a partition always on the same one.
# Apache Kafka reads a connection's next request only once it answered the one before, so one
# connection has one Produce request in the broker at a time, and the broker's log appends for
# it run one after another; two let it append on two threads. At 128 partitions of 1.6 MB on
# Kafka 4.1.1 the copy took ~14% less (docs/benchmarks.md, "Start-up, fencing identity and two
# writers").
WRITER_LANES = 2
_Pipeline = SharedWriter | FetchLane
_S = TypeVar("_S", SharedWriter, FetchLane)


class SharedPipelines:
    def __init__(self, conns: Connections, meta: MetadataCache, routes: ReadRoutes) -> None:
        self.name = conns.name
        self._conns = conns
        self._meta = meta
        self._routes = routes
        self._lock = threading.Lock()
        # Shared writers and fetch lanes, by kind and broker (and lane number).
        self._pipelines: dict[Hashable, _Pipeline] = {}
        self._making: dict[Hashable, threading.Lock] = {}  # held while one is being made
        self._closed = False

    def shared_writer(
        self, topic: str, partition: int, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        """One of the ``WRITER_LANES`` writers shared by every partition copy of this process
        whose leader is the same broker (many partitions per Produce request), always the same
        one for a partition; a broken one is replaced."""
        leader = self._meta.leader(topic, partition)
        lane = partition % WRITER_LANES
        return self._shared(
            ("writer", leader, lane), leader, lambda c: SharedWriter(c, timeout_ms=timeout_ms)
        )

    def txn_writer(
        self, topic: str, partition: int, transactional_id: str, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        """A writer of its own (a connection to the partition's leader) for the batches of one
        transaction, not shared: a Produce request names one transactional id. The caller
        closes it."""
        return SharedWriter(
            self._conns.connect_node(self._meta.leader(topic, partition)),
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
        )

    def fetch_lane(
        self, topic: str, partition: int, lane: int = 0, *, in_flight: int = 4
    ) -> FetchLane:
        """Fetch lane ``lane`` to the broker the partition is read from (``ReadRoutes``),
        shared by every partition copy of this process that fetches from that broker (many
        partitions per Fetch request); a broken one is replaced. A lane to the leader of a
        partition whose rack replica failed lately (or cannot be connected to now) sends no
        rack, so the leader serves it instead of pointing at that replica again."""
        broker, rack = self._routes.route(topic, partition)
        try:
            return self._fetch_lane_to(broker, rack, lane, in_flight)
        except PartsyncError:
            if broker == self._meta.leader(topic, partition):
                raise
            # A rack replica that cannot be connected to: its leader serves, without the rack.
            self._routes.forget_read_replica(topic, partition, broker)
            broker, rack = self._routes.route(topic, partition)
            return self._fetch_lane_to(broker, rack, lane, in_flight)

    def _fetch_lane_to(self, broker: int, rack: bool, lane: int, in_flight: int) -> FetchLane:
        key = ("fetch", broker, lane) if rack else ("fetch-norack", broker, lane)

        def make(conn: Connection) -> FetchLane:
            fl = FetchLane(conn, max_in_flight=in_flight, rack=rack)
            fl.broker = broker
            return fl

        return self._shared(key, broker, make)

    def _shared(self, key: Hashable, leader: int, make: Callable[[Connection], _S]) -> _S:
        def usable(p: _Pipeline | None) -> bool:
            if p is None or p.broken:
                return False
            idle = p.idle_for()  # 0 while requests are in flight
            # One whose SASL session is about to end is replaced once nothing is in flight on
            # it (closing it under its requests would cut them, as the broker would).
            return idle < _PIPELINE_IDLE_S and not (p.expiring and idle > 0)

        with self._lock:
            s = self._pipelines.get(key)
            if usable(s):
                return s  # type: ignore[return-value]
            making = self._making.setdefault(key, threading.Lock())
        # One thread connects; the others (many copies start at once) wait for its pipeline
        # rather than open connections of their own.
        with making:
            with self._lock:
                stale = self._pipelines.get(key)
                if usable(stale):
                    return stale  # type: ignore[return-value]
            info = self._meta.metadata().brokers[leader]
            fresh = make(self._conns.connect(info.host, info.port))
            with self._lock:
                closed = self._closed
                if not closed:
                    self._pipelines[key] = fresh
            if closed:  # closed meanwhile: nobody would close this one
                fresh.close()
                raise ClusterError("cluster connections closed", cluster=self.name)
        if stale is not None:
            stale.close()
        return fresh

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pipelines = list(self._pipelines.values())
            self._pipelines.clear()
        for p in pipelines:
            p.close()
