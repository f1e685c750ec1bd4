"""One cluster's connections: the bootstrap connection, a shared connection per broker for
one-off requests, and the idle dedicated connections copies give back for the next copy.

Broker addresses come from the cluster's metadata, which is read over the bootstrap
connection: the pool is given a ``brokers`` callable rather than the metadata cache, so that
this module sits below ``io.metadata``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeGuard, TypeVar

from partsync._kafka import BrokerInfo, Connection
from partsync.config import ClusterRef
from partsync.errors import ClusterError
from partsync.io.coalesce import Coalescer

__all__ = ["Connections", "IdleConnections"]

_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")
# Idle dedicated connections kept per broker, and for how long one is reused: well within
# the broker's connections.max.idle.ms (10 minutes), after which it closes them itself.
_IDLE_MAX = 32
_IDLE_REUSE_S = 60.0


class IdleConnections:
    """Dedicated connections a finished copy gave back, by broker address, with the time they
    were given back: the next copy to that broker takes one instead of connecting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], list[tuple[float, Connection]]] = {}
        self._closed = False

    def put(self, conn: Connection) -> None:
        """Kept if it is clean (open, nothing in flight) and there is room, else closed."""
        if not conn.idle_and_open():
            conn.close()
            return
        with self._lock:
            idle = self._idle.setdefault((conn.host, conn.port), [])
            if not self._closed and len(idle) < _IDLE_MAX:
                idle.append((time.monotonic(), conn))
                return
        conn.close()

    def take(self, addr: tuple[str, int]) -> Connection | None:
        stale = []
        found = None
        with self._lock:
            idle = self._idle.get(addr, [])
            while idle and found is None:
                since, conn = idle.pop()
                if time.monotonic() - since > _IDLE_REUSE_S or not conn.idle_and_open():
                    stale.append(conn)
                else:
                    found = conn
        for conn in stale:
            conn.close()
        return found

    def close(self) -> None:
        with self._lock:
            self._closed = True  # connections given back from now on are closed, not kept
            for idle in self._idle.values():
                for _since, conn in idle:
                    conn.close()
            self._idle.clear()


