"""Kafka error codes by name, and the one place a code becomes a ``BrokerError``.

kafka-python knows every code's name and whether it is retriable (``kafka.errors``); partsync's
own decisions (retry, stop, fenced) name the codes below instead of comparing bare numbers.
"""

from __future__ import annotations

import enum

import kafka.errors as _kerrors

from partsync.errors import BrokerError

__all__ = [
    "COORDINATOR_RETRY_CODES",
    "ELECTION_CODES",
    "FENCED_CODES",
    "LEADER_MOVED_CODES",
    "REFUSED_RECORD_CODES",
    "UNKNOWN_OUTCOME_CODES",
    "ErrorCode",
    "broker_error",
    "error_name",
    "error_retriable",
    "fetch_error",
    "raise_for_code",
]


class ErrorCode(enum.IntEnum):
    """The Kafka error codes partsync decides on (the names are Kafka's)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_REQUEST = 42
    INVALID_PRODUCER_EPOCH = 47
    CONCURRENT_TRANSACTIONS = 51
    SECURITY_DISABLED = 54
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    INVALID_RECORD = 87
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNSUPPORTED_ASSIGNOR = 106
    FENCED_MEMBER_EPOCH = 110


# Answers that mean "ask again (maybe elsewhere) shortly".
COORDINATOR_RETRY_CODES = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)
# Kafka answers an append from a producer whose epoch was bumped by a newer InitProducerId with
# INVALID_PRODUCER_EPOCH; some brokers say PRODUCER_FENCED.
FENCED_CODES = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})
# The partition's leadership moved: refresh metadata before asking again.
LEADER_MOVED_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    }
)
# A leader election under way (the leader moved, is not elected yet, or has not caught up its
# high watermark): Kafka's clients wait these out with fresh metadata.
ELECTION_CODES = LEADER_MOVED_CODES | {
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.OFFSET_NOT_AVAILABLE,
}

# The broker refused the batch itself (its timestamps, keys, size or format against the
# topic's configs): sending it again cannot help, a person must change a config.
REFUSED_RECORD_CODES = frozenset(
    {ErrorCode.INVALID_TIMESTAMP, ErrorCode.INVALID_RECORD, ErrorCode.MESSAGE_TOO_LARGE}
)

# An append answered with these may still be in the leader's log (it timed out waiting for
# replicas, or was appended but not replicated in time): never resend it blind.
UNKNOWN_OUTCOME_CODES = frozenset(
    {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
)


def error_name(code: int) -> str:
    """Kafka's own name for a code (``NOT_ENOUGH_REPLICAS``), as broker logs and docs say it."""
    if code in ErrorCode._value2member_map_:
        return ErrorCode(code).name
    cls = _kerrors.for_code(code)
    name = getattr(cls, "message", None)
    return str(name) if name and name != "UNKNOWN" else f"{cls.__name__}"


def error_retriable(code: int) -> bool:
    return bool(getattr(_kerrors.for_code(code), "retriable", False))


def broker_error(
    code: int,
    what: str,
    *,
    cluster: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> BrokerError:
    """The BrokerError for a Kafka error code, named and flagged retriable by kafka-python."""
    return BrokerError(
        what,
        error_code=code,
        error_name=error_name(code),
        retriable=error_retriable(code),
        cluster=cluster,
        topic=topic,
        partition=partition,
        offset=offset,
    )


def fetch_error(cluster: str, topic: str, partition: int, offset: int, code: int) -> BrokerError:
    err = broker_error(
        code, "fetch failed", cluster=cluster, topic=topic, partition=partition, offset=offset
    )
    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
        # The log start (retention, DeleteRecords) moved past bounds read earlier: a new round
        # reads them again and plans from there (or refuses, if the gap is real).
        err.retriable = True
    return err


def raise_for_code(
    code: int,
    what: str,
    *,
    cluster: str | None = None,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
) -> None:
    if code:
        raise broker_error(
            code, what, cluster=cluster, topic=topic, partition=partition, offset=offset
        )
