"""A connected cluster: the parts partsync needs from a whole cluster, composed.

Each job lives in its own module, and ``Cluster`` keeps the methods most callers use as
one-line delegations; less common requests are reached through its parts:

- ``conns`` (``io.connections``): bootstrap, a shared connection per broker for one-off
  requests (thread-safe ``call``), dedicated connections for copy pipelines and their reuse;
- ``meta`` (``io.metadata``): metadata of the watched topics, topic infos, leaders;
- ``routes`` (``io.routes``): which replica a source partition is fetched from (KIP-392);
- ``pipelines`` (``io.shared_pipelines``): shared writers and fetch lanes per broker;
- ``coordinators`` (``io.coordinators``): FindCoordinator, remembered transaction coordinators,
  and the one retry loop of requests to them; ``fencing`` (``io.fencing``): InitProducerId and
  the transaction writer's requests; ``transactions`` (``io.transactions``): KIP-664 lookups;
- ``bounds_reader`` (``io.bounds``) and ``admin`` (``io.topic_admin``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Self, TypeVar

from partsync._kafka import ActiveProducer, BrokerInfo, Connection, Metadata, TxnState
from partsync.config import ClusterRef
from partsync.errors import PartsyncError
from partsync.io.bounds import BoundsReader
from partsync.io.connections import Connections
from partsync.io.coordinators import Coordinators
from partsync.io.fencing import Fencing
from partsync.io.fetch_lane import FetchLane
from partsync.io.metadata import MetadataCache, TopicInfo
from partsync.io.routes import ReadRoutes
from partsync.io.shared_pipelines import SharedPipelines
from partsync.io.topic_admin import TopicAdmin, all_topics_configs
from partsync.io.transactions import Transactions
from partsync.io.writer import SharedWriter
from partsync.plan.comparator import Bounds

__all__ = ["Cluster", "TopicInfo"]

_T = TypeVar("_T")


class Cluster:
    def __init__(self, ref: ClusterRef, *, timeout: float | None = None) -> None:
        """``timeout``: seconds a request may take (default: the cluster's request_timeout_ms)."""
        self.ref = ref
        self.name = ref.name
        self.timeout = ref.request_timeout_ms / 1000 if timeout is None else timeout
        # Brokers' addresses come from the metadata, which is read over the bootstrap
        # connection: the pool asks the cache (made next) when it connects to a broker.
        self.conns = Connections(ref, self.timeout, lambda: self.meta.metadata().brokers)
        self.meta = MetadataCache(self.conns)
        self.routes = ReadRoutes(self.meta, ref.client_rack)
        self.pipelines = SharedPipelines(self.conns, self.meta, self.routes)
        self.coordinators = Coordinators(self.conns)
        self.fencing = Fencing(self.conns, self.coordinators)
        self.transactions = Transactions(self.conns, self.meta, self.coordinators)
        self.bounds_reader = BoundsReader(self.conns, self.meta)
        self.admin = TopicAdmin(self.conns, self.meta, self.bounds_reader)

    def close(self) -> None:
        self.pipelines.close()
        self.conns.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections (io.connections) ---------------------------------------------------------

    def ask(self, fn: Callable[[Connection], _T]) -> _T:
        """``fn`` over the bootstrap connection: a one-off question any broker can answer
        (``partsync check``'s probes)."""
        return self.conns.bootstrap_call(fn)

    def broker_conn(self, node_id: int, lane: int = 0) -> Connection:
        return self.conns.broker_conn(node_id, lane)

    def connect_to(
        self, broker: BrokerInfo, *, timeout: float | None = None, client_id: str | None = None
    ) -> Connection:
        return self.conns.connect_to(broker, timeout=timeout, client_id=client_id)

    def connect_leader(self, topic: str, partition: int) -> Connection:
        """A dedicated connection to a partition's leader (for a copy pipeline): one given back
        by an earlier copy (``release``), or a new one."""
        return self.conns.connect_node(self.meta.leader(topic, partition))

    def release(self, conn: Connection) -> None:
        self.conns.release(conn)

    # -- metadata (io.metadata) ---------------------------------------------------------------

    def metadata(self, refresh: bool = False) -> Metadata:
        return self.meta.metadata(refresh)

    def watch(self, topics: Iterable[str]) -> None:
        self.meta.watch(topics)

    def list_topics(self) -> list[str]:
        return self.meta.list_topics()

    def topic(self, name: str, refresh: bool = False) -> TopicInfo | None:
        return self.meta.topic(name, refresh)

    def leader(self, topic: str, partition: int) -> int:
        return self.meta.leader(topic, partition)

    # -- read routes and shared pipelines (io.routes, io.shared_pipelines) --------------------

    def prefer_read_replica(self, topic: str, partition: int, node: int) -> None:
        self.routes.prefer_read_replica(topic, partition, node)

    def forget_read_replica(self, topic: str, partition: int, node: int) -> None:
        self.routes.forget_read_replica(topic, partition, node)

    def shared_writer(
        self, topic: str, partition: int, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        return self.pipelines.shared_writer(topic, partition, timeout_ms=timeout_ms)

    def txn_writer(
        self, topic: str, partition: int, transactional_id: str, *, timeout_ms: int = 30_000
    ) -> SharedWriter:
        return self.pipelines.txn_writer(topic, partition, transactional_id, timeout_ms=timeout_ms)

    def fetch_lane(
        self, topic: str, partition: int, lane: int = 0, *, in_flight: int = 4
    ) -> FetchLane:
        return self.pipelines.fetch_lane(topic, partition, lane, in_flight=in_flight)

    # -- coordinators, fencing, transactions (io.coordinators, io.fencing, io.transactions) ---

    def find_coordinator(
        self, key: str, key_type: int, *, timeout: float = 30.0
    ) -> tuple[int, BrokerInfo | None]:
        return self.coordinators.find_coordinator(key, key_type, timeout=timeout)

    def prefetch_txn_coordinators(self, ids: list[str], *, wait: float = 10.0) -> None:
        self.coordinators.prefetch_txn_coordinators(ids, wait=wait)

    def init_producer_id(
        self,
        transactional_id: str | None,
        *,
        timeout: float = 30.0,
        current: tuple[int, int] | None = None,
        lane: int = 0,
        txn_timeout_ms: int = 60_000,
    ) -> tuple[int, int]:
        return self.fencing.init_producer_id(
            transactional_id,
            timeout=timeout,
            current=current,
            lane=lane,
            txn_timeout_ms=txn_timeout_ms,
        )

    def init_producer_ids(
        self, transactional_ids: list[str], *, lanes: int = 1
    ) -> dict[str, tuple[int, int] | PartsyncError]:
        return self.fencing.init_producer_ids(transactional_ids, lanes=lanes)

    def txn_call(
        self,
        transactional_id: str,
        ask: Callable[[Connection], int],
        *,
        what: str,
        timeout: float = 30.0,
    ) -> None:
        self.fencing.txn_call(transactional_id, ask, what=what, timeout=timeout)

    def can_resume_transactions(self) -> bool:
        return self.transactions.can_resume_transactions()

    def describe_transactions(
        self, transactional_ids: list[str], *, timeout: float = 30.0
    ) -> dict[str, TxnState] | None:
        return self.transactions.describe_transactions(transactional_ids, timeout=timeout)

    def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer] | None:
        return self.transactions.describe_producers(topic, partition)

    def transaction_timeout(self, producer_id: int) -> int | None:
        return self.transactions.transaction_timeout(producer_id)

    def transaction_deadline(self, producer_id: int) -> int | None:
        return self.transactions.transaction_deadline(producer_id)

    # -- bounds and topic admin (io.bounds, io.topic_admin) -----------------------------------

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, Bounds]:
        return self.bounds_reader.bounds(topic, partitions)

    def log_ends(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return self.bounds_reader.log_ends(topic, partitions)

    def bounds_and_log_ends(
        self, topic: str, partitions: list[int]
    ) -> dict[int, tuple[Bounds, int]]:
        return self.bounds_reader.bounds_and_log_ends(topic, partitions)

    def bounds_for_append(self, topic: str, partition: int, *, wait: float) -> Bounds:
        return self.bounds_reader.bounds_for_append(topic, partition, wait=wait)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        return self.bounds_reader.last_stable_offset(topic, partition)

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str], replication: int = -1
    ) -> None:
        self.admin.create_topic(topic, partitions, configs, replication)

    def topic_configs(self, topic: str) -> tuple[dict[str, str], list[str]]:
        return self.admin.topic_configs(topic)

    def all_topic_configs(self, topic: str) -> dict[str, str | None]:
        return self.admin.all_topic_configs(topic)

    def all_topics_configs(
        self, topics: Sequence[str]
    ) -> dict[str, dict[str, str | None] | PartsyncError]:
        return all_topics_configs(self.conns, self.name, topics)

    def set_topic_configs(self, topic: str, configs: dict[str, str]) -> None:
        self.admin.set_topic_configs(topic, configs)

    def grow_topic(self, topic: str, partitions: int) -> None:
        self.admin.grow_topic(topic, partitions)

    def check_delete_records(self, topic: str, partition: int, at: int, before: int) -> None:
        self.admin.check_delete_records(topic, partition, at, before)

    def delete_records(self, topic: str, partition: int, before: int) -> None:
        self.admin.delete_records(topic, partition, before)
