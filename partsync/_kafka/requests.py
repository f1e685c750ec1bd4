"""Typed requests over a ``BrokerConnection``: ``Connection`` combines one mixin per job
(metadata and offsets, fetch, produce, producer ids and transactions, groups and their
committed offsets, topic admin, ``partsync check``'s probes). Everything returned is plain
Python (dataclasses, dicts, bytes), never a kafka-python object, so the rest of partsync does
not depend on its internals."""

from __future__ import annotations

from partsync._kafka.acl_requests import AclRequests
from partsync._kafka.admin_requests import AdminRequests
from partsync._kafka.connection import BrokerConnection
from partsync._kafka.fetch_requests import THROTTLE_WAIT_LIMIT_S, FetchedPartition, FetchRequests
from partsync._kafka.group_offset_requests import CommittedOffset, GroupOffsetRequests
from partsync._kafka.group_requests import BrokerInfo, GroupRequests, JoinResult
from partsync._kafka.metadata_requests import Metadata, MetadataRequests, PartitionMeta, TopicMeta
from partsync._kafka.probe_requests import ProbeRequests
from partsync._kafka.produce_requests import ProducedPartition, ProduceRequests
from partsync._kafka.txn_requests import ActiveProducer, TransactionRequests, TxnState

__all__ = [
    "THROTTLE_WAIT_LIMIT_S",
    "ActiveProducer",
    "BrokerInfo",
    "CommittedOffset",
    "Connection",
    "FetchedPartition",
    "JoinResult",
    "Metadata",
    "PartitionMeta",
    "ProducedPartition",
    "TopicMeta",
    "TxnState",
]


class Connection(
    BrokerConnection,
    MetadataRequests,
    FetchRequests,
    ProduceRequests,
    TransactionRequests,
    GroupRequests,
    GroupOffsetRequests,
    AdminRequests,
    AclRequests,
    ProbeRequests,
):
    """A broker connection with partsync's typed requests."""
