"""The driver: read bounds on every cluster, plan each partition, hand tasks to an engine.

``plan_topics`` is what ``partsync plan`` prints and ``partsync sync`` executes (plan, then
apply). Topic-wide refusals (partition counts differ, a local topic config that would make the
broker rewrite batches) are decided here, before any task runs.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from partsync.cluster import Cluster
from partsync.config import ClusterRef
from partsync.copier import CopyOptions, LocalTopicRules
from partsync.errors import ClusterError, PartsyncError, TopicError
from partsync.plan import Bounds, Condition, PartitionPlan, PlanPolicy, plan_partition
from partsync.result import PartitionResult, Status, SyncReport, TopicResult
from partsync.selection import select
from partsync.task import ClusterPool, PartitionTask

__all__ = ["SyncRequest", "TopicPlan", "plan_topics", "run_sync", "Engine"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SyncRequest:
    topics: tuple[str, ...]
    sources: tuple[ClusterRef, ...]
    local: ClusterRef
    partitions: frozenset[int] | None = None
    create_missing: bool = False
    policy: PlanPolicy = PlanPolicy()
    options: CopyOptions = CopyOptions()


@dataclass(frozen=True)
class TopicPlan:
    topic: str
    partitions: tuple[PartitionPlan, ...]
    rules: LocalTopicRules = LocalTopicRules()
    warnings: tuple[str, ...] = ()
    refused: str | None = None  # whole-topic refusal (unsafe)
    error: str | None = None  # whole-topic failure (e.g. topic missing everywhere)
    created: bool = False

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "refused": self.refused,
            "error": self.error,
            "warnings": list(self.warnings),
            "partitions": [p.to_dict() for p in self.partitions],
        }


def _identity_configs(src_cfg: dict[str, str]) -> dict[str, str]:
    """Configs for a topic created with --create-missing: what keeps batches byte-identical."""
    cfg = {
        "compression.type": "producer",
        "message.timestamp.type": "CreateTime",
        "cleanup.policy": src_cfg.get("cleanup.policy", "delete"),
        "max.message.bytes": src_cfg.get("max.message.bytes", "1048588"),
    }
    # Same retention as the source where it reports one (a shorter local retention only moves
    # the local log start, never offsets, but a mirror is expected to keep what its source keeps).
    for key in ("retention.ms", "retention.bytes"):
        if key in src_cfg:
            cfg[key] = src_cfg[key]
    return cfg


def _rules_from(cfg: dict[str, str]) -> tuple[LocalTopicRules, str | None]:
    if cfg.get("message.timestamp.type", "CreateTime") == "LogAppendTime":
        return LocalTopicRules(), (
            "local topic has message.timestamp.type=LogAppendTime: the broker would restamp every "
            "batch; set it to CreateTime"
        )
    compression = cfg.get("compression.type", "producer")
    try:
        max_bytes = int(cfg.get("max.message.bytes", "0")) or None
    except ValueError:
        max_bytes = None
    return LocalTopicRules(compression_type=compression, max_message_bytes=max_bytes), None


def _plan_topic(
    topic: str,
    req: SyncRequest,
    pool: ClusterPool,
    *,
    dry_run: bool,
) -> TopicPlan:
    local = pool.get(req.local)
    warnings: list[str] = []
    counts: dict[str, int] = {}
    src_clusters: dict[str, Cluster] = {}
    for ref in req.sources:
        c = pool.get(ref)
        try:
            info = c.topic(topic)
        except ClusterError as e:
            warnings.append(f"source {ref.name} unreachable, planning without it: {e.reason}")
            continue
        if info is None:
            warnings.append(f"topic {topic} does not exist on source {ref.name}")
            continue
        counts[ref.name] = info.partitions
        src_clusters[ref.name] = c
    if not counts:
        return TopicPlan(topic, (), warnings=tuple(warnings), error=(
            f"topic {topic} is not readable on any source ({', '.join(r.name for r in req.sources)})"
        ))
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{n}: {k}" for n, k in counts.items())
        return TopicPlan(topic, (), warnings=tuple(warnings),
                         refused=f"partition counts differ between sources ({detail})")
    count = next(iter(counts.values()))

    local_info = local.topic(topic)
    created = False
    if local_info is None:
        if not req.create_missing:
            return TopicPlan(topic, (), warnings=tuple(warnings), error=(
                f"topic {topic} does not exist on the local cluster {local.name} "
                "(use --create-missing to create it with the sources' partition count)"
            ))
        if dry_run:
            warnings.append(f"topic {topic} would be created on {local.name} with {count} partitions")
            local_parts = count
        else:
            first = src_clusters[next(iter(src_clusters))]
            src_cfg, w = first.topic_configs(topic)
            warnings.extend(w)
            local.create_topic(topic, count, _identity_configs(src_cfg))
            created = True
            local_parts = count
    else:
        local_parts = local_info.partitions
    if local_parts != count:
        return TopicPlan(topic, (), warnings=tuple(warnings), refused=(
            f"partition counts differ: local {local.name} has {local_parts}, sources have {count}"
        ))

    parts = select(count, req.partitions, topic=topic)
    if local_info is None and dry_run:
        local_bounds = {p: Bounds(0, 0) for p in parts}
        rules, refusal = LocalTopicRules(), None
    else:
        cfg, w = local.topic_configs(topic)
        warnings.extend(w)
        rules, refusal = _rules_from(cfg)
        local_bounds = local.bounds(topic, parts)
    src_bounds: dict[str, dict[int, Bounds]] = {}
    for name, c in src_clusters.items():
        try:
            src_bounds[name] = c.bounds(topic, parts)
        except ClusterError as e:
            warnings.append(f"source {name} unreachable, planning without it: {e.reason}")
    if not src_bounds:
        return TopicPlan(topic, (), warnings=tuple(warnings), error=f"no source of topic {topic} answered")

    plans = []
    for p in parts:
        sources = {name: b[p] for name, b in src_bounds.items()}
        plan = plan_partition(topic, p, local_bounds[p], sources, req.policy)
        if refusal is not None and plan.condition is Condition.BEHIND:
            plan = PartitionPlan(
                topic, p, plan.local, plan.sources, Condition.UNSAFE, plan.target_end, (), refusal
            )
        if plan.condition is Condition.UNSAFE:
            plan = _located(plan, local.name)
        plans.append(plan)
    return TopicPlan(topic, tuple(plans), rules, tuple(warnings), refused=None, created=created)


def _located(plan: PartitionPlan, local: str) -> PartitionPlan:
    """A refusal's reason says where, like every PartsyncError: the local cluster, topic,
    partition and the local log end, the offset that could not be written."""
    where = f"cluster {local}, topic {plan.topic} partition {plan.partition}, offset {plan.local.end}"
    return dataclasses.replace(plan, reason=f"{where}: {plan.reason}")


def plan_topics(req: SyncRequest, pool: ClusterPool, *, dry_run: bool = True) -> list[TopicPlan]:
    """Plan every requested topic. Raises ``ClusterError`` when the local cluster is unreachable."""
    out = []
    for topic in req.topics:
        try:
            out.append(_plan_topic(topic, req, pool, dry_run=dry_run))
        except (TopicError, ClusterError) as e:
            if e.cluster == req.local.name and isinstance(e, ClusterError) and e.topic is None:
                raise
            out.append(TopicPlan(topic, (), error=str(e)))
    return out


class Engine:
    """Runs partition tasks; engines differ only in where the tasks execute."""

    name = "abstract"

    def run(
        self,
        tasks: Sequence[PartitionTask],
        pool: ClusterPool,
        on_result: Callable[[PartitionResult], None] | None = None,
    ) -> list[PartitionResult]:
        raise NotImplementedError


def whole_topic_results(tp: TopicPlan) -> TopicResult:
    status = Status.UNSAFE if tp.refused else Status.ERROR
    reason = tp.refused or tp.error
    parts = []
    if tp.partitions:
        for plan in tp.partitions:
            parts.append(PartitionResult(tp.topic, plan.partition, status, plan.local.end,
                                         plan.local.end, plan.target_end, reason=reason))
    else:
        parts.append(PartitionResult(tp.topic, -1, status, 0, 0, 0, reason=reason))
    return TopicResult(tp.topic, tuple(parts), tp.warnings)


def uncopied_result(plan: PartitionPlan) -> PartitionResult:
    """A partition nothing was copied for, at its planned bounds: in-sync, or unsafe with the
    plan's reason. A behind partition gets its status from the caller (``with_status``)."""
    status = Status.UNSAFE if plan.condition is Condition.UNSAFE else Status.IN_SYNC
    return PartitionResult(plan.topic, plan.partition, status, plan.local.end, plan.local.end,
                           plan.target_end, reason=plan.reason)


