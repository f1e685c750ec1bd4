"""A partition's bounds as one cluster reports them: log start, high watermark, log end and
last stable offset, read from its leader."""

from __future__ import annotations

from collections import defaultdict

from partsync._kafka import (
    CONSUMER_REPLICA,
    DEBUG_REPLICA,
    EARLIEST,
    ELECTION_CODES,
    LATEST,
    PROBE_WAIT_MS,
    FetchedPartition,
    error_name,
    raise_for_code,
)
from partsync.errors import BrokerError, TopicError, UnreplicatedError
from partsync.io.coalesce import Coalescer
from partsync.io.connections import Connections
from partsync.io.metadata import BOUNDS_ELECTION_WAIT_S, MetadataCache
from partsync.plan.comparator import Bounds
from partsync.retry import Backoff, retry_on, retry_until

__all__ = ["BoundsReader", "read_bounds", "read_log_ends"]


def _by_leader(
    meta: MetadataCache, topic: str, partitions: list[int]
) -> tuple[dict[int, list[int]], dict[int, int]]:
    """The partitions grouped by leader, and their leader epochs, from one view of metadata
    (a request must name the epoch of the leader it is sent to)."""
    info = meta.topic(topic)
    if info is None:
        raise TopicError("topic does not exist", cluster=meta.name, topic=topic)
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in partitions:
        if p not in info.leaders:
            raise TopicError(
                "partition does not exist", cluster=meta.name, topic=topic, partition=p
            )
        by_leader[info.leaders[p]].append(p)
    return by_leader, info.leader_epochs


_Key = tuple[int, int]  # (partition, leader epoch the asker routed it by; -1: none sent)


def _list_offsets(
    conns: Connections,
    leader: int,
    topic: str,
    timestamp: int,
    replica_id: int = CONSUMER_REPLICA,
) -> Coalescer[_Key, tuple[int, int]]:
    """{(partition, epoch): (error code, offset)} from the leader, one request for every thread
    asking at the same time (``io.coalesce``). A key's epoch is sent with it (the debug
    replica's log end must come from the leader the asker routed to: any replica at that
    epoch would answer); a partition asked with two epochs at once takes two requests."""

    def ask(keys: list[_Key]) -> dict[_Key, tuple[int, int]]:
        out: dict[_Key, tuple[int, int]] = {}
        conn = conns.broker_conn(leader)
        for now in _one_per_partition(keys):
            epochs = dict(now)
            answers = conn.list_offsets(
                topic, list(epochs), timestamp, replica_id=replica_id, leader_epochs=epochs
            )
            for key in now:  # a partition left out of the answer: an error
                out[key] = answers.get(key[0], (-1, -1))
        return out

    return conns.coalescer(("ListOffsets", leader, topic, timestamp, replica_id), ask)


