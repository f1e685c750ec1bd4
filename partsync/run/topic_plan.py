"""What a sync plan holds, apart from how it is made (``run.planner``) or applied
(``run.topic_changes``): the request (``SyncRequest``), each topic's plan (``TopicPlan``) with the
topic change it may call for (``TopicCreation``, ``TopicGrowth``), and the results of partitions a
plan leaves nothing to copy for. Both steps and the tasks that run a plan import these, so they
live below all of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from partsync.config import ClusterRef
from partsync.copy.options import CopyOptions
from partsync.errors import ClusterError
from partsync.plan.acls import AclOptions
from partsync.plan.comparator import Condition, PartitionPlan, PlanPolicy
from partsync.plan.results import PartitionResult, Status, TopicResult
from partsync.plan.topic_configs import ConfigPolicy
from partsync.plan.topic_rules import LocalTopicRules
from partsync.plan.topic_select import PARTSYNC_RECORDS, TopicSelection

__all__ = [
    "SyncRequest",
    "TopicCreation",
    "TopicGrowth",
    "TopicPlan",
    "located",
    "uncopied_result",
    "whole_topic_results",
]


@dataclass(frozen=True)
class SyncRequest:
    topics: tuple[str, ...]
    sources: tuple[ClusterRef, ...]
    local: ClusterRef
    partitions: frozenset[int] | None = None
    create_missing: bool = False
    # Grow a local topic whose sources have more partitions (CreatePartitions) rather than
    # refuse it.
    add_partitions: bool = True
    policy: PlanPolicy = PlanPolicy()
    options: CopyOptions = CopyOptions()
    # --topic-pattern / --exclude: ``topics`` are what ``resolve_topics`` found on the sources.
    selection: TopicSelection | None = None
    # --sync-configs: the local topics' followed configs are set as the sources have them
    # (once per run; a follower at every topic check). ``config_policy`` says which follow,
    # also for a topic --create-missing creates.
    sync_configs: bool = False
    config_policy: ConfigPolicy = ConfigPolicy()
    # --sync-acls / --read-only: the mirrors' ACLs (``run.acl_sync``).
    acls: AclOptions = AclOptions()

    @property
    def own_records(self) -> frozenset[str]:
        """partsync's record topics, which a pattern never selects (the ACL record's name may
        be configured)."""
        return PARTSYNC_RECORDS | {self.acls.record_topic}

    @property
    def job_topics(self) -> tuple[str, ...]:
        """What names the job (its default group): the selection as given when it has
        patterns, so runs that resolve to different topics still meet in one group."""
        if self.selection is not None and self.selection.by_pattern:
            return (self.selection.describe(),)
        return self.topics


@dataclass(frozen=True)
class TopicCreation:
    """The apply step a plan calls for: create the local topic with ``partitions`` partitions and
    identity-preserving configs derived from ``source``'s."""

    partitions: int
    source: str


@dataclass(frozen=True)
class TopicGrowth:
    """The apply step a plan calls for when the sources gained partitions: grow the local topic
    from ``current`` to ``partitions`` (the new ones start empty at offset 0, like theirs)."""

    current: int
    partitions: int


@dataclass(frozen=True)
class TopicPlan:
    topic: str
    partitions: tuple[PartitionPlan, ...]
    rules: LocalTopicRules = LocalTopicRules()
    warnings: tuple[str, ...] = ()
    refused: str | None = None  # whole-topic refusal (unsafe)
    error: str | None = None  # whole-topic failure (e.g. topic missing everywhere)
    create: TopicCreation | None = None
    grow: TopicGrowth | None = None
    # Sources that did not answer: the run cannot tell whether they are ahead.
    unreachable: tuple[str, ...] = ()
    # Each source's topic id where its broker says (Metadata v10+): a follower that sees one
    # change knows the topic was deleted and created again, and stops appending from it.
    topic_ids: tuple[tuple[str, str], ...] = ()
    # When this process started reading the bounds the plan holds (``time.monotonic()``).
    planned_at: float | None = None
    # --sync-configs on ``plan``: the followed configs where the local topic differs from its
    # source, key -> (source's value, local value).
    config_drift: tuple[tuple[str, str, str | None], ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "refused": self.refused,
            "error": self.error,
            "warnings": list(self.warnings),
            "unreachable": list(self.unreachable),
            "grow": None
            if self.grow is None
            else {"from": self.grow.current, "to": self.grow.partitions},
            "partitions": [p.to_dict() for p in self.partitions],
            **(
                {"config_drift": {k: {"source": v, "local": lv} for k, v, lv in self.config_drift}}
                if self.config_drift
                else {}
            ),
        }


def located(plan: PartitionPlan, local: str) -> PartitionPlan:
    """A refusal's reason says where, like every PartsyncError: the local cluster, topic,
    partition and the local log end, the offset that could not be written."""
    where = (
        f"cluster {local}, topic {plan.topic} partition {plan.partition}, offset {plan.local.end}"
    )
    return dataclasses.replace(plan, reason=f"{where}: {plan.reason}")


def whole_topic_results(tp: TopicPlan) -> TopicResult:
    """Results for a topic refused or failed as a whole (every planned partition, or one row)."""
    status = Status.UNSAFE if tp.refused else Status.ERROR
    reason = tp.refused or tp.error
    parts = [
        PartitionResult(
            tp.topic,
            plan.partition,
            status,
            plan.local.end,
            plan.local.end,
            plan.target_end,
            reason=reason,
        )
        for plan in tp.partitions
    ]
    if not parts:
        parts.append(PartitionResult(tp.topic, -1, status, 0, 0, 0, reason=reason))
    return TopicResult(tp.topic, tuple(parts), tp.warnings, tp.unreachable)


def uncopied_result(plan: PartitionPlan) -> PartitionResult:
    """A partition nothing was copied for, at its planned bounds: in-sync, unsafe with the
    plan's reason, or a (retriable) error when a source that did not answer could overturn a
    refusal. A behind partition gets its status from the caller (``with_status``)."""
    r = PartitionResult(
        plan.topic,
        plan.partition,
        Status.IN_SYNC,
        plan.local.end,
        plan.local.end,
        plan.target_end,
        reason=plan.reason,
    )
    if plan.condition is Condition.UNSAFE:
        return r.with_status(Status.UNSAFE, plan.reason)
    if plan.condition is Condition.UNKNOWN:
        err = ClusterError(
            plan.reason or "a source did not answer",
            topic=plan.topic,
            partition=plan.partition,
            offset=plan.local.end,
        )
        return r.with_status(Status.ERROR, plan.reason, err)
    return r
