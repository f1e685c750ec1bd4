"""Connected ``Cluster`` objects by name, shared by the tasks of one process."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Self

from partsync.config import ClusterRef
from partsync.io.cluster import Cluster

__all__ = ["ClusterPool"]


class ClusterPool:
    def __init__(self, refs: Iterable[ClusterRef] = ()) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[str, Cluster] = {}
        for r in refs:
            self.get(r)

    def get(self, ref: ClusterRef) -> Cluster:
        with self._lock:
            c = self._clusters.get(ref.name)
            if c is None:
                c = self._clusters[ref.name] = Cluster(ref)
            return c

    def watch(self, refs: Iterable[ClusterRef], topics: Iterable[str]) -> None:
        """Each cluster reads these topics' metadata from now on (``Cluster.watch``): named
        before the first read, all of a run's topics cost one request per cluster."""
        names = tuple(topics)
        for ref in refs:
            self.get(ref).watch(names)

    def close(self) -> None:
        with self._lock:
            for c in self._clusters.values():
                c.close()
            self._clusters.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
