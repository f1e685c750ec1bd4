"""Plan, then apply: read bounds on every cluster and plan each partition (``plan_topics``,
read-only), and the one write a plan may call for before copying: creating a missing local topic
or growing a local topic whose sources gained partitions (``apply_topic_changes``, done in
``run.topic_changes``; the plan's data types are in ``run.topic_plan``).
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
from partsync.copy.boundary import checked_in_sync, local_for_plan
from partsync.copy.producer import partsync_ids, slot_partition
from partsync.errors import ClusterError, PartsyncError, TopicError
from partsync.io.cluster import Cluster, TopicInfo
from partsync.io.foreign import with_foreign
from partsync.io.last_batches import batches_at
from partsync.io.link_records import read_promotions
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import (
    Bounds,
    Condition,
    PartitionPlan,
    plan_partition,
    unknown_without,
)
from partsync.plan.promotion import PROMOTIONS_TOPIC, Promotion
from partsync.plan.selection import select
from partsync.plan.topic_rules import LocalTopicRules, rules_from
from partsync.plan.topic_select import select_topics
from partsync.run.topic_changes import apply_topic_changes as _apply_topic_changes

# The plan's data types and the results of partitions it leaves nothing to copy for live in
# ``run.topic_plan`` (below the apply step, which uses them too); offered here as before.
from partsync.run.topic_plan import (
    SyncRequest,
    TopicCreation,
    TopicGrowth,
    TopicPlan,
    located,
    uncopied_result,
    whole_topic_results,
)
from partsync.wire.batch import Batch
from partsync.wire.digest import same_batch

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
        plans.append(plan)
    # Ends that agree are not yet the same history: someone else's write may have taken the
    # offset the source's next record has. Every in-sync partition's last batch is compared
    # with the sources' (one Fetch per leader; a partition whose batches differ, could not be
    # read that way, or may end in a replay the local coordinator aborted is compared alone).
    agree = _last_batches_agree(req, pool, topic, plans, exclude=aborted)
    for i, plan in enumerate(plans):
        if plan.condition is Condition.IN_SYNC and plan.partition not in agree:
            srcs = {r.name: pool.get(r) for r in req.sources if r.name in plan.sources}
            plan = checked_in_sync(plan, srcs, local, req.options, rules)
        if plan.condition is Condition.UNSAFE and create is None and refusal is None:
            plan = with_foreign(plan, local, partsync_ids(topic, plan.partition))
        if plan.condition in (Condition.UNSAFE, Condition.UNKNOWN):
            plan = located(plan, local.name)
        plans[i] = plan
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
    return dataclasses.replace(req, topics=tuple(select_topics(sel, listed, req.own_records)))


def _last_batches_agree(
    req: SyncRequest,
    pool: ClusterPool,
    topic: str,
    plans: list[PartitionPlan],
    *,
    exclude: frozenset[tuple[str, int]],
) -> set[int]:
    """The in-sync partitions whose last local batch every source holding that offset has too
    (the same digest: ``wire.digest``), read for all of them at once (``io.last_batches``), and
    those with nothing to compare (an empty local log, no source holding that offset). Every
    other in-sync partition is compared alone (``checked_in_sync``), which says what differs or
    why it could not be read: one whose batches differ or were not in the answer, one in
    ``exclude``, or all of them when a cluster cannot be read this way."""
    agree: set[int] = set()
    wanted: dict[int, tuple[int, tuple[str, ...]]] = {}  # partition -> (offset, holders)
    for plan in plans:
        if plan.condition is not Condition.IN_SYNC or (topic, plan.partition) in exclude:
            continue
        at = plan.local.end - 1
        holders = tuple(n for n, b in plan.sources.items() if b.holds(at))
        if plan.local.end <= plan.local.log_start or not holders:
            agree.add(plan.partition)
        else:
            wanted[plan.partition] = (at, holders)
    if not wanted:
        return agree

    def read(ref: ClusterRef, local: bool = False) -> dict[int, Batch]:
        offsets = {p: at for p, (at, names) in wanted.items() if local or ref.name in names}
        return batches_at(pool.get(ref), topic, offsets) if offsets else {}

    try:
        mine = read(req.local, local=True)
        theirs = {r.name: read(r) for r in req.sources}
    except PartsyncError as e:
        log.debug("topic %s: last batches not read together (%s): compared one by one", topic, e)
        return agree
    for p, (_at, names) in wanted.items():
        local = mine.get(p)
        if local is not None and all(
            (b := theirs[n].get(p)) is not None and same_batch(local, b) for n in names
        ):
            agree.add(p)
    return agree


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


def _promoted(req: SyncRequest, pool: ClusterPool) -> dict[str, Promotion]:
    """The job's topics promoted on the local cluster (``partsync promote``), read before
    every plan, so no run of any kind mirrors into a promoted topic. A principal that may not
    describe the record's topic cannot tell: it is warned, and plans as before."""
    local = pool.get(req.local)
    promoted = read_promotions(local)
    if promoted is None:
        log.warning(
            "cluster %s: not authorized to read topic %s, so a promoted topic would not be "
            "recognised and could be mirrored into: grant DESCRIBE and READ on it",
            local.name,
            PROMOTIONS_TOPIC,
        )
        return {}
    return {t: p for t, p in promoted.items() if t in req.topics}


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
    # Read after the plans (a local cluster that does not answer fails them first, naming what
    # failed), before anything is written: a promoted topic is a primary now.
    if not any(tp.partitions for tp in out):
        return out  # nothing plannable, nothing to write (the local cluster may be down)
    promoted = _promoted(req, pool)
    return [
        TopicPlan(tp.topic, (), refused=promoted[tp.topic].refusal())
        if tp.topic in promoted
        else tp
        for tp in out
    ]


def apply_topic_changes(
    req: SyncRequest, pool: ClusterPool, plans: list[TopicPlan], *, follow: bool = False
) -> list[TopicPlan]:
    """Apply the plans' topic creations and growths on the local cluster, then plan those
    topics again (``run.topic_changes``; ``follow``: a missing topic is created even with
    nothing to copy yet). Plans without either are returned as they are."""
    return _apply_topic_changes(req, pool, plans, plan_topics, follow=follow)
