"""What ``partsync failback`` asks of an old primary beyond what a sync does: whether clients
still use it (groups with members, open transactions), how many bytes a topic holds, and
deleting a topic to create it again (no client can cut a log's tail on stock Kafka)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from partsync.errors import ClusterError, PartsyncError, TopicError
from partsync.io.broker_errors import broker_error
from partsync.io.cluster import Cluster
from partsync.io.group_offsets import GroupCoordinator
from partsync.io.probes import broker_config

__all__ = [
    "auto_create_topics",
    "delete_topic",
    "live_groups",
    "open_transactional_ids",
    "topic_bytes",
    "topic_overrides",
]

log = logging.getLogger(__name__)

_UNKNOWN_TOPIC = 3
_AUTO_CREATE = "auto.create.topics.enable"
# Transactions a coordinator has not finished: Ongoing (a producer is in one), Prepare* (its
# markers are being written: it settles by itself).
UNFINISHED = ["Ongoing", "PrepareCommit", "PrepareAbort"]


def live_groups(cluster: Cluster, ignore: Iterable[str] = ()) -> tuple[dict[str, int], list[str]]:
    """(groups with live members by count, groups whose coordinator would not say): every
    group each broker lists (ListGroups), described by its coordinator (DescribeGroups, and
    ConsumerGroupDescribe for a KIP-848 group, which DescribeGroups reports as Dead)."""
    skip = set(ignore)
    groups: set[str] = set()
    for conn in cluster.conns.each_broker():
        if not conn.supports("ListGroups"):
            raise ClusterError(
                "the broker does not offer ListGroups: whether consumer groups use the "
                "cluster cannot be seen",
                cluster=cluster.name,
            )
        code, listed = conn.list_groups()
        if code:
            raise broker_error(code, "listing the consumer groups", cluster=cluster.name)
        groups |= listed
    live: dict[str, int] = {}
    unknown: list[str] = []
    for g in sorted(groups - skip):
        try:
            coord = GroupCoordinator(cluster, g)
        except PartsyncError as e:
            log.debug("group %s on %s: %s", g, cluster.name, e)
            unknown.append(g)
            continue
        try:
            d = coord.describe()
        except PartsyncError as e:
            log.debug("group %s on %s: %s", g, cluster.name, e)
            unknown.append(g)
            continue
        finally:
            coord.close()
        if d.error_code:
            unknown.append(g)
        elif d.members:
            live[g] = d.members
    return live, unknown


def open_transactional_ids(cluster: Cluster) -> list[str]:
    """The transactional ids the cluster's coordinators list as not finished (ListTransactions
    on every broker; empty where a broker does not offer it)."""
    try:
        return sorted(cluster.transactions.transactional_ids_in(UNFINISHED))
    except PartsyncError as e:
        log.debug("ListTransactions on %s: %s", cluster.name, e)
        return []


def topic_bytes(cluster: Cluster, topic: str, partitions: list[int]) -> dict[int, int | None]:
    """The bytes each partition's leader stores (DescribeLogDirs); None where not told."""
    out: dict[int, int | None] = dict.fromkeys(partitions)
    info = cluster.topic(topic)
    if info is None:
        return out
    for node in sorted({info.leaders[p] for p in partitions if p in info.leaders}):
        mine = [p for p in partitions if info.leaders.get(p) == node]
        try:
            conn = cluster.broker_conn(node)
            if not conn.supports("DescribeLogDirs"):
                continue
            sizes = conn.log_dir_sizes(topic, mine)
        except PartsyncError as e:
            log.debug("DescribeLogDirs on broker %d of %s: %s", node, cluster.name, e)
            continue
        for p in mine:
            out[p] = sizes.get(p)
    return out


def delete_topic(cluster: Cluster, topic: str, *, timeout: float = 60.0) -> None:
    """Delete ``topic`` and wait until the metadata no longer lists it. A topic already gone
    is fine (a rerun after a kill)."""
    conn = cluster.conns.any_broker()
    if not conn.supports("DeleteTopics"):
        raise TopicError(
            "the cluster does not offer DeleteTopics, needed to create the diverged topic again",
            cluster=cluster.name,
            topic=topic,
        )
    code, message = conn.delete_topic(topic, int(timeout * 1000))
    if code and code != _UNKNOWN_TOPIC:
        detail = f" ({message})" if message else ""
        raise broker_error(code, f"deleting topic{detail}", cluster=cluster.name, topic=topic)
    deadline = time.monotonic() + timeout
    while cluster.topic(topic, refresh=True) is not None:
        if time.monotonic() > deadline:
            raise TopicError(
                f"still listed {timeout:g}s after it was deleted", cluster=cluster.name, topic=topic
            )
        time.sleep(0.2)


def auto_create_topics(cluster: Cluster) -> bool | None:
    """Whether the brokers create a topic a client asks for that does not exist
    (``auto.create.topics.enable``, true by default), as the lowest broker reports it; None
    where it does not say."""
    value = broker_config(cluster, _AUTO_CREATE)
    return None if value is None else value.lower() == "true"


def topic_overrides(cluster: Cluster, topic: str) -> dict[str, str]:
    """The configs set on ``topic`` itself (not the broker defaults it inherits)."""
    return cluster.ask(lambda c: c.describe_topic_overrides(topic))
