"""The producer identity a partition is appended with, and the fencing that goes with it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from partsync.copy.options import CopyOptions
from partsync.errors import ClusterError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.kafka_types import TxnState
from partsync.io.reader import read_batches

__all__ = [
    "AT_END",
    "TXN_SLOTS",
    "ProducerSession",
    "abort_left_open",
    "fence_slots",
    "open_fenced_producers",
    "open_producer",
    "open_producer_for",
    "partsync_ids",
    "renew_producer",
    "slot_id",
    "slot_partition",
    "take_up_slots",
    "transactional_id",
]

# Source transactions a replay keeps open at once in one partition (``copy.txn_replay``), each
# under a transactional id of its own: every one is fenced with the partition, so a writer
# that lost the partition can append nothing under any of them.
TXN_SLOTS = 8
# ``ProducerSession.open_txns``: a slot's open transaction holds nothing of the partition yet.
AT_END = -1


def transactional_id(topic: str, partition: int) -> str:
    """The transactional id every partsync writer of a local partition initialises with.

    It names the local partition only (not the group or the run), so any two partsync
    processes writing it fence each other: the later InitProducerId bumps the producer epoch and
    the broker rejects the earlier writer's appends. ':' cannot occur in a topic name.
    """
    return f"partsync:{topic}:{partition}"


def slot_id(topic: str, partition: int, slot: int) -> str:
    """The transactional id of a replay's transaction slot ``slot`` in a local partition."""
    return f"partsync:{topic}:{partition}:txn{slot}"


def partsync_ids(topic: str, partition: int) -> list[str]:
    """Every transactional id partsync writes a local partition under: its own and its
    replay slots'."""
    return [
        transactional_id(topic, partition),
        *(slot_id(topic, partition, n) for n in range(TXN_SLOTS)),
    ]


def slot_partition(tid: str) -> tuple[str, int] | None:
    """The local partition whose replay slot ``tid`` is (``slot_id``'s inverse), or None for
    any other transactional id."""
    parts = tid.split(":")
    if len(parts) != 4 or parts[0] != "partsync" or not parts[3].startswith("txn"):
        return None
    if not parts[2].isdigit() or not parts[3][3:].isdigit():
        return None
    return parts[1], int(parts[2])


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
    # Transaction slots (``--transactions replay``): slot -> (producer id, epoch), fenced with
    # the partition, and each slot's next sequence in the partition.
    slots: dict[int, tuple[int, int]] = field(default_factory=dict)
    slot_sequences: dict[int, int] = field(default_factory=dict)
    # Slot -> the first local offset of its transaction left open (by a killed run, or a copy
    # that ended before the source's marker): the replay resumes it instead of aborting it.
    open_txns: dict[int, int] = field(default_factory=dict)
    # Slot -> when the local coordinator aborts its open transaction (wall clock ms; -1: unknown).
    open_until: dict[int, int] = field(default_factory=dict)

    def older_than(self, seconds: float) -> bool:
        return time.monotonic() - self.opened_at > seconds


def open_producer(
    local: Cluster,
    topic: str,
    partition: int,
    fencing: bool = True,
    *,
    lane: int = 0,
    txn_slots: bool = False,
    txn_timeout_ms: int = 60_000,
) -> ProducerSession:
    """A new producer identity for appending the partition: with ``fencing``, under the
    partition's transactional id, which fences every earlier writer of it (asked over the
    coordinator's connection ``lane``, ``Cluster.broker_conn``). With ``txn_slots`` (a replay
    of transactions) every transaction slot's id is initialised too: that fences them, and
    aborts a transaction a killed run left open (its marker is written before the answer
    comes, so the local end read after this includes it)."""
    tid = transactional_id(topic, partition) if fencing else None
    pid, epoch = local.init_producer_id(tid, lane=lane)
    session = ProducerSession(pid, epoch, fencing=fencing)
    if txn_slots:
        take_up_slots(local, topic, partition, session, lane=lane, txn_timeout_ms=txn_timeout_ms)
    return session