class Connections:
    def __init__(
        self, ref: ClusterRef, timeout: float, brokers: Callable[[], Mapping[int, BrokerInfo]]
    ) -> None:
        """``timeout``: seconds a request may take; ``brokers``: the brokers of the cluster's
        metadata as last read."""
        self.ref = ref
        self.name = ref.name
        self.timeout = timeout
        self._brokers = brokers
        self._lock = threading.Lock()
        self._conns: dict[Hashable, Connection] = {}
        self._bootstrap: Connection | None = None
        self._bootstrap_next = 0
        self._coalescers: dict[Hashable, Coalescer[Any, Any]] = {}
        self._retired: list[Connection] = []  # replaced, still to be closed (``_retire``)
        self.idle = IdleConnections()

    def connect(
        self, host: str, port: int, timeout: float | None = None, client_id: str | None = None
    ) -> Connection:
        """A new connection with the cluster's settings; ``client_id`` overrides the cluster's."""
        return Connection(
            host,
            port,
            cluster=self.name,
            client_id=client_id or self.ref.client_id,
            security=self.ref.security,
            timeout=self.timeout if timeout is None else timeout,
            connect_timeout=self.ref.connect_timeout_ms / 1000,
            socket_buffer_bytes=self.ref.socket_buffer_bytes,
            rack=self.ref.client_rack or "",
        )

    def connect_to(
        self, broker: BrokerInfo, *, timeout: float | None = None, client_id: str | None = None
    ) -> Connection:
        """A new dedicated connection to ``broker`` (for blocking calls such as JoinGroup)."""
        return self.connect(broker.host, broker.port, timeout, client_id)

    def connect_node(self, node_id: int) -> Connection:
        """A dedicated connection to broker ``node_id``: one given back earlier (``release``),
        or a new one."""
        info = self._brokers()[node_id]
        return self.idle.take((info.host, info.port)) or self.connect(info.host, info.port)

    def release(self, conn: Connection) -> None:
        """A dedicated connection its user is done with: kept for the next one if clean."""
        self.idle.put(conn)

    def _retire(self, conn: Connection | None) -> None:
        """A shared connection replaced before its SASL session ends: closed once nothing is in
        flight on it (now, or when the next one is retired, or at ``close``)."""
        if conn is None or conn.closed:
            return
        with self._lock:
            self._retired.append(conn)
            idle = [c for c in self._retired if not c.in_flight]
            self._retired = [c for c in self._retired if c.in_flight]
        for c in idle:
            c.close()

    def _bootstrap_conn(self) -> Connection:
        if self._bootstrap is not None and not self._bootstrap.closed:
            if not self._bootstrap.expiring:
                return self._bootstrap
            self._retire(self._bootstrap)
        errors = []
        servers = self.ref.bootstrap_servers
        # Start after the server whose connection failed last: a broker that accepts
        # connections but does not answer must not be asked first every time.
        for i in range(len(servers)):
            host, port = servers[(self._bootstrap_next + i) % len(servers)]
            try:
                self._bootstrap = self.connect(host, port)
                self._bootstrap_next = (self._bootstrap_next + i) % len(servers)
                return self._bootstrap
            except ClusterError as e:
                errors.append(e.reason)
        raise ClusterError(
            f"cluster unreachable (bootstrap {self.ref.bootstrap}): {'; '.join(errors)}",
            cluster=self.name,
        )

    def bootstrap_call(self, fn: Callable[[Connection], _T]) -> _T:
        """``fn`` over the bootstrap connection (a question any broker can answer), forgotten
        if it failed (the next call reconnects)."""
        conn = self._bootstrap_conn()
        try:
            return fn(conn)
        except ClusterError:
            self._bootstrap = None
            self._bootstrap_next += 1
            raise

    def broker_conn(self, node_id: int, lane: int = 0) -> Connection:
        """The shared connection to one broker, for one-off requests; ``lane`` n > 0 is an n-th
        one (a broker works through one connection's requests one at a time, so many requests
        at once, e.g. a thousand partitions' fences, go faster over several)."""
        key = node_id if lane == 0 else (node_id, lane)

        def usable(c: Connection | None) -> TypeGuard[Connection]:
            # A dropped connection is replaced, not reused; so is one whose SASL session the
            # broker is about to end.
            return c is not None and not c.closed and not c.expiring

        with self._lock:
            conn = self._conns.get(key)
            if usable(conn):
                return conn
        # Read outside the lock: a metadata read may need it (to retire its connection).
        brokers = self._brokers()
        retired = None
        with self._lock:
            conn = self._conns.get(key)
            if not usable(conn):
                retired = conn
                info = brokers.get(node_id)
                if info is None:
                    raise ClusterError(
                        f"broker {node_id} is not in the cluster metadata", cluster=self.name
                    )
                conn = self.connect(info.host, info.port)
                self._conns[key] = conn
        self._retire(retired)
        return conn

    def any_broker(self) -> Connection:
        """The shared connection to the broker with the lowest node id (any broker answers
        InitProducerId without a transactional id, and forwards admin requests in KRaft)."""
        return self.broker_conn(min(self._brokers()))

    def each_broker(self) -> Iterator[Connection]:
        """A connection to each broker in turn, by node id: for the lists each broker keeps of
        what it coordinates (ListTransactions, ListGroups)."""
        for node in sorted(self._brokers()):
            yield self.broker_conn(node)

    def coalescer(
        self, key: Hashable, ask: Callable[[list[_K]], Mapping[_K, _V]]
    ) -> Coalescer[_K, _V]:
        """The cluster's ``Coalescer`` named ``key`` (made with ``ask`` the first time): one
        request to a broker for every thread asking the same kind of question at once."""
        with self._lock:
            c = self._coalescers.get(key)
            if c is None:
                c = self._coalescers[key] = Coalescer(ask)
            return c

    def close(self) -> None:
        self.idle.close()
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            if self._bootstrap is not None:
                self._bootstrap.close()
                self._bootstrap = None
            for conn in self._retired:
                conn.close()
            self._retired.clear()
