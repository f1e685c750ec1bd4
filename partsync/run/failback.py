"""``partsync failback``: make an old primary a mirror of the new one (the cluster ``promote``
made primary), losing nothing. It takes the options of the reversed link's sync: the new
primary is the one source, the old primary the local cluster. In this order:

1. refused for a topic the source has not promoted, or the local cluster promoted later (the
   wrong direction would delete the live primary's data);
2. refused while the old primary is in use: consumer groups with members, log ends that move
   while watched, transactions still open after ``settle_s`` (``plan.failback_report.InUse``,
   which also names what no API shows);
3. per partition, the first offset where the old copy differs from the new primary's
   (``run.diff.diff_topics``, by digest) and its case (``plan.failback``);
4. the old primary's tail past that point exported (``run.failback_export``) before anything
   is deleted;
5. a topic with a diverged partition deleted and created again at once with its partitions
   and settings, checked (a client of the old primary could auto-create it in between with the
   broker's defaults);
6. the old primary's promotion records of the topics cleared (it is a mirror again), and the
   topics mirrored from the new primary (a one-shot sync; a topic a kill left deleted is
   created like the new primary's).

Each step can be killed and the command run again: the export resumes or is rewritten, a
deleted topic is created, the mirror resumes from its end. ``dry_run`` stops after 3 with
what would be exported and discarded, and the bytes to copy again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from partsync.errors import PartsyncError, TopicError, UnsafeError, UsageError
from partsync.io.cluster import Cluster
from partsync.io.link_records import forget_promotions, read_promotions
from partsync.io.old_primary import (
    delete_topic,
    live_groups,
    open_transactional_ids,
    topic_bytes,
    topic_overrides,
)
from partsync.io.pool import ClusterPool
from partsync.plan.diff_model import DiffRequest, DiffStatus
from partsync.plan.failback import Action, classify, moved_since
from partsync.plan.failback_report import FailbackReport, InUse, TopicFailback
from partsync.plan.promotion import Promotion
from partsync.run.diff import diff_topics
from partsync.run.failback_export import ExportTarget, ensure_export_topic, export_partition
from partsync.run.planner import SyncRequest
from partsync.run.runner import RunOptions
from partsync.run.sync import run_sync

__all__ = ["FailbackOptions", "failback"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FailbackOptions:
    export: ExportTarget = ExportTarget()
    dry_run: bool = False
    # How long the old primary's log ends are watched for writes.
    watch_s: float = 10.0
    # How long open transactions on the old primary may take to end.
    settle_s: float = 60.0
    # Groups known not to read these topics (they do not count as use).
    ignore_groups: tuple[str, ...] = ()


def failback(
    req: SyncRequest,
    pool: ClusterPool,
    fopts: FailbackOptions,
    *,
    opts: RunOptions | None = None,
    retries: int = 2,
) -> FailbackReport:
    if len(req.sources) != 1:
        raise UsageError(
            "failback takes one source, the new primary (the cluster promote made primary)"
        )
    if req.partitions is not None:
        raise UsageError(
            "failback works on whole topics (a diverged one is created again): "
            "leave out --partitions"
        )
    old, new = pool.get(req.local), pool.get(req.sources[0])
    fopts.export.check(len(req.topics))
    export = {"directory": None, "topic": fopts.export.topic}
    if fopts.export.directory is not None:
        export["directory"] = str(fopts.export.directory)
    report = FailbackReport(old.name, new.name, fopts.dry_run, export=export)
    promoted = _check_direction(req.topics, old, new, report)
    report.in_use = _in_use(old, list(promoted), fopts)
    if report.in_use.in_use:
        return report
    for topic, promotion in promoted.items():
        try:
            tf = _plan_topic(req, pool, topic)
        except PartsyncError as e:
            report.failed[topic] = str(e)
            continue
        tf.promoted_ms = promotion.at_ms
        report.topics.append(tf)
    todo = [t for t in report.topics if t.error is None]
    if fopts.dry_run:
        for tf in todo:
            _count(old, new, tf, fopts)
        return report
    tails = [t.topic for t in todo if any(p.export_range for p in t.partitions)]
    if tails and not fopts.export.any:
        raise UsageError(
            f"the old primary {old.name} holds records the new primary {new.name} does not "
            f"(topics {', '.join(tails)}): name where to export them first, --export-dir "
            "and/or --export-topic (see --dry-run for what they are)"
        )
    for tf in todo:
        try:
            _export(old, new, tf, fopts.export)
            if tf.action is Action.RECREATE:
                _recreate(old, tf, fopts.settle_s)
        except PartsyncError as e:
            tf.error = str(e)
            report.failed[tf.topic] = str(e)
            if isinstance(e, UnsafeError):
                report.unsafe.append(tf.topic)
    done = [t.topic for t in todo if t.error is None]
    _clear_promotions(old, done, report)
    if done:
        reseed = dataclasses.replace(req, topics=tuple(done), create_missing=True)
        report.reseed = run_sync(reseed, pool, opts=opts, use_group=False, retries=retries)
        behind = {
            p.topic
            for p in report.reseed.all_partitions()
            if p.status.value not in ("in-sync", "synced")
        }
        for tf in todo:
            if tf.error is None and tf.topic not in behind:
                tf.done = "mirrored"
            elif tf.error is None:
                report.warnings.append(
                    f"topic {tf.topic}: {tf.done}, not yet mirrored to the end (see reseed): "
                    "run failback, or the reversed link's sync, again"
                )
    return report


def _check_direction(
    topics: Sequence[str], old: Cluster, new: Cluster, report: FailbackReport
) -> dict[str, Promotion]:
    """The topics the new primary promoted, and the old one did not promote after it."""
    promoted, mine = read_promotions(new), read_promotions(old)
    for cluster, held in ((new, promoted), (old, mine)):
        if held is None:
            raise UsageError(
                f"cluster {cluster.name}: not authorized to describe topic partsync.promotions, "
                "where promote recorded the topics it made primaries: failback checks it first "
                "on both clusters (it deletes data on the old primary)"
            )
    assert promoted is not None and mine is not None
    ok = {}
    for t in topics:
        p = promoted.get(t)
        if p is None:
            report.failed[t] = (
                f"topic {t} was not promoted on cluster {new.name}: failback makes an old "
                f"primary the mirror of a promoted one (partsync promote --local {new.name})"
            )
        elif t in mine and mine[t].at_ms >= p.at_ms:
            report.failed[t] = (
                f"topic {t} was promoted on cluster {old.name} after cluster {new.name}: "
                f"{old.name} is the newer primary; failback in the other direction "
                f"(--sources {old.name} --local {new.name})"
            )
        else:
            ok[t] = p
            sources = {s for point in p.partitions for s in point.sources}
            if sources and old.name not in sources:
                report.warnings.append(
                    f"topic {t} was promoted on {new.name} from {', '.join(sorted(sources))}, "
                    f"not from {old.name}: make sure {old.name} is the old primary"
                )
    return ok


def _in_use(old: Cluster, topics: Sequence[str], fopts: FailbackOptions) -> InUse:
    use = InUse(watched_s=fopts.watch_s)
    use.groups, use.unknown_groups = live_groups(old, fopts.ignore_groups)
    parts: dict[str, list[int]] = {}
    for t in topics:
        info = old.topic(t, refresh=True)
        if info is not None:
            parts[t] = list(range(info.partitions))
    if not parts:
        use.watched_s = 0  # none of the topics on the old primary: no ends to watch move
        return use
    before = {(t, p): e for t, ps in parts.items() for p, e in old.log_ends(t, ps).items()}
    time.sleep(fopts.watch_s)
    after = {(t, p): e for t, ps in parts.items() for p, e in old.log_ends(t, ps).items()}
    use.moved = {f"{t}-{p}": (e, after[t, p]) for (t, p), e in before.items() if after[t, p] != e}
    use.open_transactions = _settle(old, parts, fopts.settle_s)
    if use.open_transactions:
        use.transactional_ids = open_transactional_ids(old)
    return use


def _unsettled(old: Cluster, parts: dict[str, list[int]]) -> dict[str, tuple[int, int]]:
    out = {}
    for t, ps in parts.items():
        for p, b in old.bounds(t, ps).items():
            lso = old.last_stable_offset(t, p)
            if lso < b.end:
                out[f"{t}-{p}"] = (lso, b.end)
    return out


def _settle(old: Cluster, parts: dict[str, list[int]], wait_s: float) -> dict[str, tuple[int, int]]:
    """Partitions whose transactions are still open after waiting up to ``wait_s`` for them
    (a coordinator finishing its markers, or aborting a dead producer's transaction when its
    timeout passes)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = _unsettled(old, parts)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def _plan_topic(req: SyncRequest, pool: ClusterPool, topic: str) -> TopicFailback:
    old, new = pool.get(req.local), pool.get(req.sources[0])
    info_new = new.topic(topic, refresh=True)
    if info_new is None:
        raise TopicError("does not exist on the new primary", cluster=new.name, topic=topic)
    parts = list(range(info_new.partitions))
    info_old = old.topic(topic, refresh=True)
    tf = TopicFailback(topic)
    if info_old is None:
        bounds = new.bounds(topic, parts)
        tf.partitions = [classify(p, None, bounds[p], None) for p in parts]
        return tf
    if info_old.partitions != info_new.partitions:
        raise TopicError(
            f"has {info_old.partitions} partitions on the old primary and {info_new.partitions} "
            f"on the new one: delete it on {old.name} (after exporting what it holds) and run "
            "failback again",
            cluster=old.name,
            topic=topic,
        )
    # Every partition compared as `partsync diff` compares them, several at a time.
    diffs = diff_topics(DiffRequest((topic,), (req.sources[0], req.local)), pool)
    for d in diffs.topics[0].partitions:
        o, n = d.clusters.get(old.name), d.clusters.get(new.name)
        if d.status is DiffStatus.ERROR or o is None or n is None:
            raise TopicError(
                f"comparing the old and new primary: {d.reason}", topic=topic, partition=d.partition
            )
        tf.partitions.append(classify(d.partition, o, n, d.first_divergent_offset))
    return tf


