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
  (unsafe, needs a person) and its workers stop.

The first id a source reports is its baseline (from the plan, or the first check that reaches
the source). Brokers without topic ids (Metadata before v10) are only covered by the rounds'
own checks, which refuse a local log that no source continues.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from partsync.errors import PartsyncError
from partsync.io.pool import ClusterPool
from partsync.run.planner import SyncRequest, TopicPlan, apply_topic_changes, plan_topics
from partsync.run.task import PartitionTask, tasks_for

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


def recreated_reason(topic: str, source: str, old: str, new: str) -> str:
    return (
        f"source {source}'s topic {topic} was deleted and created again (topic id {old} is now "
        f"{new}): its offsets restarted, so nothing more is copied from it into the old copy; "
        "delete the local topic, or mirror into a new one, to start over"
    )


class TopicWatch:
    def __init__(
        self, req: SyncRequest, plans: Sequence[TopicPlan], retries: int, interval_s: float
    ) -> None:
        self.req = req
        self.retries = retries
        self.interval_s = interval_s
        self.ids: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}
        for tp in plans:
            if tp.refused or tp.error or not tp.partitions:
                continue
            self.counts[tp.topic] = max(p.partition for p in tp.partitions) + 1
            for source, tid in tp.topic_ids:
                self.ids[(source, tp.topic)] = tid
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
        for topic in sorted(self.failed):
            self._plan_again(pool, topic, out)
        seen: dict[str, dict[str, int]] = {t: {} for t in self.counts}
        for ref in self.req.sources:
            cluster = pool.get(ref)
            try:
                cluster.metadata(refresh=True)
                infos = {t: cluster.topic(t) for t in self.counts}
            except PartsyncError as e:
                log.debug("topic check: source %s: %s", ref.name, e)
                continue
            for topic, info in infos.items():
                if info is None:
                    continue  # deleted (and not yet created again): the rounds report it
                seen[topic][ref.name] = info.partitions
                if info.topic_id is None:
                    continue
                old = self.ids.setdefault((ref.name, topic), info.topic_id)
                if old != info.topic_id and topic not in out.refused:
                    out.refused[topic] = recreated_reason(topic, ref.name, old, info.topic_id)
        for topic in out.refused:
            del self.counts[topic]
        for topic, counts in seen.items():
            if topic in out.refused or not counts:
                continue
            grown = self._grown(pool, topic, counts)
            if grown is not None:
                out.tasks.extend(grown)
                out.grown[topic] = self.counts[topic]
        return out

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
            tp = apply_topic_changes(req, pool, plan_topics(req, pool))[0]
        except PartsyncError as e:
            self._warn(topic, f"planning topic {topic} again: {e}")
            return
        if tp.refused:
            del self.failed[topic]
            log.error("topic %s: %s", topic, tp.refused)
            return
        if tp.error or not tp.partitions:
            self._warn(topic, f"{tp.error}; planning it again every {self.interval_s:g} s")
            return
        del self.failed[topic]
        self.counts[topic] = max(p.partition for p in tp.partitions) + 1
        for source, tid in tp.topic_ids:
            self.ids[(source, topic)] = tid
        out.tasks.extend(tasks_for(req, [tp], self.retries, behind_only=False))
        out.grown[topic] = self.counts[topic]
        log.warning(
            "topic %s planned at last: following its %d partitions", topic, len(tp.partitions)
        )

    def _warn(self, topic: str, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)