def _retriable(r: PartitionResult) -> bool:
    return r.status is Status.ERROR and bool(r.error and r.error.get("retriable"))


def merge_results(first: PartitionResult, retry: PartitionResult) -> PartitionResult:
    """One result for a partition copied in several attempts."""
    by_source = dict(first.bytes_by_source)
    for s, n in retry.bytes_by_source.items():
        by_source[s] = by_source.get(s, 0) + n
    batches_by_source = dict(first.batches_by_source)
    for s, n in retry.batches_by_source.items():
        batches_by_source[s] = batches_by_source.get(s, 0) + n
    return retry.with_copy(
        batches_by_source=batches_by_source,
        local_end_before=first.local_end_before,
        batches=first.batches + retry.batches,
        bytes=first.bytes + retry.bytes,
        bytes_by_source=by_source,
        seconds=first.seconds + retry.seconds,
        peak_buffered_bytes=max(first.peak_buffered_bytes, retry.peak_buffered_bytes),
        status=Status.SYNCED if retry.status is Status.IN_SYNC and first.batches else retry.status,
    )


def run_sync(
    req: SyncRequest,
    engine: Engine,
    pool: ClusterPool,
    *,
    plans: list[TopicPlan] | None = None,
    on_result: Callable[[PartitionResult], None] | None = None,
    retries: int = 2,
    retry_backoff: float = 1.0,
    stop: threading.Event | None = None,
    stopped_reason: Callable[[], str | None] | None = None,
) -> SyncReport:
    """Plan (unless given plans), run the tasks on ``engine``, and retry partitions that failed
    with a retriable error: each retry re-plans from fresh bounds, since the local log end is the
    checkpoint."""
    started = time.monotonic()
    plans = plans if plans is not None else plan_topics(req, pool, dry_run=False)
    report = _run_once(req, engine, pool, plans, on_result)
    for attempt in range(retries):
        failed = [r for r in report.all_partitions() if _retriable(r)]
        if not failed or (stop is not None and stop.is_set()):
            break
        # Let appends still in flight on dropped connections settle before reading the new end.
        time.sleep(retry_backoff * (attempt + 1))
        log.warning("retrying %d partition(s) after retriable errors", len(failed))
        again: dict[tuple[str, int], PartitionResult] = {}
        for topic in {r.topic for r in failed}:
            parts = frozenset(r.partition for r in failed if r.topic == topic)
            sub = dataclasses.replace(req, topics=(topic,), partitions=parts, create_missing=False)
            sub_plans = plan_topics(sub, pool, dry_run=False)
            for r in _run_once(sub, engine, pool, sub_plans, on_result).all_partitions():
                again[(r.topic, r.partition)] = r
        topics = []
        for tr in report.topics:
            merged = tuple(
                merge_results(r, again[(r.topic, r.partition)]) if (r.topic, r.partition) in again else r
                for r in tr.partitions
            )
            topics.append(TopicResult(tr.topic, merged, tr.warnings))
        report = SyncReport(tuple(topics))
    why = stopped_reason() if stopped_reason and stop is not None and stop.is_set() else None
    return SyncReport(report.topics, time.monotonic() - started, why)