def _count(old: Cluster, new: Cluster, tf: TopicFailback, fopts: FailbackOptions) -> None:
    """A dry run's numbers: what each partition's export would hold, and the bytes the new
    primary holds that a topic created again copies again."""
    for p in tf.partitions:
        rng = p.export_range
        if rng is not None and p.diverged_at is not None:
            tf.exported[p.partition] = export_partition(
                old,
                new,
                tf.topic,
                p.partition,
                rng,
                p.diverged_at,
                fopts.export,
                promoted_ms=tf.promoted_ms,
                dry_run=True,
            )
    if tf.action is not Action.MIRROR:
        tf.copy_again_bytes = topic_bytes(new, tf.topic, [p.partition for p in tf.partitions])


def _export(old: Cluster, new: Cluster, tf: TopicFailback, target: ExportTarget) -> None:
    tails = [p for p in tf.partitions if p.export_range is not None]
    if not tails:
        return
    name = target.topic_for(tf.topic)
    if name is not None:
        limit = old.all_topic_configs(tf.topic).get("max.message.bytes")
        ensure_export_topic(new, name, len(tf.partitions), int(limit) if limit else None)
    for p in tails:
        rng = p.export_range
        assert rng is not None and p.diverged_at is not None
        tf.exported[p.partition] = export_partition(
            old, new, tf.topic, p.partition, rng, p.diverged_at, target, promoted_ms=tf.promoted_ms
        )
    tf.done = "exported"


