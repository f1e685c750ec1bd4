"""The one adapter over kafka-python's internals (pinned to the 3.0.x line).

Only modules in this package import ``kafka``: ``connection`` (one broker's connection, built
from ``sockets``, ``framed_socket``, ``shared_calls``, ``api_versions`` and ``sasl_login``),
``requests`` (``Connection``: the typed requests of the ``*_requests`` modules, plain-Python
answers) and ``codes`` (error codes by name). Everything else in partsync imports from here.
"""

# First, before any module here imports kafka: kafka-python's package __init__ is deferred.
from partsync._kafka.kafka_package import defer_init

defer_init()

from partsync._kafka.codes import (
    COORDINATOR_RETRY_CODES,
    ELECTION_CODES,
    FENCED_CODES,
    LEADER_MOVED_CODES,
    REFUSED_RECORD_CODES,
    UNKNOWN_OUTCOME_CODES,
    ErrorCode,
    broker_error,
    error_name,
    error_retriable,
    fetch_error,
    raise_for_code,
)
from partsync._kafka.connection import (
    CONSUMER_REPLICA,
    DEBUG_REPLICA,
    EARLIEST,
    GROUP_KEY,
    LATEST,
    PROBE_WAIT_MS,
    TXN_KEY,
)
from partsync._kafka.probe_requests import AclEntry
from partsync._kafka.requests import (
    THROTTLE_WAIT_LIMIT_S,
    ActiveProducer,
    BrokerInfo,
    CommittedOffset,
    Connection,
    FetchedPartition,
    JoinResult,
    Metadata,
    PartitionMeta,
    ProducedPartition,
    TopicMeta,
    TxnState,
)

__all__ = [
    "CONSUMER_REPLICA",
    "COORDINATOR_RETRY_CODES",
    "DEBUG_REPLICA",
    "EARLIEST",
    "ELECTION_CODES",
    "FENCED_CODES",
    "GROUP_KEY",
    "LATEST",
    "LEADER_MOVED_CODES",
    "PROBE_WAIT_MS",
    "REFUSED_RECORD_CODES",
    "THROTTLE_WAIT_LIMIT_S",
    "TXN_KEY",
    "UNKNOWN_OUTCOME_CODES",
    "AclEntry",
    "ActiveProducer",
    "BrokerInfo",
    "CommittedOffset",
    "Connection",
    "ErrorCode",
    "FetchedPartition",
    "JoinResult",
    "Metadata",
    "PartitionMeta",
    "ProducedPartition",
    "TopicMeta",
    "TxnState",
    "broker_error",
    "error_name",
    "error_retriable",
    "fetch_error",
    "raise_for_code",
]
