"""Applying a plan's topic changes, the one write a plan may call for before copying: creating a
missing local topic (``--create-missing``) or growing a local topic whose sources gained
partitions (CreatePartitions); then, when asked, the topics' configs and ACLs as the sources
have them (``--sync-configs``, ``--sync-acls``). Planning (``run.planner``) only reads; this step writes, then has
the changed topics planned again, since their local bounds and rules are real only now.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from partsync.config import ClusterRef
from partsync.copy.boundary import checked_sources_agree
from partsync.errors import ClusterError, PartsyncError, UnsafeError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Condition
from partsync.plan.topic_configs import mirror_configs
from partsync.run.acl_sync import with_acls
from partsync.run.topic_configs import sync_configs
from partsync.run.topic_plan import SyncRequest, TopicPlan, located

__all__ = ["Replan", "apply_topic_changes"]

# Plans the request's topics again: ``run.planner.plan_topics``, passed in because the planner
# offers this step under its own name and importing it back would make a cycle.
Replan = Callable[[SyncRequest, ClusterPool], list[TopicPlan]]


def apply_topic_changes(
    req: SyncRequest,
    pool: ClusterPool,
    plans: list[TopicPlan],
    replan: Replan,
    *,
    follow: bool = False,
) -> list[TopicPlan]:
    """Apply the plans' topic creations and growths on the local cluster, then plan those
    topics again (their local bounds and rules are real now). Plans without either are returned
    as they are. A one-shot run creates no topic it would copy nothing into (it would only
    leave a topic behind); a follower (``follow``) creates it, to follow it from its start."""
    local = pool.get(req.local)
    out = []
    for tp in plans:
        if req.sync_configs and tp.create is None and not tp.refused and not tp.error:
            tp = _configs_synced(req, pool, tp)
        if (tp.create is None and tp.grow is None) or tp.refused or tp.error:
            out.append(tp)
            continue
        warnings: tuple[str, ...] = ()
        if (create := tp.create) is not None:
            tp = _agreed(tp, req, pool)
            if not follow and not any(p.condition is Condition.BEHIND for p in tp.partitions):
                # Nothing would be copied into it: creating it would only leave a topic behind.
                kept = (
                    f"topic {tp.topic} was not created on {local.name}: no partition "
                    "can be copied into it"
                )
                out.append(dataclasses.replace(tp, warnings=(*tp.warnings, kept)))
                continue
            src_cfg, w = _source_configs(pool.get(_ref(req, create.source)), tp.topic)
            local.create_topic(
                tp.topic, create.partitions, mirror_configs(req.config_policy, src_cfg)
            )
            warnings = tuple(w)
        elif tp.grow is not None:
            local.grow_topic(tp.topic, tp.grow.partitions)
            grew = (
                f"topic {tp.topic} on {local.name} grew from {tp.grow.current} to "
                f"{tp.grow.partitions} partitions"
            )
            warnings = (grew,)
        again = replan(dataclasses.replace(req, topics=(tp.topic,)), pool)[0]
        out.append(dataclasses.replace(again, warnings=warnings + again.warnings))
    if req.acls.active:
        out = with_acls(req.acls, req.sources, req.local, pool, out)
    return out


def _source_configs(source: Cluster, topic: str) -> tuple[dict[str, str | None], list[str]]:
    """Every config the source reports for ``topic``; where it answers no DescribeConfigs
    for all of them (a Tansu quirk), the identity configs ``topic_configs`` falls back to."""
    try:
        cfg: dict[str, str | None] = source.all_topic_configs(topic)
    except ClusterError:
        found, warnings = source.topic_configs(topic)
        return dict(found), warnings
    # A broker that reports only the keys set on a topic (Tansu): the local cluster's defaults.
    missing = [k for k in ("cleanup.policy", "max.message.bytes") if cfg.get(k) is None]
    if not missing:
        return cfg, []
    why = (
        f"cluster {source.name}: topic {topic} does not report {', '.join(missing)}; the "
        "local topic is created with the local cluster's defaults for them"
    )
    return cfg, [why]


def _configs_synced(req: SyncRequest, pool: ClusterPool, tp: TopicPlan) -> TopicPlan:
    """--sync-configs: the local topic's drifted configs set as its source has them (a warning
    says what was set), or the topic refused when its source can no longer be mirrored."""
    try:
        drift = sync_configs(req, pool, tp.topic)
    except UnsafeError as e:
        return dataclasses.replace(tp, refused=e.reason)
    except PartsyncError as e:
        msg = f"topic {tp.topic}: its configs could not be set as the source has them: {e}"
        return dataclasses.replace(tp, warnings=(*tp.warnings, msg))
    if drift is None or not drift.changes:
        return tp
    msg = f"topic {tp.topic} on {req.local.name}: set {drift.describe()}, as {drift.source} has it"
    return dataclasses.replace(tp, warnings=(*tp.warnings, msg))


def _agreed(tp: TopicPlan, req: SyncRequest, pool: ClusterPool) -> TopicPlan:
    """``tp`` with each partition whose serving sources disagree refused, as its copy would
    refuse it first thing (``checked_sources_agree``), before its local topic is created."""
    local = pool.get(req.local)
    plans = []
    for plan in tp.partitions:
        if plan.condition is Condition.BEHIND:
            srcs = {r.name: pool.get(r) for r in req.sources if r.name in plan.serving}
            plan = checked_sources_agree(plan, srcs, local, req.options, tp.rules)
            if plan.condition is not Condition.BEHIND:
                plan = located(plan, local.name)
        plans.append(plan)
    return dataclasses.replace(tp, partitions=tuple(plans))


def _ref(req: SyncRequest, name: str) -> ClusterRef:
    return next(r for r in req.sources if r.name == name)