def _moved(old: Cluster, tf: TopicFailback, parts: list[int]) -> None:
    """Refuse (unsafe) if the old primary holds records that were not compared and exported:
    written since, or not yet replicated (``moved_since``). They would be deleted unexported."""
    now = old.bounds_and_log_ends(tf.topic, parts)
    moved = moved_since(tf.partitions, {p: (b.end, leo) for p, (b, leo) in now.items()})
    if moved:
        raise UnsafeError(
            f"holds records that were not exported (partition: what): {'; '.join(moved)}. "
            "Not deleted; stop its producers, let its followers catch up and run failback again",
            cluster=old.name,
            topic=tf.topic,
        )


def _recreate(old: Cluster, tf: TopicFailback, settle_s: float) -> None:
    """Delete the topic and create it again at once with its partitions, replication factor and
    the configs set on it, then check them: until it exists again, a client of the old primary
    could auto-create it (``auto.create.topics.enable``) with the broker's defaults. The ends
    are compared with what was exported right before DeleteTopics; a record a producer writes
    in the moment between the two is not seen (no client can block a topic's writes on a
    cluster without an authorizer)."""
    topic = tf.topic
    parts = [p.partition for p in tf.partitions]
    open_ = _settle(old, {topic: parts}, settle_s)
    if open_:
        listed = ", ".join(f"{tp} at {lso}, end {end}" for tp, (lso, end) in sorted(open_.items()))
        raise UnsafeError(
            f"transactions are still open on the old primary ({listed}): not deleted",
            cluster=old.name,
            topic=topic,
        )
    info = old.topic(topic, refresh=True)
    replication = info.replication if info is not None and info.replication else -1
    configs = topic_overrides(old, topic)
    _moved(old, tf, parts)
    log.warning("deleting topic %s on %s to create it again as a mirror", topic, old.name)
    delete_topic(old, topic)
    old.create_topic(topic, len(parts), dict(configs), replication)
    now = topic_overrides(old, topic)
    differ: dict[str, tuple[str | None, str | None]] = {
        k: (v, now.get(k)) for k, v in configs.items() if now.get(k) != v
    }
    differ.update({k: (None, v) for k, v in now.items() if k not in configs})
    ends = old.bounds(topic, parts)
    written = {p: b.end for p, b in ends.items() if b.end}
    if differ or written:
        what = "; ".join(f"{k}={b} (was {a})" for k, (a, b) in sorted(differ.items()))
        if written:
            what += ("; " if what else "") + f"already holds records: ends {written}"
        raise UnsafeError(
            f"created again, but not as it was: {what}. Another client may have created it in "
            "between (auto.create.topics.enable): delete it and run failback again",
            cluster=old.name,
            topic=topic,
        )
    tf.done = "recreated"


def _clear_promotions(old: Cluster, topics: Sequence[str], report: FailbackReport) -> None:
    held = read_promotions(old) or {}
    mine = [t for t in topics if t in held]
    if mine:
        forget_promotions(old, mine)
        report.promotions_cleared = mine
