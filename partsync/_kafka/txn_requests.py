"""Producer ids and transactions (a mixin of ``Connection``): InitProducerId, AddPartitionsToTxn
and EndTxn to replay a source's transactions, and KIP-664's DescribeProducers,
ListTransactions and DescribeTransactions to find the ones a run left open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.transactions import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from partsync._kafka.codes import raise_for_code
from partsync.errors import ClusterError

__all__ = ["ActiveProducer", "TransactionRequests", "TxnState"]


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


class TransactionRequests:
    """Producer id and transaction requests over ``call`` (from ``BrokerConnection``)."""

    cluster: str

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

        def call_many(self, api: str, requests: list[Any]) -> list[Any]: ...

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
