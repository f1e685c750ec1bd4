"""The producer identity a partition is appended with, and the fencing that goes with it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster

__all__ = [
    "ProducerSession",
    "open_fenced_producers",
    "open_producer",
    "renew_producer",
    "transactional_id",
]


def transactional_id(topic: str, partition: int) -> str:
    """The transactional id every partsync writer of a local partition initialises with.

    It names the local partition only (not the group or the run), so any two partsync
    processes writing it fence each other: the later InitProducerId bumps the producer epoch and
    the broker rejects the earlier writer's appends. ':' cannot occur in a topic name.
    """
    return f"partsync:{topic}:{partition}"


@dataclass
class ProducerSession:
    """The idempotent producer identity one owner appends a partition with.

    An owner keeps one session for as long as it owns the partition (one epoch bump per
    ownership, not per round) and continues its sequence; a session that saw a failure is
    discarded, since the broker's sequence state is then unknown.
    """

    producer_id: int
    epoch: int
    sequence: int = 0
    usable: bool = True
    # Under the partition's transactional id (fencing on)?
    fencing: bool = True
    opened_at: float = field(default_factory=time.monotonic)

    def older_than(self, seconds: float) -> bool:
        return time.monotonic() - self.opened_at > seconds


def open_producer(
    local: Cluster, topic: str, partition: int, fencing: bool = True, *, lane: int = 0
) -> ProducerSession:
    """A new producer identity for appending the partition: with ``fencing``, under the
    partition's transactional id, which fences every earlier writer of it (asked over the
    coordinator's connection ``lane``, ``Cluster.broker_conn``)."""
    tid = transactional_id(topic, partition) if fencing else None
    pid, epoch = local.init_producer_id(tid, lane=lane)
    return ProducerSession(pid, epoch, fencing=fencing)


def renew_producer(
    local: Cluster, topic: str, partition: int, session: ProducerSession
) -> ProducerSession:
    """The same owner's identity with a new epoch, so the transactional id does not expire.

    Kafka forgets a transactional id that has not been initialised or used in a transaction for
    ``transactional.id.expiration.ms`` (7 days by default); after that a new writer's
    InitProducerId would get a *new* producer id, which does not fence this one. Renewing
    (between rounds, with no append in flight) passes the current id and epoch (KIP-360), so it
    succeeds only while this owner still holds the id, and raises ``FencedError`` if another
    writer took it over. The new epoch restarts the sequence at 0."""
    if not session.fencing:
        return session
    pid, epoch = local.init_producer_id(
        transactional_id(topic, partition), current=(session.producer_id, session.epoch)
    )
    return ProducerSession(pid, epoch, fencing=True)


def open_fenced_producers(
    local: Cluster, partitions: list[tuple[str, int]], *, lanes: int = 1
) -> dict[tuple[str, int], ProducerSession | PartsyncError]:
    """``open_producer`` with fencing for many partitions at once (``Cluster.init_producer_ids``:
    all sent before the first answer is read): each one's session, or the error it met (asked
    once; the caller fences those the usual way, with retries)."""
    ids = {
        transactional_id(topic, partition): (topic, partition) for topic, partition in partitions
    }
    local.prefetch_txn_coordinators(list(ids))
    out: dict[tuple[str, int], ProducerSession | PartsyncError] = {}
    for tid, answer in local.init_producer_ids(list(ids), lanes=lanes).items():
        out[ids[tid]] = answer if isinstance(answer, PartsyncError) else ProducerSession(*answer)
    return out
