"""What a cluster tells about transactions (KIP-664: DescribeTransactions, DescribeProducers,
ListTransactions): a partition's open producers, a transaction's state and timeout, the ids in
a state. A run needs them to find and resume a transaction an earlier run left open."""

from __future__ import annotations

import logging

from partsync._kafka import (
    COORDINATOR_RETRY_CODES,
    ActiveProducer,
    ErrorCode,
    TxnState,
    broker_error,
    raise_for_code,
)
from partsync.errors import ClusterError, PartsyncError
from partsync.io.connections import Connections
from partsync.io.coordinators import Coordinators
from partsync.io.metadata import MetadataCache
from partsync.retry import Backoff, retry_until

__all__ = ["Transactions"]

_KIP_664 = ("DescribeTransactions", "DescribeProducers", "ListTransactions")
log = logging.getLogger(__name__)


class Transactions:
    def __init__(self, conns: Connections, meta: MetadataCache, coords: Coordinators) -> None:
        self.name = conns.name
        self._conns = conns
        self._meta = meta
        self._coords = coords
        # Producer id -> (transactional id, transaction timeout ms, start ms), or None: unknown.
        self._txn_ids: dict[int, tuple[str, int, int] | None] = {}

    def can_resume_transactions(self) -> bool:
        """Whether a run can find and resume a transaction an earlier run left open in a
        partition: the cluster offers all of KIP-664 (DescribeTransactions, DescribeProducers
        and ListTransactions: Kafka 3.0+). A broker that offers only part of it may not keep
        the producer state resuming needs (noida-db answers DescribeProducers with no
        producers, even with a transaction open)."""
        return self._conns.bootstrap_call(lambda c: all(c.supports(api) for api in _KIP_664))

    def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer] | None:
        """The partition's active producers (its leader's producer state), or None where the
        leader does not offer DescribeProducers (Kafka < 3.0, some other brokers)."""
        self._meta.metadata(refresh=True)  # any replica answers: ask the partition's leader
        conn = self._conns.broker_conn(self._meta.leader(topic, partition))
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
        if not self._conns.bootstrap_call(lambda c: c.supports("DescribeTransactions")):
            return None  # before any coordinator is looked up for it
        self._coords.prefetch_txn_coordinators(transactional_ids)  # one request, where it can
        backoff = Backoff(0.05, 1.0, deadline=timeout)
        out: dict[str, TxnState] = {}
        todo = list(transactional_ids)
        unsupported = False

        def attempt() -> tuple[bool, list[str]]:
            """One request per coordinator; the ids to ask again."""
            nonlocal todo, unsupported
            by_node: dict[int, list[str]] = {}
            retry: list[str] = []
            for tid in todo:
                code, coord, _cached = self._coords.txn_coordinator(tid, backoff.remaining or 0.0)
                if code or coord is None:
                    retry.append(tid)
                else:
                    by_node.setdefault(coord.node_id, []).append(tid)
            for node, tids in by_node.items():
                try:
                    conn = self._conns.broker_conn(node)
                    if not conn.supports("DescribeTransactions"):
                        unsupported = True
                        return True, []
                    states = conn.describe_transactions(tids)
                except PartsyncError as e:  # a coordinator that went away: look them up again
                    log.debug("DescribeTransactions on broker %d: %s", node, e)
                    for tid in tids:
                        self._coords.forget(tid)
                    retry.extend(tids)
                    continue
                for tid, st in states.items():
                    if st.error_code in COORDINATOR_RETRY_CODES:
                        self._coords.forget(tid)
                        retry.append(tid)
                    elif st.error_code not in (0, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
                        raise broker_error(
                            st.error_code,
                            f"DescribeTransactions for transactional id {tid!r}",
                            cluster=self.name,
                        )
                    else:
                        out[tid] = st
            todo = retry
            return not retry, retry

        retry = retry_until(attempt, backoff)
        if unsupported:
            return None
        if retry:
            raise ClusterError(
                f"the coordinators of transactional ids {retry} did not "
                f"answer DescribeTransactions within {timeout:g}s",
                cluster=self.name,
            )
        return out

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

    def _transactional_id_of(self, producer_id: int) -> str | None:
        for conn in self._conns.each_broker():
            code, found = conn.list_transactions([producer_id])
            if code == 0 and producer_id in found:
                return found[producer_id]
        return None

    def transactional_ids_in(self, states: list[str]) -> set[str]:
        """The transactional ids whose transaction is in one of ``states`` (e.g.
        ``CompleteAbort``), as every broker's ListTransactions lists those it coordinates and
        this client may describe; empty where the cluster cannot resume transactions (no
        KIP-664). Raises ``ClusterError`` where a broker does not answer."""
        if not self.can_resume_transactions():
            return set()
        out: set[str] = set()
        for conn in self._conns.each_broker():
            code, found = conn.list_transactions([], states)
            raise_for_code(code, f"listing transactions ({', '.join(states)})", cluster=self.name)
            out.update(found.values())
        return out
