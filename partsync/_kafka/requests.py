"""Typed requests over a ``BrokerConnection``: metadata, offsets, fetch, produce, producer ids,
topic admin. Everything returned is plain Python (dataclasses, dicts, bytes), never a
kafka-python object, so the rest of partsync does not depend on its internals."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataRequest
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from partsync._kafka.admin_requests import AdminRequests
from partsync._kafka.codes import raise_for_code
from partsync._kafka.connection import CONSUMER_REPLICA, BrokerConnection
from partsync._kafka.group_requests import BrokerInfo, CommittedOffset, GroupRequests, JoinResult
from partsync._kafka.probe_requests import ProbeRequests
from partsync._kafka.raw import Buffer, Parts, decode_fetch_response, produce_request_parts
from partsync.errors import ClusterError

__all__ = [
    "BrokerInfo",
    "CommittedOffset",
    "Connection",
    "FetchedPartition",
    "JoinResult",
    "Metadata",
    "PartitionMeta",
    "ProducedPartition",
    "TopicMeta",
]


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int
    error_code: int
    # The leader's epoch (-1 when the broker does not say): sent with requests that must reach
    # the current leader, so a stale one answers FENCED_LEADER_EPOCH instead of old data.
    leader_epoch: int = -1


@dataclass(frozen=True)
class TopicMeta:
    name: str
    error_code: int
    partitions: dict[int, PartitionMeta]
    # Metadata v10+: the id a topic keeps for its life (a topic deleted and created again under
    # the same name gets a new one). None where the broker does not say.
    topic_id: str | None = None


@dataclass(frozen=True)
class Metadata:
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicMeta]


_NO_TOPIC_ID = uuid.UUID(int=0)


def _topic_id(t: Any) -> str | None:
    raw = getattr(t, "topic_id", None)
    if raw is None:
        return None
    tid = raw if isinstance(raw, uuid.UUID) else uuid.UUID(bytes=bytes(raw))
    return None if tid == _NO_TOPIC_ID else str(tid)


# The longest a fetch waits out a broker's throttling before returning what it has (nothing).
THROTTLE_WAIT_LIMIT_S = 60.0


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview
    # KIP-392: the replica the leader asks this client to fetch the partition from instead
    # (given a client rack; the answer then holds no records), or -1.
    preferred_read_replica: int = -1


@dataclass(frozen=True, slots=True)
class ProducedPartition:
    partition: int
    error_code: int
    base_offset: int
    log_start_offset: int
    error_message: str | None


def _fetch_request(
    wanted: Mapping[str, list[tuple[int, int, int]]],
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    rack: str = "",
    *,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Mapping[str, list[int]] | None = None,
) -> FetchRequest:
    """A Fetch without a fetch session (epoch -1), or in one (KIP-227: ``session_id`` and
    ``session_epoch`` as ``plan.fetch_session`` says, ``forgotten`` partitions leaving it)."""
    P = FetchRequest.FetchTopic.FetchPartition
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    P(partition=p, fetch_offset=o, partition_max_bytes=m, log_start_offset=-1)
                    for p, o, m in parts
                ],
            )
            for topic, parts in wanted.items()
        ],
        forgotten_topics_data=[
            FetchRequest.ForgottenTopic(topic=t, partitions=ps)
            for t, ps in (forgotten or {}).items()
        ],
        rack_id=rack,
    )


@dataclass(frozen=True)
class ActiveProducer:
    """A producer the partition's leader keeps state for (DescribeProducers, KIP-664)."""

    producer_id: int
    epoch: int
    last_sequence: int
    txn_start: int  # the first offset of its open transaction in the partition, or -1


@dataclass(frozen=True)
class TxnState:
    """A transactional id as its coordinator describes it (DescribeTransactions, KIP-664)."""

    error_code: int
    state: str  # e.g. "Ongoing", "PrepareCommit", "CompleteAbort", "Empty"
    producer_id: int
    epoch: int
    # When its transaction began and the timeout it runs under (ms; -1 where not told).
    start_ms: int = -1
    timeout_ms: int = -1


def _init_producer_id(
    transactional_id: str | None, timeout_ms: int, current: tuple[int, int] | None
) -> Any:
    pid, epoch = current or (-1, -1)
    return InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=timeout_ms,
        producer_id=pid,
        producer_epoch=epoch,
    )


