"""Follow mode's eye on the job's topics: ``TopicWatch``.

A follower runs for months while the sources' topics change under it. Every few seconds the
watch reads the sources' metadata and notices these changes:

* a topic whose plan failed (a partition without a leader yet, a topic not on the sources or
  the local cluster yet, no source answering): it is planned again at every check, with a
  warning, until it can be copied; then its partitions get tasks like a grown topic's (a
  follower never sits idle on a topic it was asked to follow without saying why);
* a source topic that gained partitions (every source that answered agrees on the new count):
  the local topic is grown to that count (CreatePartitions) and the new partitions get tasks,
  so the runner starts copying them (a group rebalances to hand them out);
* a source topic that was deleted and created again (its topic id changed): its offsets
  restarted, so nothing more may be appended from it to the old copy. The topic is refused
  (unsafe, needs a person) and its workers stop;
* a topic deleted on every source that had it (``source-gone``, exit 5): its workers stop and
  its mirror is kept as it is (never deleted for the operator); created again later, it is
  refused as above. Deleted on some of several sources, it is mirrored from the others, with
  a warning;
* with ``--sync-acls`` / ``--read-only``, the followed topics' ACLs as the sources have them,
  and who else could write a mirror (``run.acl_sync``);
* with ``--topic-pattern``, a topic that appeared on a source and matches: planned like a
  topic whose plan failed (created locally with ``--create-missing``), then followed. The
  group's subscription takes it to the job's other processes, whose own checks find it too.

The first id a source reports is its baseline (from the plan, or the first check that reaches
the source). Brokers without topic ids (Metadata before v10) are only covered by the rounds'
own checks, which refuse a local log that no source continues.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from partsync.errors import PartsyncError
from partsync.io.link_records import read_promotions
from partsync.io.pool import ClusterPool
from partsync.plan.topic_select import appeared, lost_by
from partsync.run.acl_sync import follow_acls
from partsync.run.planner import SyncRequest, TopicPlan, apply_topic_changes, plan_topics
from partsync.run.source_ends import SourceEnds
from partsync.run.task import PartitionTask, tasks_for
from partsync.run.topic_configs import follow_configs

__all__ = ["TopicChanges", "TopicWatch", "recreated_reason"]

log = logging.getLogger(__name__)


@dataclass
class TopicChanges:
    # New partitions' tasks (the local topic already grew to hold them).
    tasks: list[PartitionTask] = field(default_factory=list)
    # Topics to stop, with the reason (a source topic deleted and created again).
    refused: dict[str, str] = field(default_factory=dict)
    # Each grown topic's new local partition count.
    grown: dict[str, int] = field(default_factory=dict)
    # Topics to stop, with the reason: deleted on every source that had them.
    gone: dict[str, str] = field(default_factory=dict)


def gone_reason(topic: str, sources: Sequence[str]) -> str:
    return (
        f"topic {topic} was deleted on {', '.join(sorted(sources))}, every source that had "
        "it: nothing more is copied into its mirror, which is kept as it is (delete the "
        "local topic yourself once nothing reads it)"
    )


def recreated_reason(topic: str, source: str, old: str, new: str) -> str:
    return (
        f"source {source}'s topic {topic} was deleted and created again (topic id {old} is now "
        f"{new}): its offsets restarted, so nothing more is copied from it into the old copy; "
        "delete the local topic, or mirror into a new one, to start over"
    )


def _follow_settings(
    req: SyncRequest,
    pool: ClusterPool,
    seen: dict[str, dict[str, int]],
    followed: Iterable[str],
    out: TopicChanges,
    warn: Callable[[str, str], None],
) -> None:
    """--sync-configs and --sync-acls / --read-only at a topic check: the followed topics'
    configs and ACLs as their sources have them (``seen``: the sources holding each now); a
    topic whose source can no longer be mirrored is refused into ``out``."""
    ended = out.gone.keys() | out.refused.keys()
    if req.sync_configs:
        held = {t: sorted(c) for t, c in seen.items() if c and t not in ended}
        refused, failed = follow_configs(req, pool, held)
        out.refused.update(refused)
        for topic, why in failed.items():
            warn(topic, why)
    if req.acls.active:
        kept = sorted(set(followed) - out.gone.keys() - out.refused.keys())
        notice = functools.partial(warn, "")
        follow_acls(req.acls, req.sources, req.local, pool, kept, notice=notice)


def promoted_since(req: SyncRequest, pool: ClusterPool, followed: Iterable[str]) -> dict[str, str]:
    """The followed topics promoted meanwhile (``partsync promote`` by an operator who did not
    stop this follower), with the refusal: primaries now, so their workers stop here."""
    try:
        promoted = read_promotions(pool.get(req.local)) or {}
    except PartsyncError as e:
        log.debug("topic check: reading the promotions: %s", e)
        return {}
    return {t: promoted[t].refusal() for t in followed if t in promoted}


class TopicWatch:
    def __init__(
        self, req: SyncRequest, plans: Sequence[TopicPlan], retries: int, interval_s: float
    ) -> None:
        self.req = req
        self.retries = retries
        self.interval_s = interval_s
        # The sources' ends the follower sees, recorded on the local cluster at each check.
        self.source_ends = SourceEnds()
        self.ids: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}
        # Every topic of the job so far (a refused or gone one is not adopted again).
        self.known: set[str] = {tp.topic for tp in plans}
        # The sources seen holding each followed topic (a topic is gone once all of them
        # answer without it).
        self.holders: dict[str, set[str]] = {}
        # Topics reported gone: one created again under the same name is refused too.
        self.gone: set[str] = set()
        for tp in plans:
            if tp.refused or tp.error or not tp.partitions:
                continue
            self.counts[tp.topic] = max(p.partition for p in tp.partitions) + 1
            for source, tid in tp.topic_ids:
                self.ids[(source, tp.topic)] = tid
            self.holders[tp.topic] = {source for source, _tid in tp.topic_ids}
        self._warned: set[str] = set()
        # Topics whose plan failed as a whole (not refused): planned again at every check.
        self.failed: dict[str, str] = {}
        for tp in plans:
            if tp.error and not tp.refused:
                self.failed[tp.topic] = tp.error
                self._warn(tp.topic, f"{tp.error}; planning it again every {interval_s:g} s")

    @property
    def topics(self) -> list[str]:
        return sorted(self.counts)

    def check(self, pool: ClusterPool) -> TopicChanges:
        """Read every source's metadata once and report what changed since the last check."""
        out = TopicChanges()
        self._adopt_new(pool)
        for topic in sorted(self.failed):
            self._plan_again(pool, topic, out)
        seen: dict[str, dict[str, int]] = {t: {} for t in self.counts}
        answered: set[str] = set()
        for ref in self.req.sources:
            cluster = pool.get(ref)
            try:
                cluster.metadata(refresh=True)
                infos = {t: cluster.topic(t) for t in (*self.counts, *self.gone)}
            except PartsyncError as e:
                log.debug("topic check: source %s: %s", ref.name, e)
                continue
            answered.add(ref.name)
            for topic, info in infos.items():
                if info is None:
                    continue  # deleted (and maybe not yet created again): _gone tells
                if topic in self.gone:  # deleted earlier, now a new topic of that name
                    old = self.ids.get((ref.name, topic), "?")
                    out.refused[topic] = recreated_reason(
                        topic, ref.name, old, info.topic_id or "?"
                    )
                    continue
                seen[topic][ref.name] = info.partitions
                self.holders.setdefault(topic, set()).add(ref.name)
                if info.topic_id is None:
                    continue
                old = self.ids.setdefault((ref.name, topic), info.topic_id)
                if old != info.topic_id and topic not in out.refused:
                    out.refused[topic] = recreated_reason(topic, ref.name, old, info.topic_id)
        for topic, counts in seen.items():
            if topic not in out.refused:
                self._gone(topic, set(counts), answered, out)
        for topic, why in promoted_since(self.req, pool, self.counts).items():
            out.refused.setdefault(topic, why)
        _follow_settings(self.req, pool, seen, self.counts, out, self._warn)
        self.source_ends.flush(pool.get(self.req.local))
        self.gone = (self.gone | out.gone.keys()) - out.refused.keys()
        for topic in (*out.refused, *out.gone):
            self.counts.pop(topic, None)
        for topic, counts in seen.items():
            if topic in out.refused or topic in out.gone or not counts:
                continue
            grown = self._grown(pool, topic, counts)
            if grown is not None:
                out.tasks.extend(grown)
                out.grown[topic] = self.counts[topic]
        return out

    def _gone(self, topic: str, have: set[str], answered: set[str], out: TopicChanges) -> None:
        """Gone from every source that had it: stopped; from some: a warning (``lost_by``)."""
        lost, gone = lost_by(self.holders.get(topic, set()), have, answered)
        if gone:
            out.gone[topic] = gone_reason(topic, lost)
        elif lost:
            self._warn(
                topic,
                f"topic {topic} is no longer on {', '.join(lost)}: mirroring it from "
                f"{', '.join(sorted(have)) or 'the sources that still have it'}",
            )

    def _adopt_new(self, pool: ClusterPool) -> None:
        """``--topic-pattern``: a topic that appeared on a source and matches joins the job,
        planned at once like a topic whose plan failed (``_plan_again``)."""
        sel = self.req.selection
        if sel is None or not sel.by_pattern:
            return
        listed: dict[str, list[str]] = {}
        for ref in self.req.sources:
            try:
                listed[ref.name] = pool.get(ref).list_topics()
            except PartsyncError as e:
                log.debug("topic check: listing source %s's topics: %s", ref.name, e)
        for topic in appeared(sel, listed, self.known, self.req.own_records):
            self.known.add(topic)
            on = ", ".join(name for name, topics in listed.items() if topic in topics)
            log.warning("topic %s appeared on %s and matches the job's patterns", topic, on)
            self.failed[topic] = "a new topic"

    def _grown(
        self, pool: ClusterPool, topic: str, counts: dict[str, int]
    ) -> list[PartitionTask] | None:
        """The new partitions' tasks when the sources agree on more partitions than the job
        has, after growing the local topic; None when nothing (or nothing safe) changed."""
        known = self.counts[topic]
        new = max(counts.values())
        if new <= known:
            return None
        if len(set(counts.values())) > 1:
            self._warn(
                topic,
                f"sources disagree on topic {topic}'s partition count ({counts}); "
                "waiting for them to agree before copying new partitions",
            )
            return None
        if not self.req.add_partitions or self.req.partitions is not None:
            why = "--no-add-partitions" if not self.req.add_partitions else "--partitions"
            self._warn(
                topic,
                f"topic {topic} has {new} partitions on the sources, the job "
                f"{known}; not copying the new ones ({why})",
            )
            return None

        local = pool.get(self.req.local)
        info = local.topic(topic, refresh=True)
        if info is not None and info.partitions < new:
            local.grow_topic(topic, new)
            log.warning(
                "topic %s on %s grew from %d to %d partitions, as its sources did",
                topic,
                local.name,
                info.partitions,
                new,
            )
        req = dataclasses.replace(
            self.req, topics=(topic,), partitions=frozenset(range(known, new))
        )
        plans = plan_topics(req, pool)
        if plans[0].refused or plans[0].error:
            self._warn(
                topic, f"topic {topic}'s new partitions: {plans[0].refused or plans[0].error}"
            )
            return None
        self.counts[topic] = new
        return tasks_for(req, plans, self.retries, behind_only=False)

    def _plan_again(self, pool: ClusterPool, topic: str, out: TopicChanges) -> None:
        """Plan a topic whose plan failed; once it plans, its partitions' tasks into ``out``
        (its creation or growth applied first, as at the start)."""
        req = dataclasses.replace(self.req, topics=(topic,))
        try:
            tp = apply_topic_changes(req, pool, plan_topics(req, pool), follow=True)[0]
        except PartsyncError as e:
            self._warn(topic, f"planning topic {topic} again: {e}")
            return
        if tp.refused:
            del self.failed[topic]
            log.error("topic %s: %s", topic, tp.refused)
            return
        if tp.error or not tp.partitions or tp.create is not None:  # not created (yet)
            why = tp.error or "; ".join(tp.warnings) or f"topic {topic} cannot be followed yet"
            self._warn(topic, f"{why}; planning it again every {self.interval_s:g} s")
            return
        del self.failed[topic]
        self.counts[topic] = max(p.partition for p in tp.partitions) + 1
        for source, tid in tp.topic_ids:
            self.ids[(source, topic)] = tid
        self.holders[topic] = {source for source, _tid in tp.topic_ids}
        out.tasks.extend(tasks_for(req, [tp], self.retries, behind_only=False))
        out.grown[topic] = self.counts[topic]
        log.warning(
            "topic %s planned at last: following its %d partitions", topic, len(tp.partitions)
        )

    def _warn(self, topic: str, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)
