"""A partition's bounds as one cluster reports them: log start and high watermark."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from partsync._kafka import (
    CONSUMER_REPLICA,
    DEBUG_REPLICA,
    EARLIEST,
    LATEST,
    PROBE_WAIT_MS,
    FetchedPartition,
    error_name,
)
from partsync.errors import BrokerError, TopicError
from partsync.io.coalesce import Coalescer
from partsync.plan.comparator import Bounds

if TYPE_CHECKING:
    from partsync.io.cluster import Cluster

__all__ = ["read_bounds", "read_log_ends"]


def _by_leader(cluster: Cluster, topic: str, partitions: list[int]) -> dict[int, list[int]]:
    info = cluster.topic(topic)
    if info is None:
        raise TopicError("topic does not exist", cluster=cluster.name, topic=topic)
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in partitions:
        if p not in info.leaders:
            raise TopicError(
                "partition does not exist", cluster=cluster.name, topic=topic, partition=p
            )
        by_leader[info.leaders[p]].append(p)
    return by_leader


def _list_offsets(
    cluster: Cluster, leader: int, topic: str, timestamp: int, replica_id: int = CONSUMER_REPLICA
) -> Coalescer[int, tuple[int, int]]:
    """{partition: (error code, offset)} from the leader, one request for every thread asking
    at the same time (``io.coalesce``). The debug replica's requests carry each partition's
    leader epoch, so that only the current leader answers."""

    def ask(parts: list[int]) -> dict[int, tuple[int, int]]:
        epochs = None
        if replica_id == DEBUG_REPLICA:
            info = cluster.topic(topic)
            known = info.leader_epochs if info is not None else {}
            epochs = {p: known.get(p, -1) for p in parts}
        conn = cluster.broker_conn(leader)
        answers = conn.list_offsets(topic, parts, timestamp, replica_id=replica_id,
                                    leader_epochs=epochs)  # fmt: skip
        return {p: answers.get(p, (-1, -1)) for p in parts}  # a partition left out: an error

    return cluster.coalescer(("ListOffsets", leader, topic, timestamp, replica_id), ask)


def _probe(
    cluster: Cluster, leader: int, topic: str
) -> Coalescer[tuple[int, int], FetchedPartition | None]:
    """The answer to a one-byte Fetch at (partition, offset), coalesced like ``_list_offsets``
    (a partition asked at two offsets at once takes two requests: a Fetch names it once)."""

    def ask(keys: list[tuple[int, int]]) -> dict[tuple[int, int], FetchedPartition | None]:
        out: dict[tuple[int, int], FetchedPartition | None] = {}
        while keys:
            now: dict[int, int] = {}
            later = []
            for p, off in keys:
                if p in now:
                    later.append((p, off))
                else:
                    now[p] = off
            fetched = cluster.broker_conn(leader).fetch(
                topic, [(p, off, 1) for p, off in now.items()],
                max_wait_ms=PROBE_WAIT_MS, min_bytes=1, max_bytes=1,
            )  # fmt: skip
            for p, off in now.items():
                out[(p, off)] = fetched.get(p)
            keys = later
        return out

    return cluster.coalescer(("Probe", leader, topic), ask)


def _check(cluster: Cluster, what: str, code: int, topic: str, partition: int) -> None:
    if code:
        raise BrokerError(
            f"listing the {what} offset",
            error_code=code,
            error_name=error_name(code),
            retriable=True,
            cluster=cluster.name,
            topic=topic,
            partition=partition,
        )


def read_bounds(cluster: Cluster, topic: str, partitions: list[int]) -> dict[int, Bounds]:
    """Log start and high watermark of each partition, one round of requests per leader
    (shared with every other thread reading bounds from that leader at the same time).

    ListOffsets gives log start and an end; a small Fetch at end-1 confirms the high
    watermark (Tansu's ListOffsets(latest) returns the last batch's base offset + 1, and
    the Fetch response carries the true high watermark and log start on every broker).
    """
    out: dict[int, Bounds] = {}
    for leader, parts in _by_leader(cluster, topic, partitions).items():
        earliest = _list_offsets(cluster, leader, topic, EARLIEST).get_many(parts)
        latest = _list_offsets(cluster, leader, topic, LATEST).get_many(parts)
        probe = []
        for p in parts:
            _check(cluster, "log start", earliest[p][0], topic, p)
            _check(cluster, "end", latest[p][0], topic, p)
            start, end = earliest[p][1], latest[p][1]
            out[p] = Bounds(start, max(start, end))
            if end > start:
                probe.append((p, end - 1))
        if probe:
            fetched = _probe(cluster, leader, topic).get_many(probe)
            for p, off in probe:
                f = fetched[(p, off)]
                if f is None or f.error_code or f.high_watermark < 0:
                    continue  # keep the ListOffsets answer
                start = f.log_start_offset if f.log_start_offset >= 0 else out[p].log_start
                out[p] = Bounds(start, max(start, f.high_watermark))
    return out


def read_log_ends(cluster: Cluster, topic: str, partitions: list[int]) -> dict[int, int]:
    """The log end offset of each partition: where the next append lands.

    A consumer's view (the high watermark) trails it while an append is not yet replicated
    (an acks=all append that timed out, or whose client died). ListOffsets(latest) as the
    debug replica answers with the log end; since any replica may answer that, each request
    carries the leader epoch from metadata, so only the current leader does. Brokers that
    answer otherwise (Tansu: the last batch's base offset + 1) never report less than the
    high watermark's truth, so callers take the larger of the two."""
    out: dict[int, int] = {}
    for leader, parts in _by_leader(cluster, topic, partitions).items():
        answers = _list_offsets(cluster, leader, topic, LATEST, DEBUG_REPLICA).get_many(parts)
        for p in parts:
            code, offset = answers[p]
            _check(cluster, "log end", code, topic, p)
            out[p] = offset
    return out
