"""A partition's bounds as one cluster reports them: log start and high watermark."""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from partsync._kafka import DEBUG_REPLICA, EARLIEST, LATEST, PROBE_WAIT_MS, error_name
from partsync.errors import BrokerError, TopicError
from partsync.plan.comparator import Bounds

if TYPE_CHECKING:
    from partsync.io.cluster import Cluster

__all__ = ["read_bounds", "read_log_ends"]


def read_bounds(cluster: Cluster, topic: str, partitions: list[int]) -> dict[int, Bounds]:
    """Log start and high watermark of each partition, one round of requests per leader.

    ListOffsets gives log start and an end; a small Fetch at end-1 confirms the high
    watermark (Tansu's ListOffsets(latest) returns the last batch's base offset + 1, and
    the Fetch response carries the true high watermark and log start on every broker).
    """
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
    out: dict[int, Bounds] = {}
    for leader, parts in by_leader.items():
        conn = cluster.broker_conn(leader)
        earliest = conn.list_offsets(topic, parts, EARLIEST)
        latest = conn.list_offsets(topic, parts, LATEST)
        probe = []
        for p in parts:
            for what, res in (("log start", earliest), ("end", latest)):
                code, _ = res.get(p, (-1, -1))
                if code:
                    raise BrokerError(
                        f"listing the {what} offset",
                        error_code=code,
                        error_name=error_name(code),
                        retriable=True,
                        cluster=cluster.name,
                        topic=topic,
                        partition=p,
                    )
            start, end = earliest[p][1], latest[p][1]
            out[p] = Bounds(start, max(start, end))
            if end > start:
                probe.append((p, end - 1, 1))
        if probe:
            fetched = conn.fetch(topic, probe, max_wait_ms=PROBE_WAIT_MS, min_bytes=1, max_bytes=1)
            for p, _off, _m in probe:
                f = fetched.get(p)
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
    info = cluster.topic(topic)
    if info is None:
        raise TopicError("topic does not exist", cluster=cluster.name, topic=topic)
    by_leader: dict[int, list[int]] = defaultdict(list)
    for p in partitions:
        by_leader[info.leaders[p]].append(p)
    out: dict[int, int] = {}
    for leader, parts in by_leader.items():
        answers = cluster.broker_conn(leader).list_offsets(
            topic, parts, LATEST, replica_id=DEBUG_REPLICA,
            leader_epochs={p: info.leader_epochs.get(p, -1) for p in parts},
        )  # fmt: skip
        for p in parts:
            code, offset = answers.get(p, (-1, -1))
            if code:
                raise BrokerError(
                    "listing the log end offset",
                    error_code=code,
                    error_name=error_name(code),
                    retriable=True,
                    cluster=cluster.name,
                    topic=topic,
                    partition=p,
                )
            out[p] = offset
    return out
