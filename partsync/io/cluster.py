"""A connected cluster: bootstrap, metadata, leaders, partition bounds, topic admin.

Wraps the adapter's ``Connection`` with what partsync needs from a whole cluster. One-off
requests go over a shared connection per broker (thread-safe ``call``); copy pipelines open
their own dedicated connections with ``connect_leader``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self, TypeGuard, TypeVar

from partsync._kafka import (
    COORDINATOR_RETRY_CODES,
    ELECTION_CODES,
    FENCED_CODES,
    LATEST,
    TXN_KEY,
    ActiveProducer,
    BrokerInfo,
    Connection,
    ErrorCode,
    Metadata,
    TopicMeta,
    TxnState,
    broker_error,
    raise_for_code,
)
from partsync.config import ClusterRef
from partsync.errors import (
    BrokerError,
    ClusterError,
    FencedError,
    PartsyncError,
    TopicError,
    UnreplicatedError,
    UnsafeError,
)
from partsync.io import topic_admin
from partsync.io.bounds import read_bounds, read_log_ends
from partsync.io.coalesce import Coalescer
from partsync.io.fetch_lane import FetchLane
from partsync.io.writer import SharedWriter
from partsync.plan.comparator import Bounds
from partsync.retry import Backoff

__all__ = ["Cluster", "TopicInfo"]

_KIP_664 = ("DescribeTransactions", "DescribeProducers", "ListTransactions")

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)
# Idle dedicated connections kept per broker, and for how long one is reused: well within
# the broker's connections.max.idle.ms (10 minutes), after which it closes them itself.
_IDLE_MAX = 32
_IDLE_REUSE_S = 60.0
# A shared writer or fetch lane idle this long is replaced before use, for the same reason.
_PIPELINE_IDLE_S = 300.0
# Shared writers (Produce connections) per local broker, a partition always on the same one.
# Apache Kafka reads a connection's next request only once it answered the one before, so one
# connection has one Produce request in the broker at a time, and the broker's log appends for
# it run one after another; two let it append on two threads. At 128 partitions of 1.6 MB on
# Kafka 4.1.1 the copy took ~14% less (docs/benchmarks.md, "Start-up, fencing identity and two
# writers").
WRITER_LANES = 2
# KIP-392: how long a leader's "fetch from replica N" holds before the leader is asked again
# (Kafka's consumer keeps it for metadata.max.age.ms, 5 minutes by default), and how long a
# replica that failed to serve is not taken again.
_READ_REPLICA_S = 300.0
_READ_REPLICA_FAILED_S = 60.0
# How long reading bounds waits out a leader election (a restarted single broker takes a few
# seconds to lead its partitions again).
BOUNDS_ELECTION_WAIT_S = 15.0
_V = TypeVar("_V")
_Pipeline = SharedWriter | FetchLane
_S = TypeVar("_S", SharedWriter, FetchLane)


# InitProducerId answers worth asking again: a coordinator loading, moving or not there yet,
# and an earlier holder's transaction still being completed.
_INIT_PRODUCER_RETRY_CODES = COORDINATOR_RETRY_CODES | {ErrorCode.CONCURRENT_TRANSACTIONS}
_FENCING_HINT = (
    "; fencing needs the local cluster's transaction coordinator: the __transaction_state "
    "topic must be creatable (a single-broker cluster needs "
    "transaction.state.log.replication.factor=1 and transaction.state.log.min.isr=1) and, "
    "under ACLs, WRITE and DESCRIBE on TransactionalId resources prefixed 'partsync:'; "
    "--no-fencing appends without it"
)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    leaders: dict[int, int]
    leader_epochs: dict[int, int] = field(default_factory=dict)
    # Metadata v10+; a topic deleted and created again under its name gets a new one.
    topic_id: str | None = None


class Cluster:
    def __init__(self, ref: ClusterRef, *, timeout: float | None = None) -> None:
        """``timeout``: seconds a request may take (default: the cluster's request_timeout_ms)."""
        self.ref = ref
        self.name = ref.name
        self.timeout = ref.request_timeout_ms / 1000 if timeout is None else timeout
        self._lock = threading.Lock()
        self._conns: dict[Hashable, Connection] = {}
        # Shared writers and fetch lanes, by kind and broker (and lane number).
        self._pipelines: dict[Hashable, _Pipeline] = {}
        self._making: dict[Hashable, threading.Lock] = {}  # held while one is being made
        self._bootstrap: Connection | None = None
        # Producer id -> (transactional id, transaction timeout ms), or None: unknown.
        self._txn_ids: dict[int, tuple[str, int, int] | None] = {}
        self._bootstrap_next = 0
        # The last metadata read and the topics it asked for. Metadata is read for the topics a
        # run works on only (a cluster may hold 100k partitions of other topics): those named
        # by ``watch`` or asked about by ``topic``. Reads run one at a time, numbered as they
        # start: a refresh asked for while another read was under way waits for it, and one
        # that began after the asking (so it has every topic watched by then) also serves it.
        self._metadata: tuple[Metadata, frozenset[str]] | None = None
        self._watched: set[str] = set()
        self._watched_lock = threading.Lock()
        self._metadata_lock = threading.Lock()
        self._reads_started = 0
        self._read_ok = 0  # the number of the last read that succeeded
        # TopicInfo per topic of the current metadata (rebuilt when metadata is refreshed):
        # per-partition callers ask for it often, and building it is O(partitions).
        self._topics: tuple[Metadata | None, dict[str, TopicInfo | None]] = (None, {})
        self._coalescers: dict[Hashable, Coalescer[Any, Any]] = {}
        # Transactional ids' coordinators as last found (``prefetch_txn_coordinators``, or a
        # lookup): a stale one costs a NOT_COORDINATOR answer and a fresh lookup.
        self._txn_coordinators: dict[str, BrokerInfo] = {}
        # Dedicated connections a finished copy gave back, by broker address, with the time
        # they were given back: the next copy to that broker takes one instead of connecting.
        self._idle: dict[tuple[str, int], list[tuple[float, Connection]]] = {}
        # Per partition, the replica its leader told this client (client_rack) to fetch from
        # and until when; a replica that failed is (-1, until when none is taken).
        self._read_replicas: dict[tuple[str, int], tuple[int, float]] = {}
        self._retired: list[Connection] = []  # replaced, still to be closed (``_retire``)
        self._closed = False

    # -- connections --------------------------------------------------------------------------

    def _connect(
        self, host: str, port: int, timeout: float | None = None, client_id: str | None = None
    ) -> Connection:
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
                self._bootstrap = self._connect(host, port)
                self._bootstrap_next = (self._bootstrap_next + i) % len(servers)
                return self._bootstrap
            except ClusterError as e:
                errors.append(e.reason)
        raise ClusterError(
            f"cluster unreachable (bootstrap {self.ref.bootstrap}): {'; '.join(errors)}",
            cluster=self.name,
        )

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
        brokers = self.metadata().brokers
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
                conn = self._connect(info.host, info.port)
                self._conns[key] = conn
        self._retire(retired)
        return conn

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

    def connect_to(
        self, broker: BrokerInfo, *, timeout: float | None = None, client_id: str | None = None
    ) -> Connection:
        """A new dedicated connection to ``broker`` (for blocking calls such as JoinGroup);
        ``client_id`` overrides the cluster's."""
        return self._connect(broker.host, broker.port, timeout, client_id)

    def find_coordinator(
        self, key: str, key_type: int, *, timeout: float = 30.0
    ) -> tuple[int, BrokerInfo | None]:
        """(error code, coordinator) of a group or transactional id: ``find_coordinators``
        for one key."""
        return self.find_coordinators([key], key_type, timeout=timeout)[key]

    def find_coordinators(
        self, keys: list[str], key_type: int, *, timeout: float = 30.0
    ) -> dict[str, tuple[int, BrokerInfo | None]]:
        """(error code, coordinator) of each group or transactional id. Keys whose coordinator
        is loading, not available yet or moved are asked for again, together, until
        ``timeout``; such a key's last error code comes back when it runs out (any other error
        at once). Threads asking at the same moment share one FindCoordinator (KIP-699)."""
        backoff = Backoff(0.1, 1.0, deadline=timeout)
        finder = self._coordinator_finder(key_type)
        out: dict[str, tuple[int, BrokerInfo | None]] = {}
        missing = list(dict.fromkeys(keys))
        while missing:
            out.update(finder.get_many(missing))
            missing = [k for k in missing if out[k][0] in COORDINATOR_RETRY_CODES]
            if missing and not backoff.wait():
                break
        return out

    def _coordinator_finder(self, key_type: int) -> Coalescer[str, tuple[int, BrokerInfo | None]]:
        def ask(keys: list[str]) -> dict[str, tuple[int, BrokerInfo | None]]:
            return self._bootstrap_call(lambda c: c.find_coordinators(keys, key_type))

        return self.coalescer(("FindCoordinator", key_type), ask)

    def prefetch_txn_coordinators(self, ids: list[str], *, wait: float = 10.0) -> None:
        """Look up the coordinators of many transactional ids in one request, so that each
        partition's fencing asks its coordinator straight away: a first sync of 1000 small
        partitions otherwise sent a FindCoordinator per partition. Only where the broker takes
        many keys per request (FindCoordinator v4+); a failure only means each partition looks
        its own up, as without this.

        Ids whose coordinator is loading or not available yet are asked again for up to
        ``wait`` seconds: a cluster's first transactional ids create ``__transaction_state``,
        and 1000 partitions each retrying their own lookup meanwhile sent ~900 requests."""
        with self._lock:
            missing = [i for i in dict.fromkeys(ids) if i not in self._txn_coordinators]
        if not missing:
            return
        try:
            batches = self._bootstrap_call(
                lambda c: c.supports("FindCoordinator") and c.version("FindCoordinator") >= 4
            )
            if not batches:
                return
            found = self.find_coordinators(missing, TXN_KEY, timeout=wait)
        except PartsyncError as e:
            log.debug("looking up %d transactional ids' coordinators: %s", len(missing), e)
            return
        with self._lock:
            for key, (code, coord) in found.items():
                if not code and coord is not None:
                    self._txn_coordinators[key] = coord
        if unavailable := sum(1 for code, _c in found.values() if code):
            log.debug("%d transactional ids' coordinators not found within %gs", unavailable, wait)

    def _txn_coordinator(
        self, transactional_id: str, timeout: float
    ) -> tuple[int, BrokerInfo | None, bool]:
        """(error code, coordinator, whether it came from the cache rather than a lookup)."""
        with self._lock:
            known = self._txn_coordinators.get(transactional_id)
        if known is not None:
            return 0, known, True
        code, coord = self.find_coordinator(transactional_id, TXN_KEY, timeout=timeout)
        if not code and coord is not None:
            with self._lock:
                self._txn_coordinators[transactional_id] = coord
        return code, coord, False

    def _forget_txn_coordinator(self, transactional_id: str) -> None:
        with self._lock:
            self._txn_coordinators.pop(transactional_id, None)

    def init_producer_id(
        self,
        transactional_id: str | None,
        *,
        timeout: float = 30.0,
        current: tuple[int, int] | None = None,
        lane: int = 0,
        txn_timeout_ms: int = 60_000,
    ) -> tuple[int, int]:
        """A producer id and epoch; with a transactional id, from that id's transaction
        coordinator (which bumps the epoch and so fences the id's previous holder; its
        transactions time out after ``txn_timeout_ms``).

        A coordinator that is loading or moved is asked again until ``timeout``: a cluster's
        first transactional id creates ``__transaction_state``, which takes a few seconds.
        """
        if transactional_id is None:
            return self.broker_conn(self._any_broker()).init_producer_id()
        backoff = Backoff(0.2, 1.0, deadline=timeout)
        while True:
            code, coord, cached = self._txn_coordinator(transactional_id, backoff.remaining or 0.0)
            if not code and coord is not None:
                # The coordinator found may have moved by the time it is asked: ask again.
                try:
                    code, pid, epoch = self.broker_conn(coord.node_id, lane).try_init_producer_id(
                        transactional_id, timeout_ms=txn_timeout_ms, current=current
                    )
                except PartsyncError:
                    self._forget_txn_coordinator(transactional_id)
                    # A remembered coordinator that cannot be reached (restarted, moved) is
                    # looked up afresh. Only for a first fence: a renewal the broker may have
                    # made before the connection broke would be refused as fenced if repeated.
                    if cached and current is None and backoff.wait():
                        continue
                    raise
                if not code:
                    return pid, epoch
                self._forget_txn_coordinator(transactional_id)
                if code in FENCED_CODES and current is not None:
                    raise FencedError(
                        f"renewing producer id {current[0]} epoch {current[1]} under "
                        f"transactional id {transactional_id!r} was refused: another writer "
                        "initialised it since",
                        cluster=self.name,
                    )
            if code not in _INIT_PRODUCER_RETRY_CODES or not backoff.wait():
                err = broker_error(
                    code,
                    f"InitProducerId for transactional id {transactional_id!r}",
                    cluster=self.name,
                )
                err.reason += _FENCING_HINT
                raise err

    def txn_call(
        self,
        transactional_id: str,
        ask: Callable[[Connection], int],
        *,
        what: str,
        timeout: float = 30.0,
    ) -> None:
        """Ask the coordinator of ``transactional_id`` (``ask`` sends the request and returns
        its error code) until it answers 0. A coordinator that is loading or moved, and
        CONCURRENT_TRANSACTIONS (the id's previous transaction is still being ended: its
        markers are being written), are asked again until ``timeout``; any other error raises.
        A broken connection raises at once: the request may have been carried out."""
        backoff = Backoff(0.02, 0.5, deadline=timeout)
        while True:
            code, coord, _cached = self._txn_coordinator(transactional_id, backoff.remaining or 0.0)
            if not code and coord is not None:
                try:
                    code = ask(self.broker_conn(coord.node_id))
                except PartsyncError:
                    self._forget_txn_coordinator(transactional_id)
                    raise
                if not code:
                    return
                if code in COORDINATOR_RETRY_CODES:
                    self._forget_txn_coordinator(transactional_id)
            if code not in _INIT_PRODUCER_RETRY_CODES or not backoff.wait():
                raise broker_error(
                    code, f"{what} for transactional id {transactional_id!r}", cluster=self.name
                )

    def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer] | None:
        """The partition's active producers (its leader's producer state), or None where the
        leader does not offer DescribeProducers (Kafka < 3.0, some other brokers)."""
        self.metadata(refresh=True)  # any replica answers: ask the partition's leader of now
        conn = self.broker_conn(self.leader(topic, partition))
        if not conn.supports("DescribeProducers"):
            return None
        code, producers = conn.describe_producers(topic, partition)
        raise_for_code(code, f"DescribeProducers for {topic}-{partition}", cluster=self.name)
        return producers

    def describe_transactions(
        self, transactional_ids: list[str], *, timeout: float = 30.0
    ) -> dict[str, TxnState] | None:
        """Each transactional id's state, from its coordinator (one request per coordinator),
        or None where a coordinator does not offer DescribeTransactions. An id its coordinator
        does not know (TRANSACTIONAL_ID_NOT_FOUND) is returned as it is; a coordinator that is
        loading or moved is asked again until ``timeout``; any other error raises."""
        if not self._bootstrap_call(lambda c: c.supports("DescribeTransactions")):
            return None  # before any coordinator is looked up for it
        self.prefetch_txn_coordinators(transactional_ids)  # one request, where it can be
        backoff = Backoff(0.05, 1.0, deadline=timeout)
        out: dict[str, TxnState] = {}
        todo = list(transactional_ids)
        while True:
            by_node: dict[int, list[str]] = {}
            retry: list[str] = []
            for tid in todo:
                code, coord, _cached = self._txn_coordinator(tid, backoff.remaining or 0.0)
                if code or coord is None:
                    retry.append(tid)
                else:
                    by_node.setdefault(coord.node_id, []).append(tid)
            for node, tids in by_node.items():
                try:
                    conn = self.broker_conn(node)
                    if not conn.supports("DescribeTransactions"):
                        return None
                    states = conn.describe_transactions(tids)
                except PartsyncError as e:  # a coordinator that went away: look them up again
                    log.debug("DescribeTransactions on broker %d: %s", node, e)
                    for tid in tids:
                        self._forget_txn_coordinator(tid)
                    retry.extend(tids)
                    continue
                for tid, st in states.items():
                    if st.error_code in COORDINATOR_RETRY_CODES:
                        self._forget_txn_coordinator(tid)
                        retry.append(tid)
                    elif st.error_code not in (0, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
                        raise broker_error(
                            st.error_code,
                            f"DescribeTransactions for transactional id {tid!r}",
                            cluster=self.name,
                        )
                    else:
                        out[tid] = st
            if not retry:
                return out
            if not backoff.wait():
                raise ClusterError(
                    f"the coordinators of transactional ids {retry} did not "
                    f"answer DescribeTransactions within {timeout:g}s",
                    cluster=self.name,
                )
            todo = retry

    def init_producer_ids(
        self, transactional_ids: list[str], *, lanes: int = 1
    ) -> dict[str, tuple[int, int] | PartsyncError]:
        """``init_producer_id`` for many transactional ids at once, each answer its own: a
        producer id and epoch, or the error that id met. Each coordinator is sent all of its
        ids before the first answer is read, spread over ``lanes`` connections (a broker works
        through one connection's requests one at a time): 1000 fences took 0.12-0.16 s this
        way, 0.2-0.35 s from 16 threads each waiting for its answer.

        Asked once, never retried: an id whose coordinator is not known yet (see
        ``prefetch_txn_coordinators``), is loading or moved, or whose connection failed gets
        its error, for the caller to fence it the usual way (``init_producer_id``)."""
        out: dict[str, tuple[int, int] | PartsyncError] = {}
        by_node: dict[int, list[str]] = {}
        with self._lock:
            for tid in transactional_ids:
                coord = self._txn_coordinators.get(tid)
                if coord is None:
                    out[tid] = ClusterError(
                        f"the coordinator of transactional id {tid!r} is not known yet",
                        cluster=self.name,
                    )
                else:
                    by_node.setdefault(coord.node_id, []).append(tid)
        jobs = [
            (node, lane, tids[lane::lanes])
            for node, tids in by_node.items()
            for lane in range(lanes)
            if tids[lane::lanes]
        ]

        def ask(job: tuple[int, int, list[str]]) -> list[tuple[int, int, int] | PartsyncError]:
            node, lane, tids = job
            try:
                return list(self.broker_conn(node, lane).try_init_producer_ids(tids))
            except PartsyncError as e:
                return [e] * len(tids)

        with ThreadPoolExecutor(max(1, len(jobs)), thread_name_prefix="fences") as ex:
            for (_node, _lane, tids), answers in zip(jobs, ex.map(ask, jobs), strict=True):
                for tid, answer in zip(tids, answers, strict=True):
                    if isinstance(answer, PartsyncError):
                        self._forget_txn_coordinator(tid)  # looked up afresh next time
                        out[tid] = answer
                    elif answer[0]:
                        if answer[0] in COORDINATOR_RETRY_CODES:
                            self._forget_txn_coordinator(tid)
                        out[tid] = broker_error(
                            answer[0],
                            f"InitProducerId for transactional id {tid!r}",
                            cluster=self.name,
                        )
                    else:
                        out[tid] = (answer[1], answer[2])
        return out

    def _any_broker(self) -> int:
        return min(self.metadata().brokers)

    def connect_leader(self, topic: str, partition: int) -> Connection:
        """A dedicated connection to a partition's leader (for a copy pipeline): one given back
        by an earlier copy (``release``), or a new one."""
        leader = self.leader(topic, partition)
        info = self.metadata().brokers[leader]
        return self._take_idle((info.host, info.port)) or self._connect(info.host, info.port)

    def release(self, conn: Connection) -> None:
        """A dedicated connection its copy is done with: kept for the next copy to the same
        broker if it is clean (open, nothing in flight), else closed."""
        if not conn.idle_and_open():
            conn.close()
            return
        with self._lock:
            idle = self._idle.setdefault((conn.host, conn.port), [])
            if not self._closed and len(idle) < _IDLE_MAX:
                idle.append((time.monotonic(), conn))
                return
        conn.close()

    def _take_idle(self, addr: tuple[str, int]) -> Connection | None:
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

    def shared_writer(
        self, topic: str, partition: int, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        """One of the ``WRITER_LANES`` writers shared by every partition copy of this process
        whose leader is the same broker (many partitions per Produce request), always the same
        one for a partition; a broken one is replaced."""
        leader = self.leader(topic, partition)
        lane = partition % WRITER_LANES
        return self._shared(
            ("writer", leader, lane), leader, lambda c: SharedWriter(c, timeout_ms=timeout_ms)
        )

    def txn_writer(
        self, topic: str, partition: int, transactional_id: str, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        """A writer of its own (a connection to the partition's leader) for the batches of one
        transaction: a Produce request names one transactional id. The caller closes it."""
        return SharedWriter(
            self.connect_leader(topic, partition),
            timeout_ms=timeout_ms,
            transactional_id=transactional_id,
        )

    def fetch_lane(
        self, topic: str, partition: int, lane: int = 0, *, in_flight: int = 4
    ) -> FetchLane:
        """Fetch lane ``lane`` to the broker the partition is read from (``read_broker``),
        shared by every partition copy of this process that fetches from that broker (many
        partitions per Fetch request); a broken one is replaced. A lane to the leader of a
        partition whose rack replica failed lately (or cannot be connected to now) sends no
        rack, so the leader serves it instead of pointing at that replica again."""
        broker, rack = self._read_route(topic, partition)
        try:
            return self._fetch_lane_to(broker, rack, lane, in_flight)
        except PartsyncError:
            if broker == self.leader(topic, partition):
                raise
            # A rack replica that cannot be connected to: its leader serves, without the rack.
            self.forget_read_replica(topic, partition, broker)
            broker, rack = self._read_route(topic, partition)
            return self._fetch_lane_to(broker, rack, lane, in_flight)

    def _fetch_lane_to(self, broker: int, rack: bool, lane: int, in_flight: int) -> FetchLane:
        key = ("fetch", broker, lane) if rack else ("fetch-norack", broker, lane)

        def make(conn: Connection) -> FetchLane:
            fl = FetchLane(conn, max_in_flight=in_flight, rack=rack)
            fl.broker = broker
            return fl

        return self._shared(key, broker, make)

    def read_broker(self, topic: str, partition: int) -> int:
        """Where the partition's records are fetched from: the replica its leader prefers for
        this client's rack (KIP-392, ``client_rack``) while that holds, else the leader."""
        return self._read_route(topic, partition)[0]

    def _read_route(self, topic: str, partition: int) -> tuple[int, bool]:
        """(broker, whether fetches to it carry the client's rack)."""
        leader = self.leader(topic, partition)
        rack = bool(self.ref.client_rack)
        if not rack:
            return leader, False
        with self._lock:
            node, until = self._read_replicas.get((topic, partition), (-1, 0.0))
        if time.monotonic() >= until:
            return leader, True
        if node < 0:  # its replica failed lately: the leader, without the rack
            return leader, False
        return (node, True) if node in self.metadata().brokers else (leader, True)

    def prefer_read_replica(self, topic: str, partition: int, node: int) -> None:
        """The leader answered "fetch this partition from ``node``" (KIP-392). A replica this
        client's metadata does not know is looked up once; one still unknown, or that failed
        to serve the partition lately, is passed over (the leader serves, without the rack)."""
        if node not in self.metadata().brokers:
            self.metadata(refresh=True)  # a broker that (re)joined since the metadata was read
            if node not in self.metadata().brokers:
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
                self.ref.client_rack,
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
            info = self.metadata().brokers[leader]
            fresh = make(self._connect(info.host, info.port))
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
            self._closed = True  # connections given back from now on are closed, not kept
            pipelines = list(self._pipelines.values())
            self._pipelines.clear()
        for w in pipelines:
            w.close()
        with self._lock:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            for idle in self._idle.values():
                for _since, conn in idle:
                    conn.close()
            self._idle.clear()
            if self._bootstrap is not None:
                self._bootstrap.close()
                self._bootstrap = None
            for conn in self._retired:
                conn.close()
            self._retired.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata -----------------------------------------------------------------------------

    def _bootstrap_call(self, fn: Callable[[Connection], _T]) -> _T:
        """``fn`` over the bootstrap connection, forgotten if it failed (the next call reconnects)."""
        conn = self._bootstrap_conn()
        try:
            return fn(conn)
        except ClusterError:
            self._bootstrap = None
            self._bootstrap_next += 1
            raise

    def ask(self, fn: Callable[[Connection], _T]) -> _T:
        """``fn`` over the bootstrap connection: a one-off question any broker can answer
        (``partsync check``'s probes)."""
        return self._bootstrap_call(fn)

    def metadata(self, refresh: bool = False) -> Metadata:
        """The brokers and the watched topics' partitions (``topic``, ``watch``), as last read;
        ``refresh`` reads them again."""
        return self._read_metadata(refresh)[0]

    def _read_metadata(self, refresh: bool) -> tuple[Metadata, frozenset[str]]:
        last = self._metadata
        if last is not None and not refresh:
            return last
        asked = self._reads_started
        with self._metadata_lock:
            last = self._metadata
            if last is not None and (not refresh or self._read_ok > asked):
                return last  # read meanwhile, by a read that began after the asking
            self._reads_started += 1
            number = self._reads_started
            with self._watched_lock:
                topics = sorted(self._watched)
            md = self._bootstrap_call(lambda c: c.metadata(topics))
            last = self._metadata = (md, frozenset(topics))
            self._read_ok = number
            return last

    def watch(self, topics: Iterable[str]) -> None:
        """Read these topics' metadata from now on: naming all of a run's topics before the
        first read makes it one request, rather than one more as ``topic`` meets each."""
        with self._watched_lock:
            self._watched.update(topics)

    def list_topics(self) -> list[str]:
        """Every topic of the cluster that can be described (the one metadata read of all
        topics: for ``--topic-pattern``)."""
        md = self._bootstrap_call(lambda c: c.metadata(None))
        return [t for t, m in md.topics.items() if m.error_code == 0]

    def topic(self, name: str, refresh: bool = False) -> TopicInfo | None:
        """Partition count and leaders, or None when the topic does not exist. A partition
        without a leader (an election under way, e.g. its only replica's broker restarting)
        is waited for with fresh metadata for up to ``BOUNDS_ELECTION_WAIT_S``, as Kafka's
        clients wait for a leader."""
        backoff: Backoff | None = None
        while True:
            try:
                return self._topic_now(name, refresh)
            except BrokerError as e:
                if e.error_code not in ELECTION_CODES:
                    raise
                backoff = backoff or Backoff(0.1, 1.0, deadline=BOUNDS_ELECTION_WAIT_S)
                if not backoff.wait():
                    raise
                refresh = True

    def _topic_now(self, name: str, refresh: bool) -> TopicInfo | None:
        if name not in self._watched:
            self.watch((name,))
        md, asked = self._read_metadata(refresh)
        if name not in asked:  # read before it was watched: read again, now with it
            md, asked = self._read_metadata(True)
        cached_md, infos = self._topics
        if cached_md is not md:
            infos = {}
            self._topics = (md, infos)
        if name not in infos:
            infos[name] = self._topic_info(md, name)
        return infos[name]

    def _topic_info(self, md: Metadata, name: str) -> TopicInfo | None:
        t: TopicMeta | None = md.topics.get(name)
        if t is None or t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None  # (a broker may leave an unknown topic out of its answer)
        if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise broker_error(
                t.error_code, "not authorized to describe the topic", cluster=self.name, topic=name
            )
        if t.error_code:
            raise broker_error(
                t.error_code, "metadata for the topic failed", cluster=self.name, topic=name
            )
        leaders = {}
        epochs = {p: pm.leader_epoch for p, pm in t.partitions.items()}
        for p, pm in sorted(t.partitions.items()):
            if pm.leader < 0:
                raise broker_error(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition has no leader",
                    cluster=self.name,
                    topic=name,
                    partition=p,
                )
            leaders[p] = pm.leader
        return TopicInfo(name, len(t.partitions), leaders, epochs, t.topic_id)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topic(topic)
        if info is None or partition not in info.leaders:
            raise TopicError(
                "topic or partition does not exist",
                cluster=self.name,
                topic=topic,
                partition=partition,
            )
        return info.leaders[partition]

    # -- bounds and topic admin (io/bounds.py, io/topic_admin.py) ------------------------------

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, Bounds]:
        """Log start and high watermark of each partition (``io.bounds.read_bounds``).

        A leader election under way (``ELECTION_CODES``: e.g. a broker that restarted and
        does not lead its partitions yet) is waited out with fresh metadata for up to
        ``BOUNDS_ELECTION_WAIT_S``, as Kafka's clients do, so a run that starts during one
        does not take the cluster for unreachable."""
        backoff = Backoff(0.1, 1.0, deadline=BOUNDS_ELECTION_WAIT_S)
        while True:
            try:
                return read_bounds(self, topic, partitions)
            except BrokerError as e:
                if e.error_code not in ELECTION_CODES or not backoff.wait():
                    raise
                self.metadata(refresh=True)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's last stable offset (ListOffsets LATEST at read_committed, from its
        leader): every transaction that begins below it has its marker in the log."""
        for attempt in range(2):
            conn = self.broker_conn(self.leader(topic, partition))
            code, offset = conn.list_offsets(topic, [partition], LATEST, isolation_level=1)[
                partition
            ]
            if code in ELECTION_CODES and attempt == 0:
                self.metadata(refresh=True)
                continue
            raise_for_code(
                code, f"the last stable offset of {topic}-{partition}", cluster=self.name
            )
            return offset
        raise AssertionError("unreachable")

    def transaction_timeout(self, producer_id: int) -> int | None:
        """The transaction timeout (ms) of the transactional producer ``producer_id``, as its
        coordinator tells (ListTransactions on every broker for its transactional id, then
        DescribeTransactions; asked once per producer id); None where this cluster cannot tell
        (no KIP-664, no rights, not found)."""
        if producer_id not in self._txn_ids:
            self._txn_ids[producer_id] = self._describe_txn_of(producer_id, None)
        found = self._txn_ids[producer_id]
        return None if found is None else found[1]

    def transaction_deadline(self, producer_id: int) -> int | None:
        """When the coordinator aborts the transaction ``producer_id`` has open now (its start
        plus its timeout, Unix ms), or None if unknown."""
        known = self._txn_ids.get(producer_id)
        if known is None:
            return None
        st = self._describe_txn_of(producer_id, known[0], state=True)
        return None if st is None or st[2] < 0 else st[2] + st[1]

    def _describe_txn_of(
        self, producer_id: int, tid: str | None, *, state: bool = False
    ) -> tuple[str, int, int] | None:
        """(transactional id, timeout ms, start ms) of ``producer_id``'s transaction."""
        try:
            if not self.can_resume_transactions():
                return None
            tid = tid or self._transactional_id_of(producer_id)
            if tid is None:
                return None
            st = (self.describe_transactions([tid]) or {}).get(tid)
        except PartsyncError as e:
            log.debug("cluster %s: the transaction of producer %d: %s", self.name, producer_id, e)
            return None
        if st is None or st.error_code or st.producer_id != producer_id or st.timeout_ms < 0:
            return None
        return tid, st.timeout_ms, st.start_ms

    def _each_broker(self) -> Iterator[Connection]:
        """A connection to each broker in turn, by node id: for the lists each broker keeps of
        what it coordinates (ListTransactions, ListGroups)."""
        for node in sorted(self.metadata().brokers):
            yield self.broker_conn(node)

    def _transactional_id_of(self, producer_id: int) -> str | None:
        for conn in self._each_broker():
            code, found = conn.list_transactions([producer_id])
            if code == 0 and producer_id in found:
                return found[producer_id]
        return None

    def has_group(self, group: str) -> bool | None:
        """Whether any broker lists ``group`` (ListGroups on each: a group is listed by its
        coordinator while it has members or committed offsets); None where a broker does not
        offer ListGroups or does not answer it."""
        for conn in self._each_broker():
            if not conn.supports("ListGroups"):
                return None
            code, groups = conn.list_groups()
            if code:
                return None
            if group in groups:
                return True
        return False

    def transactional_ids_in(self, states: list[str]) -> set[str]:
        """The transactional ids whose transaction is in one of ``states`` (e.g.
        ``CompleteAbort``), as every broker's ListTransactions lists those it coordinates and
        this client may describe; empty where the cluster cannot resume transactions (no
        KIP-664). Raises ``ClusterError`` where a broker does not answer."""
        if not self.can_resume_transactions():
            return set()
        out: set[str] = set()
        for conn in self._each_broker():
            code, found = conn.list_transactions([], states)
            raise_for_code(code, f"listing transactions ({', '.join(states)})", cluster=self.name)
            out.update(found.values())
        return out

    def can_resume_transactions(self) -> bool:
        """Whether a run can find and resume a transaction an earlier run left open in a
        partition: the cluster offers all of KIP-664 (DescribeTransactions, DescribeProducers
        and ListTransactions: Kafka 3.0+). A broker that offers only part of it may not keep
        the producer state resuming needs (noida-db answers DescribeProducers with no
        producers, even with a transaction open)."""
        return self._bootstrap_call(lambda c: all(c.supports(api) for api in _KIP_664))

    def bounds_and_log_ends(
        self, topic: str, partitions: list[int]
    ) -> dict[int, tuple[Bounds, int]]:
        """Each partition's bounds (log start, high watermark) and its log end offset, at
        least the high watermark: two requests per leader, for all the partitions at once."""
        bounds = self.bounds(topic, partitions)
        ends = read_log_ends(self, topic, partitions)
        return {p: (bounds[p], max(bounds[p].end, ends[p])) for p in partitions}

    def bounds_for_append(self, topic: str, partition: int, *, wait: float) -> Bounds:
        """The partition's log start and log END, where the next append lands, once its high
        watermark has reached the log end.

        An append that is in the leader's log but not yet replicated (HW < LEO) would put the
        next append at the log end, not at the high watermark a consumer sees, and can still be
        truncated by a leader change: wait up to ``wait`` seconds for it to be replicated, then
        give up with a retriable ``UnreplicatedError``."""
        backoff = Backoff(0.2, 2.0, deadline=wait)
        while True:
            b, leo = self.bounds_and_log_ends(topic, [partition])[partition]
            if leo == b.end:
                return b
            if not backoff.wait():
                raise UnreplicatedError(
                    f"the high watermark {b.end} is below the log end {leo}: an append is in "
                    f"the leader's log but not on every in-sync replica after {wait:g}s (an "
                    "acks=all append that timed out, a killed run, or replicas out of sync); "
                    "not appending until it is",
                    cluster=self.name,
                    topic=topic,
                    partition=partition,
                    offset=b.end,
                )
            self.metadata(refresh=True)  # the leader may have moved meanwhile

    def check_delete_records(self, topic: str, partition: int, at: int, before: int) -> None:
        """Refuse (unsafe) unless the partition's leader can DeleteRecords: it must offer the
        API and carry out a no-op one (up to ``at``, the log end), since some brokers advertise
        it and drop the connection instead (Tansu). Tried twice, so a connection lost by chance
        is not taken for a missing capability."""
        missing = UnsafeError(
            f"the broker does not support DeleteRecords, which starting a mirror at offset "
            f"{before} needs (moving the log start past the filler records); nothing written",
            cluster=self.name,
            topic=topic,
            partition=partition,
            offset=before,
        )
        for attempt in (1, 2):
            conn = self.broker_conn(self.leader(topic, partition))
            if not conn.supports("DeleteRecords"):
                raise missing
            try:
                code, _low = conn.delete_records(topic, partition, at)
            except ClusterError:
                if attempt == 2:
                    raise missing from None
                continue
            if code in (ErrorCode.UNSUPPORTED_VERSION, ErrorCode.INVALID_REQUEST):
                raise missing
            if code:
                raise broker_error(
                    code,
                    f"DeleteRecords before offset {at}",
                    cluster=self.name,
                    topic=topic,
                    partition=partition,
                    offset=at,
                )
            return

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        """Move the partition's log start to ``before`` (DeleteRecords on its leader)."""
        conn = self.broker_conn(self.leader(topic, partition))
        code, low = conn.delete_records(topic, partition, before)
        if code:
            raise broker_error(
                code,
                f"DeleteRecords before offset {before}",
                cluster=self.name,
                topic=topic,
                partition=partition,
                offset=before,
            )
        if low < before:
            raise ClusterError(
                f"DeleteRecords left the log start at {low}, not {before}",
                cluster=self.name,
                topic=topic,
                partition=partition,
                offset=before,
            )

    def topic_configs(self, topic: str) -> tuple[dict[str, str], list[str]]:
        """The identity-relevant topic configs and warnings (``io.topic_admin``)."""
        return topic_admin.topic_configs(self, topic)

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str], replication: int = -1
    ) -> None:
        """Create a topic and wait until it has leaders (``io.topic_admin``)."""
        topic_admin.create_topic(self, topic, partitions, configs, replication)

    def grow_topic(self, topic: str, partitions: int) -> None:
        """Add partitions up to ``partitions`` and wait until they have leaders
        (``io.topic_admin``)."""
        topic_admin.grow_topic(self, topic, partitions)
