"""``partsync status``: a link's state per topic, read from the clusters (plans, the newest data
timestamps of partitions behind, config drift, whether the job's group has members). Reads
only; ``plan.link_status`` decides the states."""

from __future__ import annotations

import logging

from partsync.errors import PartsyncError, TopicError
from partsync.io.cluster import Cluster
from partsync.io.group_offsets import GroupCoordinator
from partsync.io.link_records import read_promotions
from partsync.io.pool import ClusterPool
from partsync.io.reader import newest_data_timestamp
from partsync.plan.comparator import Condition, PartitionPlan
from partsync.plan.link_status import (
    PartitionLag,
    TopicState,
    TopicStatus,
    lag_seconds,
    topic_state,
)
from partsync.plan.topic_select import select_topics
from partsync.run.planner import SyncRequest, TopicPlan, plan_topics
from partsync.run.topic_configs import ConfigDrift, config_drifts

__all__ = ["group_members", "link_status"]

log = logging.getLogger(__name__)


def group_members(local: Cluster, group: str) -> int | None:
    """How many members the job's group has now; None if its coordinator cannot say."""
    try:
        g = GroupCoordinator(local, group)
    except PartsyncError as e:
        log.debug("group %s on %s: %s", group, local.name, e)
        return None
    try:
        d = g.describe()
    except PartsyncError as e:
        log.debug("group %s on %s: %s", group, local.name, e)
        return None
    finally:
        g.close()
    return None if d.error_code else d.members


def _stamp(cluster: Cluster, topic: str, p: int, log_start: int, end: int) -> int | None:
    conn = cluster.connect_leader(topic, p)
    try:
        return newest_data_timestamp(conn, cluster.name, topic, p, log_start, end)
    except PartsyncError as e:
        log.debug("newest data of %s-%d on %s: %s", topic, p, cluster.name, e)
        return None
    finally:
        cluster.release(conn)


def _partition(plan: PartitionPlan, pool: ClusterPool, req: SyncRequest) -> PartitionLag:
    cond = plan.condition
    behind = max(0, plan.target_end - plan.local.end) if cond is Condition.BEHIND else 0
    seconds: float | None = 0.0
    if behind:
        name = max(plan.sources, key=lambda n: plan.sources[n].end)
        src = next(r for r in req.sources if r.name == name)
        b = plan.sources[name]
        source_ms = _stamp(pool.get(src), plan.topic, plan.partition, b.log_start, b.end)
        local = pool.get(req.local)
        mirror_ms = _stamp(local, plan.topic, plan.partition, plan.local.log_start, plan.local.end)
        seconds = lag_seconds(source_ms, mirror_ms, behind)
    elif cond is not Condition.IN_SYNC:
        seconds = None
    return PartitionLag(plan.partition, cond.value, behind, seconds, plan.reason)


def _topic(
    tp: TopicPlan,
    pool: ClusterPool,
    req: SyncRequest,
    runs: bool | None,
    drift: ConfigDrift | None,
) -> TopicStatus:
    if tp.refused or tp.error:
        return TopicStatus(
            tp.topic,
            TopicState.FAILED,
            reason=tp.refused or tp.error,
            refused=bool(tp.refused),
        )
    parts = tuple(_partition(p, pool, req) for p in tp.partitions)
    keys = () if drift is None else tuple(sorted(drift.changes))
    refused = drift.refused if drift else None
    state = topic_state((p.condition for p in parts), failed=bool(refused), followed=runs)
    return TopicStatus(tp.topic, state, parts, keys, refused, refused=bool(refused))


def _gone(req: SyncRequest, pool: ClusterPool) -> list[str]:
    """Local topics the job selects that no source holds (any more)."""
    sel = req.selection
    try:
        local = pool.get(req.local).list_topics()
    except PartsyncError:
        return []
    if sel is None:
        return []
    try:
        mirrored = select_topics(sel, {req.local.name: local}, req.own_records)
    except TopicError:
        return []
    held: set[str] = set()
    for ref in req.sources:
        try:
            held.update(pool.get(ref).list_topics())
        except PartsyncError:
            return []  # a source that does not answer may hold them: not gone as far as known
    return [t for t in mirrored if t not in held and t != req.acls.record_topic]


def link_status(req: SyncRequest, pool: ClusterPool, group: str | None = None) -> list[TopicStatus]:
    """Every topic of the job (``req`` resolved against the sources), then the local mirrors of
    topics no source holds; ``group``: the job's group, to tell ``paused`` from ``mirroring``."""
    members = group_members(pool.get(req.local), group) if group else None
    runs = None if members is None else members > 0
    gone = set(_gone(req, pool))
    out = []
    promoted = read_promotions(pool.get(req.local)) or {}
    plans = plan_topics(req, pool)
    drifts, _failed = config_drifts(
        req, pool, {tp.topic: None for tp in plans if tp.partitions and not tp.error}
    )
    for tp in plans:
        if tp.topic in gone:
            continue
        if (p := promoted.get(tp.topic)) is not None:
            out.append(TopicStatus(tp.topic, TopicState.PROMOTED, reason=p.refusal()))
            continue
        out.append(_topic(tp, pool, req, runs, drifts.get(tp.topic)))
    for topic in sorted(gone):
        why = f"topic {topic} is on {req.local.name} but on none of the sources"
        out.append(TopicStatus(topic, TopicState.SOURCE_GONE, reason=why))
    return out