class Connection(BrokerConnection, GroupRequests, AdminRequests, ProbeRequests):
    """A broker connection with partsync's typed requests."""

    def metadata(self, topics: list[str] | None) -> Metadata:
        topic_reqs = (
            None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        )
        resp = self.call(
            "Metadata",
            MetadataRequest(topics=topic_reqs, allow_auto_topic_creation=False),
        )
        brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port) for b in resp.brokers}
        out: dict[str, TopicMeta] = {}
        for t in resp.topics:
            parts = {
                p.partition_index: PartitionMeta(
                    p.partition_index, p.leader_id, p.error_code, getattr(p, "leader_epoch", -1)
                )
                for p in t.partitions
            }
            out[t.name] = TopicMeta(t.name, t.error_code, parts, _topic_id(t))
        return Metadata(brokers, out)

    def list_offsets(
        self,
        topic: str,
        partitions: list[int],
        timestamp: int,
        *,
        replica_id: int = CONSUMER_REPLICA,
        leader_epochs: dict[int, int] | None = None,
        isolation_level: int = 0,
    ) -> dict[int, tuple[int, int]]:
        """Returns {partition: (error_code, offset)} for EARLIEST/LATEST.

        ``isolation_level`` 1 (read_committed) answers LATEST with the last stable offset.

        ``replica_id`` CONSUMER_REPLICA (-1) answers LATEST with the high watermark;
        DEBUG_REPLICA (-2) with the log end offset, where the next append lands (Kafka lets any
        replica answer it: pass ``leader_epochs`` so that only the current leader does)."""
        epochs = leader_epochs or {}
        P = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition
        req = ListOffsetsRequest(
            replica_id=replica_id,
            isolation_level=isolation_level,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        P(
                            partition_index=p,
                            timestamp=timestamp,
                            current_leader_epoch=epochs.get(p, -1),
                        )
                        for p in partitions
                    ],
                )
            ],
        )
        resp = self.call("ListOffsets", req)
        out: dict[int, tuple[int, int]] = {}
        for t in resp.topics:
            for p in t.partitions:
                out[p.partition_index] = (p.error_code, p.offset)
        return out

    def send_fetch(
        self,
        topic: str,
        wanted: list[tuple[int, int, int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> None:
        """Send a Fetch for (partition, offset, partition_max_bytes) triples; read it with
        ``receive_fetch``. min_bytes >= 1: Tansu answers min_bytes=0 with no partitions.
        Without the client's rack: the leader answers (a doorbell waits on the leader's log;
        a leader that points elsewhere answers at once, which would spin)."""
        self.send("Fetch", _fetch_request({topic: wanted}, max_wait_ms, min_bytes, max_bytes))

    def send_fetch_many(
        self,
        wanted: Mapping[str, list[tuple[int, int, int]]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
        rack: bool = True,
    ) -> None:
        """A Fetch for several topics, with the client's rack unless ``rack`` is False (KIP-392:
        an answer may point a partition at another replica); read it with
        ``receive_fetch_many``."""
        self.send(
            "Fetch",
            _fetch_request(wanted, max_wait_ms, min_bytes, max_bytes, self.rack if rack else ""),
        )

    def receive_fetch(self) -> dict[int, FetchedPartition]:
        """The answer to ``send_fetch`` (one topic), its records views into the received body
        (``raw``: not copied); ``last_throttle_ms`` keeps how long the broker asked this client
        to wait before its next request (a quota)."""
        return {p: f for (_t, p), f in self.receive_fetch_many().items()}

    def send_fetch_session(
        self,
        session_id: int,
        epoch: int,
        wanted: Mapping[str, list[tuple[int, int, int]]],
        forgotten: Mapping[str, list[int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> None:
        """A Fetch in a fetch session (KIP-227; Fetch v7+, the session id and epoch from
        ``plan.fetch_session``), to the leader (no rack: a doorbell waits on the leader's log);
        read it with ``receive_fetch_session``."""
        req = _fetch_request(
            wanted,
            max_wait_ms,
            min_bytes,
            max_bytes,
            session_id=session_id,
            session_epoch=epoch,
            forgotten=forgotten,
        )
        self.send("Fetch", req)

    def receive_fetch_session(self) -> tuple[int, int, dict[tuple[str, int], FetchedPartition]]:
        """(top-level error code, session id, partitions) of the answer to
        ``send_fetch_session``: the session errors come back as codes (the session is gone, a
        full request starts another), not raised."""
        return self._receive_fetch(raise_error=False)

    def receive_fetch_many(self) -> dict[tuple[str, int], FetchedPartition]:
        """The answer to ``send_fetch_many`` by (topic, partition), as ``receive_fetch``."""
        return self._receive_fetch(raise_error=True)[2]

    def _receive_fetch(
        self, *, raise_error: bool
    ) -> tuple[int, int, dict[tuple[str, int], FetchedPartition]]:
        body, at = self.receive_body()
        try:
            throttle, error, session_id, topics = decode_fetch_response(
                body, self.version("Fetch"), at
            )
        except ValueError as e:
            self.close()  # out of step with the broker from here
            raise ClusterError(
                f"Fetch response does not parse: {e}", cluster=self.cluster
            ) from None
        self.last_throttle_ms = throttle
        if error and raise_error:
            raise_for_code(error, "Fetch", cluster=self.cluster)
        return (
            error,
            session_id,
            {
                (topic, p.partition): FetchedPartition(
                    p.partition,
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    p.records,
                    p.preferred_read_replica,
                )
                for topic, parts in topics.items()
                for p in parts
            },
        )

    def _fetch_answer(self, resp: Any) -> tuple[dict[int, FetchedPartition], int]:
        throttle_ms = int(getattr(resp, "throttle_time_ms", 0) or 0)
        if getattr(resp, "error_code", 0):
            raise_for_code(resp.error_code, "Fetch", cluster=self.cluster)
        out: dict[int, FetchedPartition] = {}
        for t in resp.responses:
            for p in t.partitions:
                out[p.partition_index] = FetchedPartition(
                    p.partition_index,
                    p.error_code,
                    p.high_watermark,
                    p.log_start_offset,
                    p.records or b"",
                )
        return out, throttle_ms

    def fetch(
        self,
        topic: str,
        wanted: list[tuple[int, int, int]],
        *,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 64 << 20,
    ) -> dict[int, FetchedPartition]:
        """A Fetch as a ``call`` (on a shared connection, alongside other threads' calls). A
        throttled answer (KIP-219: the broker answers a client over its quota at once, without
        the partitions, with ``throttle_time_ms``, and reads nothing more from it until that
        time has passed) is waited out and asked again, for up to ``THROTTLE_WAIT_LIMIT_S`` in
        all; then the partial answer is returned."""
        waited = 0.0
        while True:
            req = _fetch_request({topic: wanted}, max_wait_ms, min_bytes, max_bytes)
            out, throttle_ms = self._fetch_answer(self.call("Fetch", req))
            pause = min(throttle_ms / 1000, THROTTLE_WAIT_LIMIT_S - waited)
            if pause <= 0 or all(p in out for p, _o, _m in wanted):
                return out
            time.sleep(pause)
            waited += pause

    def send_produce(
        self,
        topic: str,
        batches: dict[int, Buffer | Parts],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """Send one Produce request with at most one batch per partition (Kafka's rule)."""
        self.send_produce_many(
            {topic: batches}, acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id
        )

    def send_produce_many(
        self,
        batches: dict[str, dict[int, Buffer | Parts]],
        *,
        acks: int = -1,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> None:
        """One Produce request for many topics and partitions, one batch per partition, sent
        with one scatter/gather write (``raw``: the batches are not copied)."""
        self.send_parts(
            "Produce",
            lambda version, cid: produce_request_parts(
                version, cid, self.client_id, transactional_id, acks, timeout_ms, batches
            ),
        )

    def receive_produce_many(self) -> dict[tuple[str, int], ProducedPartition]:
        resp = self.receive()
        out: dict[tuple[str, int], ProducedPartition] = {}
        for t in resp.responses:
            for p in t.partition_responses:
                out[(t.name, p.index)] = ProducedPartition(
                    p.index,
                    p.error_code,
                    p.base_offset,
                    getattr(p, "log_start_offset", -1),
                    getattr(p, "error_message", None),
                )
        return out

    def receive_produce(self) -> dict[int, ProducedPartition]:
        """The answer to a ``send_produce`` (one topic), by partition."""
        return {p: res for (_t, p), res in self.receive_produce_many().items()}

    def init_producer_id(
        self, transactional_id: str | None = None, timeout_ms: int = 60_000
    ) -> tuple[int, int]:
        code, pid, epoch = self.try_init_producer_id(transactional_id, timeout_ms)
        raise_for_code(code, "InitProducerId", cluster=self.cluster)
        return pid, epoch

    def try_init_producer_id(
        self,
        transactional_id: str | None = None,
        timeout_ms: int = 60_000,
        current: tuple[int, int] | None = None,
    ) -> tuple[int, int, int]:
        """(error code, producer id, epoch), for callers that retry coordinator errors.

        ``current`` (producer id, epoch) renews an identity this client holds (KIP-360,
        InitProducerId v3+): the coordinator bumps the epoch only if it is still the id's
        current one, and answers PRODUCER_FENCED / INVALID_PRODUCER_EPOCH if another client
        has initialised the transactional id since."""
        resp = self.call("InitProducerId", _init_producer_id(transactional_id, timeout_ms, current))
        return int(resp.error_code), int(resp.producer_id), int(resp.producer_epoch)

    def try_init_producer_ids(
        self, transactional_ids: list[str], timeout_ms: int = 60_000
    ) -> list[tuple[int, int, int] | ClusterError]:
        """``try_init_producer_id`` for many ids at once, all sent before the first answer is
        read (``call_many``): (error code, producer id, epoch), or the connection's error."""
        requests = [_init_producer_id(t, timeout_ms, None) for t in transactional_ids]
        return [
            r
            if isinstance(r, ClusterError)
            else (int(r.error_code), int(r.producer_id), int(r.producer_epoch))
            for r in self.call_many("InitProducerId", requests)
        ]

    def try_add_partition_to_txn(
        self, transactional_id: str, producer: tuple[int, int], topic: str, partition: int
    ) -> int:
        """Add one partition to the transaction ``producer`` (id, epoch) has open under
        ``transactional_id`` (asked of its coordinator); the partition's error code."""
        pid, epoch = producer
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                    name=topic, partitions=[partition]
                )
            ],
        )
        resp = self.call("AddPartitionsToTxn", req)
        for t in resp.results_by_topic_v3_and_below:
            for p in t.results_by_partition:
                if t.name == topic and p.partition_index == partition:
                    return int(p.partition_error_code)
        return int(getattr(resp, "error_code", 0) or 0) or -1

    def try_end_txn(self, transactional_id: str, producer: tuple[int, int], commit: bool) -> int:
        """End the transaction ``producer`` (id, epoch) has open under ``transactional_id``
        (asked of its coordinator); the error code. The coordinator answers before its markers
        are written (they land asynchronously)."""
        pid, epoch = producer
        req = EndTxnRequest(
            transactional_id=transactional_id,
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        )
        return int(self.call("EndTxn", req).error_code)

    def describe_producers(self, topic: str, partition: int) -> tuple[int, list[ActiveProducer]]:
        """The partition's error code and its active producers (asked of its leader)."""
        req = DescribeProducersRequest(
            topics=[
                DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])
            ]
        )
        resp = self.call("DescribeProducers", req)
        for t in resp.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    return int(p.error_code), [
                        ActiveProducer(
                            int(a.producer_id),
                            int(a.producer_epoch),
                            int(a.last_sequence),
                            int(a.current_txn_start_offset),
                        )
                        for a in p.active_producers
                    ]
        return -1, []

    def list_transactions(
        self, producer_ids: list[int], states: list[str] | None = None
    ) -> tuple[int, dict[int, str]]:
        """(error code, producer id -> transactional id) of the transactions this broker
        coordinates for ``producer_ids`` (all, if empty) in ``states`` (any, if None), as
        ListTransactions (KIP-664) lists them."""
        req = ListTransactionsRequest(state_filters=states or [], producer_id_filters=producer_ids)
        resp = self.call("ListTransactions", req)
        return int(resp.error_code), {
            int(s.producer_id): s.transactional_id for s in resp.transaction_states
        }

    def describe_transactions(self, transactional_ids: list[str]) -> dict[str, TxnState]:
        """Each transactional id's state (asked of its coordinator)."""
        resp = self.call(
            "DescribeTransactions", DescribeTransactionsRequest(transactional_ids=transactional_ids)
        )
        return {
            s.transactional_id: TxnState(
                int(s.error_code),
                s.transaction_state,
                int(s.producer_id),
                int(s.producer_epoch),
                int(s.transaction_start_time_ms),
                int(s.transaction_timeout_ms),
            )
            for s in resp.transaction_states
        }
