"""One exception hierarchy for partsync, with structured fields.

Every error carries where it happened (cluster, topic, partition, offset) as attributes so that
reports and JSON output can show them without parsing text; ``__str__`` builds the message.
``retriable`` tells the copier whether retrying may help (a broker hiccup) or whether the
partition must stop (anything that could break offset identity).
"""

from __future__ import annotations

import enum

__all__ = [
    "AppendMismatchError",
    "BrokerError",
    "Cancelled",
    "ClusterError",
    "ConfigError",
    "CorruptBatchError",
    "DivergenceError",
    "ExitStatus",
    "FencedError",
    "GroupError",
    "HandedOnError",
    "PartsyncError",
    "StoppedError",
    "TopicError",
    "UnreplicatedError",
    "UnsafeError",
    "UsageError",
]


class ExitStatus(enum.IntEnum):
    """Process exit codes; other tools script against these, keep them stable."""

    OK = 0
    FAILURE = 1
    USAGE = 2
    UNSAFE = 3
    DEADLINE = 4
    # Follow mode: a source topic the job mirrored was deleted on every source that had it;
    # its mirror is kept as it is (a person decides what becomes of it).
    SOURCE_GONE = 5


class PartsyncError(Exception):
    """Root of every error partsync raises on purpose."""

    retriable: bool = False
    exit_status: ExitStatus = ExitStatus.FAILURE

    def __init__(
        self,
        reason: str,
        *,
        cluster: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __reduce__(self) -> tuple[object, ...]:
        # Results carry their error object across processes (Spark tasks): rebuild from the
        # attributes, since subclasses take keyword-only fields that ``args`` does not hold.
        return (_rebuild, (type(self), self.reason, dict(self.__dict__)))

    def where(self) -> str:
        parts = []
        if self.cluster is not None:
            parts.append(f"cluster {self.cluster}")
        if self.topic is not None:
            tp = f"topic {self.topic}"
            if self.partition is not None:
                tp += f" partition {self.partition}"
            parts.append(tp)
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{where}: {self.reason}" if where else self.reason

    def to_dict(self) -> dict[str, object]:
        return {
            "error": type(self).__name__,
            "reason": self.reason,
            "cluster": self.cluster,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "retriable": self.retriable,
        }


class UsageError(PartsyncError):
    """Bad command-line input."""

    exit_status = ExitStatus.USAGE


class ConfigError(UsageError):
    """Bad or missing configuration (file, cluster reference, unknown key)."""


class ClusterError(PartsyncError):
    """A cluster could not be reached or answered in a way we cannot use."""

    retriable = True


class BrokerError(ClusterError):
    """A broker answered a request with a Kafka error code."""

    def __init__(
        self,
        reason: str,
        *,
        error_code: int,
        error_name: str,
        retriable: bool,
        cluster: str | None = None,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(
            f"{reason}: {error_name} ({error_code})",
            cluster=cluster,
            topic=topic,
            partition=partition,
            offset=offset,
        )
        self.error_code = error_code
        self.error_name = error_name
        self.retriable = retriable


class UnreplicatedError(ClusterError):
    """The local partition's high watermark is below its log end: an append is in the leader's
    log but not on every in-sync replica yet. Nothing is appended until it is (the next append
    would land at the log end, and the tail may still be truncated by a leader change)."""


class HandedOnError(PartsyncError):
    """Not a failure: a copy of many partitions taken together stopped right before a batch
    the partition's own rounds must see to (a transaction, a compaction hole, a batch the local
    topic refuses, a throttled fetch); they go on from the local end at once, as a retry
    would, and report whatever it is."""

    retriable = True


class TopicError(PartsyncError):
    """A topic is missing or cannot be used as asked."""


class SourceGoneError(TopicError):
    """A followed topic was deleted on every source that had it: nothing more is appended to
    its mirror, which is kept."""

    exit_status = ExitStatus.SOURCE_GONE


class CorruptBatchError(PartsyncError):
    """A fetched record batch failed its checks (CRC, framing)."""


class UnsafeError(PartsyncError):
    """Copying would break offset identity; the partition is refused and left untouched."""

    exit_status = ExitStatus.UNSAFE


class DivergenceError(UnsafeError):
    """Two logs disagree on the same offsets (local vs source, or source vs source)."""


class AppendMismatchError(UnsafeError):
    """The broker put an appended batch somewhere else than the source's offset."""


class FencedError(PartsyncError):
    """Another partsync writer took over the partition (its producer epoch is newer): this one
    stops writing it at once. Not a failure of the job: the new owner carries on."""


class StoppedError(PartsyncError):
    """The run was asked to stop (signal, deadline, lost ownership) before catching up; what was
    appended is confirmed and kept."""


class Cancelled(PartsyncError):
    """A batch was dropped before it was sent because its partition had stopped."""


class GroupError(PartsyncError):
    """The local group cannot be used (authorization, a non-partsync group of the same name,
    no assignment in time, ...)."""


def _rebuild(cls: type[PartsyncError], reason: str, state: dict[str, object]) -> PartsyncError:
    err = cls.__new__(cls)
    Exception.__init__(err, reason)
    err.__dict__.update(state)
    return err