_ENDING = ("PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def open_producer_for(
    local: Cluster, topic: str, partition: int, opts: CopyOptions
) -> ProducerSession:
    """``open_producer`` as a copy with ``opts`` needs it: fenced unless ``--no-fencing``, with
    the transaction slots a replay of transactions uses."""
    return open_producer(
        local,
        topic,
        partition,
        opts.fencing,
        txn_slots=opts.replay_transactions,
        txn_timeout_ms=opts.transaction_timeout_ms,
    )


def take_up_slots(
    local: Cluster,
    topic: str,
    partition: int,
    session: ProducerSession,
    *,
    lane: int = 0,
    txn_timeout_ms: int = 900_000,
    wait: float = 30.0,
) -> None:
    """At the fence, before the local end is read: the transactions of the partition's slots
    that an earlier run left open are taken up (``fence_slots``), and those it left ending
    (EndTxn sent, markers not all written) are waited for, so their markers are in the log
    the copy plans from. Otherwise (nothing open, or a local cluster that cannot tell: no
    DescribeTransactions, KIP-664) the slots are fenced when the copy begins its first
    transaction: most topics have none."""
    if not local.can_resume_transactions():
        return  # fenced (a slot left open aborted) when the copy begins its first transaction
    tids = [slot_id(topic, partition, n) for n in range(TXN_SLOTS)]
    deadline = time.monotonic() + wait
    while True:
        states = local.describe_transactions(tids)
        if states is None:
            return
        ending = sorted(t for t, st in states.items() if st.state in _ENDING)
        if not ending:
            break
        if time.monotonic() > deadline:
            raise ClusterError(
                f"transactions {ending} are still being ended after {wait:g}s; "
                "their markers must land before the copy plans",
                cluster=local.name,
                topic=topic,
                partition=partition,
            )
        time.sleep(0.05)
    if any(st.state == "Ongoing" for st in states.values()):
        fence_slots(
            local,
            topic,
            partition,
            session,
            lane=lane,
            txn_timeout_ms=txn_timeout_ms,
            states=states,
        )


def fence_slots(
    local: Cluster,
    topic: str,
    partition: int,
    session: ProducerSession,
    *,
    lane: int = 0,
    txn_timeout_ms: int = 900_000,
    states: dict[str, TxnState] | None = None,
) -> None:
    """Give ``session`` the partition's transaction slots: each one's transaction an earlier
    run left open is taken up (``_left_open``, into ``session.open_txns``), every other slot's
    id is initialised, which fences whoever held it."""
    if states is None and local.can_resume_transactions():
        states = local.describe_transactions(
            [slot_id(topic, partition, n) for n in range(TXN_SLOTS)]
        )
    left_open = _left_open(local, topic, partition, states)
    for n in range(TXN_SLOTS):
        if n in left_open:
            session.slots[n], session.slot_sequences[n], session.open_txns[n] = left_open[n]
            st = (states or {}).get(slot_id(topic, partition, n))
            known = st is not None and st.start_ms >= 0 and st.timeout_ms >= 0
            session.open_until[n] = st.start_ms + st.timeout_ms if known and st else -1
        else:
            session.slots[n] = local.init_producer_id(
                slot_id(topic, partition, n), lane=lane, txn_timeout_ms=txn_timeout_ms
            )