def _one_per_partition(keys: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """``keys`` split into requests that name each partition once."""
    rounds: list[list[tuple[int, int]]] = []
    named: list[set[int]] = []  # the partitions each round names
    for key in keys:
        for r, seen in zip(rounds, named, strict=True):
            if key[0] not in seen:
                r.append(key)
                seen.add(key[0])
                break
        else:
            rounds.append([key])
            named.append({key[0]})
    return rounds


def _probe(
    conns: Connections, leader: int, topic: str
) -> Coalescer[tuple[int, int], FetchedPartition | None]:
    """The answer to a one-byte Fetch at (partition, offset), coalesced like ``_list_offsets``
    (a partition asked at two offsets at once takes two requests: a Fetch names it once)."""

    def ask(keys: list[tuple[int, int]]) -> dict[tuple[int, int], FetchedPartition | None]:
        out: dict[tuple[int, int], FetchedPartition | None] = {}
        for now in _one_per_partition(keys):
            fetched = conns.broker_conn(leader).fetch(
                topic,
                [(p, off, 1) for p, off in now],
                max_wait_ms=PROBE_WAIT_MS,
                min_bytes=1,
                max_bytes=1,
            )
            for p, off in now:
                out[(p, off)] = fetched.get(p)
        return out

    return conns.coalescer(("Probe", leader, topic), ask)


def _check(cluster: str, what: str, code: int, topic: str, partition: int) -> None:
    if code:
        raise BrokerError(
            f"listing the {what} offset",
            error_code=code,
            error_name=error_name(code),
            retriable=True,
            cluster=cluster,
            topic=topic,
            partition=partition,
        )


def read_bounds(
    conns: Connections, meta: MetadataCache, topic: str, partitions: list[int]
) -> dict[int, Bounds]:
    """Log start and high watermark of each partition, one round of requests per leader
    (shared with every other thread reading bounds from that leader at the same time).

    ListOffsets gives log start and an end; a small Fetch at end-1 confirms the high
    watermark (Tansu's ListOffsets(latest) returns the last batch's base offset + 1, and
    the Fetch response carries the true high watermark and log start on every broker).
    """
    out: dict[int, Bounds] = {}
    by_leader, _epochs = _by_leader(meta, topic, partitions)
    for leader, parts in by_leader.items():
        keys = [(p, -1) for p in parts]  # a consumer's reads: any leader epoch (as before)
        earliest = _list_offsets(conns, leader, topic, EARLIEST).get_many(keys)
        latest = _list_offsets(conns, leader, topic, LATEST).get_many(keys)
        probe = []
        for p in parts:
            _check(conns.name, "log start", earliest[(p, -1)][0], topic, p)
            _check(conns.name, "end", latest[(p, -1)][0], topic, p)
            start, end = earliest[(p, -1)][1], latest[(p, -1)][1]
            out[p] = Bounds(start, max(start, end))
            if end > start:
                probe.append((p, end - 1))
        if probe:
            fetched = _probe(conns, leader, topic).get_many(probe)
            for p, off in probe:
                f = fetched[(p, off)]
                if f is None or f.error_code or f.high_watermark < 0:
                    continue  # keep the ListOffsets answer
                start = f.log_start_offset if f.log_start_offset >= 0 else out[p].log_start
                out[p] = Bounds(start, max(start, f.high_watermark))
    return out


def read_log_ends(
    conns: Connections, meta: MetadataCache, topic: str, partitions: list[int]
) -> dict[int, int]:
    """The log end offset of each partition: where the next append lands.

    A consumer's view (the high watermark) trails it while an append is not yet replicated
    (an acks=all append that timed out, or whose client died). ListOffsets(latest) as the
    debug replica answers with the log end; since any replica may answer that, each request
    carries the leader epoch from metadata, so only the current leader does. Brokers that
    answer otherwise (Tansu: the last batch's base offset + 1) never report less than the
    high watermark's truth, so callers take the larger of the two."""
    out: dict[int, int] = {}
    by_leader, epochs = _by_leader(meta, topic, partitions)
    for leader, parts in by_leader.items():
        keys = [(p, epochs.get(p, -1)) for p in parts]
        answers = _list_offsets(conns, leader, topic, LATEST, DEBUG_REPLICA).get_many(keys)
        for p, key in zip(parts, keys, strict=True):
            code, offset = answers[key]
            _check(conns.name, "log end", code, topic, p)
            out[p] = offset
    return out


class BoundsReader:
    """A cluster's partition bounds, waiting out what Kafka's clients wait out: a leader
    election, an append not yet on every in-sync replica."""

    def __init__(self, conns: Connections, meta: MetadataCache) -> None:
        self.name = conns.name
        self._conns = conns
        self._meta = meta

    def bounds(self, topic: str, partitions: list[int]) -> dict[int, Bounds]:
        """Log start and high watermark of each partition (``read_bounds``).

        A leader election under way (``ELECTION_CODES``: e.g. a broker that restarted and
        does not lead its partitions yet) is waited out with fresh metadata for up to
        ``BOUNDS_ELECTION_WAIT_S``, as Kafka's clients do, so a run that starts during one
        does not take the cluster for unreachable."""
        return retry_on(
            lambda: read_bounds(self._conns, self._meta, topic, partitions),
            Backoff(0.1, 1.0, deadline=BOUNDS_ELECTION_WAIT_S),
            lambda e: isinstance(e, BrokerError) and e.error_code in ELECTION_CODES,
            again=lambda _e: self._meta.metadata(refresh=True),
        )

    def log_ends(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The log end offset of each partition (``read_log_ends``)."""
        return read_log_ends(self._conns, self._meta, topic, partitions)

    def bounds_and_log_ends(
        self, topic: str, partitions: list[int]
    ) -> dict[int, tuple[Bounds, int]]:
        """Each partition's bounds (log start, high watermark) and its log end offset, at
        least the high watermark: two requests per leader, for all the partitions at once."""
        bounds = self.bounds(topic, partitions)
        ends = self.log_ends(topic, partitions)
        return {p: (bounds[p], max(bounds[p].end, ends[p])) for p in partitions}

    def bounds_for_append(self, topic: str, partition: int, *, wait: float) -> Bounds:
        """The partition's log start and log END, where the next append lands, once its high
        watermark has reached the log end.

        An append that is in the leader's log but not yet replicated (HW < LEO) would put the
        next append at the log end, not at the high watermark a consumer sees, and can still be
        truncated by a leader change: wait up to ``wait`` seconds for it to be replicated, then
        give up with a retriable ``UnreplicatedError``."""
        asked = False

        def attempt() -> tuple[bool, tuple[Bounds, int]]:
            nonlocal asked
            if asked:
                self._meta.metadata(refresh=True)  # the leader may have moved meanwhile
            asked = True
            b, leo = self.bounds_and_log_ends(topic, [partition])[partition]
            return leo == b.end, (b, leo)

        b, leo = retry_until(attempt, Backoff(0.2, 2.0, deadline=wait))
        if leo != b.end:
            raise UnreplicatedError(
                f"the high watermark {b.end} is below the log end {leo}: an append is in "
                f"the leader's log but not on every in-sync replica after {wait:g}s (an "
                "acks=all append that timed out, a killed run, or replicas out of sync); "
                "not appending until it is",
                cluster=self.name,
                topic=topic,
                partition=partition,
                offset=b.end,
            )
        return b

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The partition's last stable offset (ListOffsets LATEST at read_committed, from its
        leader): every transaction that begins below it has its marker in the log."""
        for attempt in range(2):
            conn = self._conns.broker_conn(self._meta.leader(topic, partition))
            code, offset = conn.list_offsets(topic, [partition], LATEST, isolation_level=1)[
                partition
            ]
            if code in ELECTION_CODES and attempt == 0:
                self._meta.metadata(refresh=True)
                continue
            raise_for_code(
                code, f"the last stable offset of {topic}-{partition}", cluster=self.name
            )
            return offset
        raise AssertionError("unreachable")
