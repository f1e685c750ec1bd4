"""Plan, then apply: read bounds on every cluster and plan each partition (``plan_topics``,
read-only), and the one write a plan may call for before copying: creating a missing local topic
or growing a local topic whose sources gained partitions (``apply_topic_changes``).
``partsync plan`` prints the plans; ``partsync sync`` applies and executes them.

Topic-wide refusals (partition counts differ, a local topic config that would make the broker
rewrite batches) are decided here, before any task runs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from partsync.config import ClusterRef
from partsync.copy.boundary import checked_in_sync, checked_sources_agree, local_for_plan
from partsync.copy.options import CopyOptions
from partsync.copy.producer import slot_partition
from partsync.errors import ClusterError, PartsyncError, TopicError
from partsync.io.cluster import Cluster, TopicInfo
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import (
    Bounds,
    Condition,
    PartitionPlan,
    PlanPolicy,
    plan_partition,
    unknown_without,
)
from partsync.plan.results import PartitionResult, Status, TopicResult
from partsync.plan.selection import select
from partsync.plan.topic_rules import LocalTopicRules, create_configs, rules_from
from partsync.plan.topic_select import TopicSelection, select_topics

__all__ = [
    "SyncRequest",
    "TopicCreation",
    "TopicGrowth",
    "TopicPlan",
    "apply_topic_changes",
    "plan_topics",
    "resolve_topics",
    "uncopied_result",
    "whole_topic_results",
]


log = logging.getLogger(__name__)


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
        }


@dataclass
class _SourceRead:
    info: TopicInfo | None = None
    bounds: dict[int, Bounds] | None = None
    error: ClusterError | None = None  # unreachable: no metadata, or (with ``info``) no bounds


@dataclass
class _LocalRead:
    info: TopicInfo | None = None
    configs: dict[str, str] | None = None
    bounds: dict[int, Bounds] | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    # Reading the settings or bounds failed: raised where they are used, after the checks of
    # the partition counts (which need the metadata only).
    error: ClusterError | None = None


def _wanted(count: int, wanted: frozenset[int] | None) -> list[int]:
    return [p for p in (sorted(wanted) if wanted is not None else range(count)) if p < count]


def _read_source(c: Cluster, topic: str, wanted: frozenset[int] | None) -> _SourceRead:
    """The topic on one source: its partitions and the bounds of the selected ones."""
    out = _SourceRead()
    try:
        out.info = c.topic(topic)
        if out.info is not None:
            out.bounds = c.bounds(topic, _wanted(out.info.partitions, wanted))
    except ClusterError as e:
        out.error = e
    return out


def _read_local(local: Cluster, topic: str, wanted: frozenset[int] | None) -> _LocalRead:
    """The topic on the local cluster: its partitions, settings and the selected ones' bounds
    (raises ``ClusterError`` where the local cluster cannot be read)."""
    out = _LocalRead(local.topic(topic))
    if out.info is not None:
        try:
            out.configs, out.warnings = local.topic_configs(topic)
            have = _wanted(out.info.partitions, wanted)
            out.bounds = _local_bounds(local, topic, have, out.warnings)
        except ClusterError as e:
            out.error = e
    return out


def _plan_topic(
    topic: str,
    req: SyncRequest,
    pool: ClusterPool,
    aborted: frozenset[tuple[str, int]] = frozenset(),
) -> TopicPlan:
    started = time.monotonic()  # no bound below is older than this
    local = pool.get(req.local)
    warnings: list[str] = []
    unreachable: list[str] = []
    counts: dict[str, int] = {}
    ids: list[tuple[str, str]] = []
    src_bounds: dict[str, dict[int, Bounds]] = {}
    # Every cluster read at once (the local cluster's and each source's round trips and
    # metadata overlap): the sources' partitions are not known before they answer, so each
    # side reads the selected partitions it has; the comparison below uses the common ones.
    wanted = req.partitions
    with ThreadPoolExecutor(1 + len(req.sources), thread_name_prefix="plan") as ex:
        local_read = ex.submit(_read_local, local, topic, wanted)
        src_reads = {
            ref.name: ex.submit(_read_source, pool.get(ref), topic, wanted) for ref in req.sources
        }
        reads = {name: f.result() for name, f in src_reads.items()}
        local_failed = local_read.exception()  # raised below, where it was before reads overlapped
    for name, r in reads.items():
        if r.info is None and r.error is None:
            warnings.append(f"topic {topic} does not exist on source {name}")
            continue
        if r.info is not None:  # its partitions count even where its bounds could not be read
            counts[name] = r.info.partitions
            if r.info.topic_id is not None:
                ids.append((name, r.info.topic_id))
        if r.error is not None:
            warnings.append(f"source {name} unreachable, planning without it: {r.error.reason}")
            unreachable.append(name)
        else:
            assert r.bounds is not None
            src_bounds[name] = r.bounds
    if not counts:
        names = ", ".join(r.name for r in req.sources)
        return TopicPlan(
            topic,
            (),
            warnings=tuple(warnings),
            unreachable=tuple(unreachable),
            error=f"topic {topic} is not readable on any source ({names})",
        )
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{n}: {k}" for n, k in counts.items())
        return TopicPlan(
            topic,
            (),
            warnings=tuple(warnings),
            refused=f"partition counts differ between sources ({detail})",
        )
    count = next(iter(counts.values()))

    if local_failed is not None:
        raise local_failed
    lr = local_read.result()
    local_info = lr.info
    create = grow = None
    if local_info is None:
        if not req.create_missing:
            return TopicPlan(
                topic,
                (),
                warnings=tuple(warnings),
                error=(
                    f"topic {topic} does not exist on the local cluster {local.name} "
                    "(use --create-missing to create it with the sources' partition count)"
                ),
            )
        warnings.append(f"topic {topic} would be created on {local.name} with {count} partitions")
        create = TopicCreation(count, next(iter(counts)))
    elif local_info.partitions < count and req.add_partitions:
        grow = TopicGrowth(local_info.partitions, count)
        warnings.append(
            f"topic {topic} on {local.name} has {local_info.partitions} partitions, its sources "
            f"{count}: the local topic would grow to {count} (CreatePartitions) before the new "
            "partitions are copied"
        )
    elif local_info.partitions != count:
        hint = (
            " (sync grows it unless --no-add-partitions)"
            if local_info.partitions < count
            else ("; a local topic cannot shrink")
        )
        return TopicPlan(
            topic,
            (),
            warnings=tuple(warnings),
            refused=(
                f"partition counts differ: local {local.name} has {local_info.partitions}, "
                f"sources have {count}{hint}"
            ),
        )

    parts = select(count, req.partitions, topic=topic)
    if create is not None:
        local_bounds = {p: Bounds(0, 0) for p in parts}
        rules, refusal = LocalTopicRules(), None
    else:
        if lr.error is not None:
            raise lr.error
        assert lr.configs is not None and lr.bounds is not None
        warnings.extend(lr.warnings)
        rules, refusal = rules_from(lr.configs)
        have = [p for p in parts if grow is None or p < grow.current]
        local_bounds = {p: lr.bounds[p] for p in have}
        local_bounds.update({p: Bounds(0, 0) for p in parts if p not in local_bounds})
    if not src_bounds:
        return TopicPlan(
            topic,
            (),
            warnings=tuple(warnings),
            unreachable=tuple(unreachable),
            error=f"no source of topic {topic} answered",
        )

    plans = []
    for p in parts:
        sources = {name: b[p] for name, b in src_bounds.items()}
        local_b = local_bounds[p]
        if create is None and p in have:
            local_b = local_for_plan(local, topic, p, local_b, sources)
        plan = plan_partition(topic, p, local_b, sources, req.policy)
        if refusal is not None and plan.condition is Condition.BEHIND:
            plan = dataclasses.replace(
                plan, condition=Condition.UNSAFE, chunks=(), reason=refusal, serving=()
            )
        else:
            plan = unknown_without(plan, unreachable)
        if plan.condition is Condition.IN_SYNC and (topic, p) in aborted:
            srcs = {r.name: pool.get(r) for r in req.sources if r.name in plan.sources}
            plan = checked_in_sync(plan, srcs, local, req.options, rules)
        if plan.condition in (Condition.UNSAFE, Condition.UNKNOWN):
            plan = _located(plan, local.name)
        plans.append(plan)
    return TopicPlan(
        topic,
        tuple(plans),
        rules,
        tuple(warnings),
        create=create,
        grow=grow,
        unreachable=tuple(unreachable),
        topic_ids=tuple(ids),
        planned_at=started,
    )


def _local_bounds(
    local: Cluster, topic: str, parts: list[int], warnings: list[str]
) -> dict[int, Bounds]:
    """The local partitions' log start and log end (where the next append lands; a consumer's
    high watermark can trail it), with a warning where they differ."""
    hw = local.bounds(topic, parts)
    ends = local.log_ends(topic, parts)
    out = {}
    for p in parts:
        end = max(hw[p].end, ends[p])
        if end > hw[p].end:
            warnings.append(
                f"cluster {local.name}, topic {topic} partition {p}: the log end {end} is ahead "
                f"of the high watermark {hw[p].end} (an append not yet replicated); sync waits "
                "for it before appending"
            )
        out[p] = Bounds(hw[p].log_start, end)
    return out


def _located(plan: PartitionPlan, local: str) -> PartitionPlan:
    """A refusal's reason says where, like every PartsyncError: the local cluster, topic,
    partition and the local log end, the offset that could not be written."""
    where = (
        f"cluster {local}, topic {plan.topic} partition {plan.partition}, offset {plan.local.end}"
    )
    return dataclasses.replace(plan, reason=f"{where}: {plan.reason}")


def resolve_topics(req: SyncRequest, pool: ClusterPool) -> SyncRequest:
    """The request with its topic patterns resolved against the sources' topics (as listed
    now; a source that cannot be reached is left out with a warning, unless all are)."""
    sel = req.selection
    if sel is None:
        return req
    if not sel.by_pattern:
        return dataclasses.replace(req, topics=tuple(select_topics(sel, {})))
    listed: dict[str, list[str]] = {}
    error: ClusterError | None = None
    for ref in req.sources:
        try:
            listed[ref.name] = pool.get(ref).list_topics()
        except ClusterError as e:
            log.warning("listing the topics of %s: %s", ref.name, e)
            error = e
    if not listed and error is not None:
        raise error
    return dataclasses.replace(req, topics=tuple(select_topics(sel, listed)))


# A replayed transaction the local coordinator aborted, or is aborting (its timeout, or a
# fence): Kafka's TransactionState names, as ListTransactions filters them.
_ABORTED_STATES = ["PrepareAbort", "CompleteAbort", "PrepareEpochFence"]


def _aborted_replays(req: SyncRequest, pool: ClusterPool) -> frozenset[tuple[str, int]]:
    """The local partitions with a replay slot whose last transaction was aborted (one
    ListTransactions per local broker). Each such partition planned in sync has its last batch
    compared with the sources' (``checked_in_sync``): a transaction a run left open for the
    source's marker and the local coordinator aborted first ends the local log with an abort
    marker where the source has its commit marker, at the same end offset. A slot stays listed
    until it is used again or its transactional id expires (transactional.id.expiration.ms)."""
    if not req.options.replay_transactions:
        return frozenset()
    try:
        tids = pool.get(req.local).transactions.transactional_ids_in(_ABORTED_STATES)
    except PartsyncError as e:
        log.warning(
            "cluster %s: aborted replays not listed, in-sync ends unchecked: %s", req.local.name, e
        )
        return frozenset()
    wanted = set(req.topics)
    return frozenset(tp for t in tids if (tp := slot_partition(t)) and tp[0] in wanted)


def plan_topics(req: SyncRequest, pool: ClusterPool) -> list[TopicPlan]:
    """Plan every requested topic; reads only. Raises ``ClusterError`` when the local cluster is
    unreachable."""
    pool.watch((req.local, *req.sources), req.topics)
    aborted = _aborted_replays(req, pool)
    out = []
    for topic in req.topics:
        try:
            out.append(_plan_topic(topic, req, pool, aborted))
        except (TopicError, ClusterError) as e:
            if e.cluster == req.local.name and isinstance(e, ClusterError) and e.topic is None:
                raise
            out.append(TopicPlan(topic, (), error=str(e)))
    return out


def apply_topic_changes(
    req: SyncRequest, pool: ClusterPool, plans: list[TopicPlan]
) -> list[TopicPlan]:
    """Apply the plans' topic creations and growths on the local cluster, then plan those
    topics again (their local bounds and rules are real now). Plans without either are returned
    as they are."""
    local = pool.get(req.local)
    out = []
    for tp in plans:
        if (tp.create is None and tp.grow is None) or tp.refused or tp.error:
            out.append(tp)
            continue
        warnings: tuple[str, ...] = ()
        if (create := tp.create) is not None:
            tp = _agreed(tp, req, pool)
            if not any(p.condition is Condition.BEHIND for p in tp.partitions):
                # Nothing would be copied into it: creating it would only leave a topic behind.
                kept = (
                    f"topic {tp.topic} was not created on {local.name}: no partition "
                    "can be copied into it"
                )
                out.append(dataclasses.replace(tp, warnings=(*tp.warnings, kept)))
                continue
            src_cfg, w = pool.get(_ref(req, create.source)).topic_configs(tp.topic)
            local.create_topic(tp.topic, create.partitions, create_configs(src_cfg))
            warnings = tuple(w)
        elif tp.grow is not None:
            local.grow_topic(tp.topic, tp.grow.partitions)
            grew = (
                f"topic {tp.topic} on {local.name} grew from {tp.grow.current} to "
                f"{tp.grow.partitions} partitions"
            )
            warnings = (grew,)
        again = plan_topics(dataclasses.replace(req, topics=(tp.topic,)), pool)[0]
        out.append(dataclasses.replace(again, warnings=warnings + again.warnings))
    return out


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
                plan = _located(plan, local.name)
        plans.append(plan)
    return dataclasses.replace(tp, partitions=tuple(plans))


def _ref(req: SyncRequest, name: str) -> ClusterRef:
    return next(r for r in req.sources if r.name == name)


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