def _left_open(
    local: Cluster, topic: str, partition: int, states: dict[str, TxnState] | None = None
) -> dict[int, tuple[tuple[int, int], int, int]]:
    """Slot -> ((producer id, epoch), next sequence, first offset) of each slot transaction an
    earlier run left open in the partition. Initialising its id would abort it, and the abort
    marker would land at the local log end, where the source holds the rest of the
    transaction: it is resumed instead (``txn_replay``). Empty where the local cluster cannot
    tell (no DescribeTransactions or DescribeProducers, KIP-664)."""
    if not local.can_resume_transactions():
        return {}
    tids = [slot_id(topic, partition, n) for n in range(TXN_SLOTS)]
    if states is None:
        states = local.describe_transactions(tids)
    ongoing = {tid: st for tid, st in (states or {}).items() if st.state == "Ongoing"}
    if not ongoing:
        return {}
    producers = local.describe_producers(topic, partition)
    if producers is None:
        return {}
    known = {p.producer_id: p for p in producers}
    out: dict[int, tuple[tuple[int, int], int, int]] = {}
    for n, tid in enumerate(tids):
        st = ongoing.get(tid)
        if st is None:
            continue
        p = known.get(st.producer_id)
        found = _in_log(local, topic, partition, st) if p is None and not producers else None
        if p is not None and p.epoch == st.epoch and p.txn_start >= 0:
            out[n] = ((st.producer_id, st.epoch), (p.last_sequence + 1) & 0x7FFFFFFF, p.txn_start)
        elif found is not None:
            out[n] = ((st.producer_id, st.epoch), found[1], found[0])
        else:
            # Open, with the partition added but none of its data appended yet (a run killed
            # between AddPartitionsToTxn and its first append or EndTxn): it replays the
            # source transaction at the local log end (``AT_END``).
            seq = (p.last_sequence + 1) & 0x7FFFFFFF if p is not None and p.epoch == st.epoch else 0
            out[n] = ((st.producer_id, st.epoch), seq, AT_END)
    return out


def _in_log(local: Cluster, topic: str, partition: int, st: TxnState) -> tuple[int, int] | None:
    """(first offset, next sequence) of the open transaction ``st`` read from the local log
    itself, between its last stable offset (where the earliest open transaction begins) and
    its end: for a broker that offers DescribeProducers but lists no producers (noida-db).
    None if the producer appended nothing there (begun, nothing appended)."""
    lso = local.last_stable_offset(topic, partition)
    _b, leo = local.bounds_and_log_ends(topic, [partition])[partition]
    first: int | None = None
    sequence = 0
    conn = local.connect_leader(topic, partition)
    try:
        for b in read_batches(conn, local.name, topic, partition, lso, leo, fetch_bytes=1 << 20):
            if (b.producer_id, b.producer_epoch) != (st.producer_id, st.epoch):
                continue
            if b.is_control:
                first = None  # it ended an earlier transaction of the slot
            elif b.is_transactional:
                first = b.base_offset if first is None else first
            if not b.is_control:  # Kafka's lastSequence + 1
                sequence = (b.base_sequence + b.last_offset_delta + 1) & 0x7FFFFFFF
    finally:
        local.release(conn)
    return None if first is None else (first, sequence)


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
    # The transaction slots keep their identities: initialising them again would abort the
    # transactions a round left open for the source's markers.
    return ProducerSession(
        pid,
        epoch,
        fencing=True,
        slots=session.slots,
        slot_sequences=session.slot_sequences,
        open_txns=session.open_txns,
        open_until=session.open_until,
    )


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


def abort_left_open(local: Cluster, topic: str, partition: int, *, wait: float = 30.0) -> int:
    """Abort the replayed source transactions an earlier run left open in the partition (a
    promotion: whether their source transactions commit is no longer known); the offsets they
    held, from the first of them to the log end. Initialising a slot's transactional id again
    makes its coordinator abort the open transaction (a new producer epoch); the abort markers
    are waited for (the last stable offset reaches the log end)."""
    if not local.can_resume_transactions():
        return 0  # a run here holds source transactions back until their markers instead
    tids = [slot_id(topic, partition, n) for n in range(TXN_SLOTS)]
    states = local.describe_transactions(tids) or {}
    ongoing = sorted(t for t, st in states.items() if st.state == "Ongoing")
    if not ongoing:
        return 0
    firsts = [first for _pid, _seq, first in _left_open(local, topic, partition, states).values()]
    _b, end = local.bounds_and_log_ends(topic, [partition])[partition]
    held = end - min(f for f in firsts if f >= 0) if any(f >= 0 for f in firsts) else 0
    for tid in ongoing:
        local.init_producer_id(tid)
    deadline = time.monotonic() + wait
    while local.last_stable_offset(topic, partition) < end:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the aborted transactions' markers did not land within {wait:g}s",
                cluster=local.name,
                topic=topic,
                partition=partition,
            )
        time.sleep(0.05)
    return held
