"""Where a source partition's records are fetched from (KIP-392, ``client_rack``): the replica
its leader prefers for this client's rack while that holds, else the leader."""

from __future__ import annotations

import logging
import threading
import time

from partsync.io.metadata import MetadataCache

__all__ = ["ReadRoutes"]

log = logging.getLogger(__name__)
# KIP-392: how long a leader's "fetch from replica N" holds before the leader is asked again
# (Kafka's consumer keeps it for metadata.max.age.ms, 5 minutes by default), and how long a
# replica that failed to serve is not taken again.
_READ_REPLICA_S = 300.0
_READ_REPLICA_FAILED_S = 60.0


class ReadRoutes:
    def __init__(self, meta: MetadataCache, client_rack: str | None) -> None:
        self.name = meta.name
        self._meta = meta
        self._rack = client_rack
        self._lock = threading.Lock()
        # Per partition, the replica its leader told this client (client_rack) to fetch from
        # and until when; a replica that failed is (-1, until when none is taken).
        self._read_replicas: dict[tuple[str, int], tuple[int, float]] = {}

    def read_broker(self, topic: str, partition: int) -> int:
        """Where the partition's records are fetched from."""
        return self.route(topic, partition)[0]

    def route(self, topic: str, partition: int) -> tuple[int, bool]:
        """(broker, whether fetches to it carry the client's rack)."""
        leader = self._meta.leader(topic, partition)
        if not self._rack:
            return leader, False
        with self._lock:
            node, until = self._read_replicas.get((topic, partition), (-1, 0.0))
        if time.monotonic() >= until:
            return leader, True
        if node < 0:  # its replica failed lately: the leader, without the rack
            return leader, False
        return (node, True) if node in self._meta.metadata().brokers else (leader, True)

    def prefer_read_replica(self, topic: str, partition: int, node: int) -> None:
        """The leader answered "fetch this partition from ``node``" (KIP-392). A replica this
        client's metadata does not know is looked up once; one still unknown, or that failed
        to serve the partition lately, is passed over (the leader serves, without the rack)."""
        if node not in self._meta.metadata().brokers:
            self._meta.metadata(refresh=True)  # a broker that (re)joined since the last read
            if node not in self._meta.metadata().brokers:
                self.forget_read_replica(topic, partition, node)
                return
        now = time.monotonic()
        with self._lock:
            old, until = self._read_replicas.get((topic, partition), (-1, 0.0))
            if old < 0 and now < until:
                return
            self._read_replicas[(topic, partition)] = (node, now + _READ_REPLICA_S)
        if old != node:
            log.debug(
                "%s: fetching %s-%d from replica %d (client_rack %s)",
                self.name,
                topic,
                partition,
                node,
                self._rack,
            )

    def forget_read_replica(self, topic: str, partition: int, node: int) -> None:
        """Replica ``node`` could not serve the partition (an error, a broken connection, a
        high watermark that stayed behind): fetch it from the leader, without the rack, for a
        while. Nothing if the partition is not read from ``node`` (an answer from before)."""
        with self._lock:
            old, until = self._read_replicas.get((topic, partition), (-1, 0.0))
            if old >= 0 and old != node and time.monotonic() < until:
                return
            self._read_replicas[(topic, partition)] = (
                -1,
                time.monotonic() + _READ_REPLICA_FAILED_S,
            )
        log.debug(
            "%s: replica %d could not serve %s-%d: its leader serves it",
            self.name,
            node,
            topic,
            partition,
        )