def _run_once(
    req: SyncRequest,
    engine: Engine,
    pool: ClusterPool,
    plans: list[TopicPlan],
    on_result: Callable[[PartitionResult], None] | None,
) -> SyncReport:
    started = time.monotonic()
    tasks: list[PartitionTask] = []
    topics: list[TopicResult] = []
    immediate: dict[str, list[PartitionResult]] = {}
    for tp in plans:
        if tp.refused or tp.error:
            topics.append(whole_topic_results(tp))
            continue
        immediate[tp.topic] = []
        for plan in tp.partitions:
            if plan.condition is Condition.BEHIND:
                srcs = tuple(r for r in req.sources if r.name in plan.sources)
                tasks.append(PartitionTask(plan, srcs, req.local, req.options, tp.rules, req.policy))
            else:
                immediate[tp.topic].append(uncopied_result(plan))
    results = engine.run(tasks, pool, on_result) if tasks else []
    by_topic: dict[str, list[PartitionResult]] = {t: list(r) for t, r in immediate.items()}
    for r in results:
        by_topic.setdefault(r.topic, []).append(r)
    for tp in plans:
        if tp.topic in by_topic:
            topics.append(TopicResult(tp.topic, tuple(by_topic[tp.topic]), tp.warnings))
    order = {t: i for i, t in enumerate(req.topics)}
    topics.sort(key=lambda t: order.get(t.topic, 0))
    return SyncReport(tuple(topics), time.monotonic() - started)


