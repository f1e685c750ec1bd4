"""``partsync promote``: a failover. The job's mirror topics on the local cluster become
primaries, in this order:

1. refused while the job's followers run (the local group has members): they would go on
   mirroring into what producers are about to write;
2. a last catch-up from every source that still answers (a one-shot sync, fenced: a
   writer left behind is fenced off the partitions);
3. replayed source transactions left open are aborted (their outcome is unknown) and counted;
4. the consumer groups' commits copied a last time (``--sync-groups``), where the source
   answers;
5. the failover point recorded per partition in ``partsync.promotions`` (``plan.promotion``):
   from then on every partsync run, of any kind, refuses to mirror into the topic;
6. the grants ``--read-only`` withheld are created, so the topics' producers may write.

A promoted topic stays promoted: running promote again reports it and does nothing more to it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from partsync.copy.producer import abort_left_open
from partsync.errors import ExitStatus, GroupError, PartsyncError, TopicError, UsageError
from partsync.io.acls import AclRecord, create_acls
from partsync.io.cluster import Cluster
from partsync.io.link_records import read_promotions, read_source_ends, write_promotions
from partsync.io.pool import ClusterPool
from partsync.io.reader import read_batches
from partsync.plan.acls import LITERAL, PREFIXED, Acl, in_scope
from partsync.plan.promotion import FailoverPoint, Promotion, at_risk
from partsync.plan.results import SyncReport
from partsync.run.link_status import group_members
from partsync.run.offsets import OffsetsReport, copy_group_offsets
from partsync.run.planned_switch import PlannedSwitch, refuse_live_groups_on_source, wait_in_sync
from partsync.run.planner import SyncRequest
from partsync.run.runner import RunOptions
from partsync.run.sync import GroupsToSync, run_sync
from partsync.wire.filler import is_filler

__all__ = ["PromoteReport", "promote"]

log = logging.getLogger(__name__)


@dataclass
class PromoteReport:
    promoted: list[Promotion] = field(default_factory=list)
    # Topics an earlier promote promoted already (reported, not touched).
    already: list[Promotion] = field(default_factory=list)
    # Topics that could not be promoted, with why.
    failed: dict[str, str] = field(default_factory=dict)
    catch_up: SyncReport | None = None
    groups: OffsetsReport | None = None
    granted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # --planned: why the mirror is not at lag 0 with its sources (then nothing is promoted).
    not_in_sync: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> ExitStatus:
        if self.not_in_sync:
            return ExitStatus.DEADLINE
        if self.failed:
            return ExitStatus.FAILURE
        return self.groups.exit_status if self.groups is not None else ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "promoted": [p.to_dict() for p in self.promoted],
            "already_promoted": [p.to_dict() for p in self.already],
            "failed": dict(self.failed),
            "catch_up": self.catch_up.to_dict() if self.catch_up is not None else None,
            "groups": self.groups.to_dict()["groups"] if self.groups is not None else [],
            "acls_granted": list(self.granted),
            "warnings": list(self.warnings),
            "not_in_sync": list(self.not_in_sync),
        }


def _refuse_while_followed(local: Cluster, group: str | None) -> None:
    if group is None:
        return
    members = group_members(local, group)
    if members is None:
        raise GroupError(
            f"cluster {local.name} cannot say whether group {group!r} has members (its "
            "coordinator did not answer, or DESCRIBE on the group is not granted), so whether "
            "the job's followers still run is unknown; stop them, then promote with --no-group",
            cluster=local.name,
        )
    if members:
        raise GroupError(
            f"group {group!r} on cluster {local.name} has {members} member(s): the job's "
            "followers still run and would go on mirroring into the topics; stop them first",
            cluster=local.name,
        )


def _point(
    partition: int,
    local_end: int,
    sources: dict[str, dict[int, int] | None],
    seen: dict[int, dict[str, int]],
    aborted: int,
    mirrored_end: int,
) -> FailoverPoint:
    """One partition's failover point, from its sources' ends (None: the source did not
    answer) and those a follower last recorded (``seen``). What is at risk is measured from
    the end of what was mirrored (``mirrored_end``: before the aborts' markers, which no
    source holds); ``local_end`` is where the new primary's own records begin."""
    ends = {name: None if e is None else e[partition] for name, e in sources.items()}
    answered = {name: e for name, e in ends.items() if e is not None}
    last = {s: e for s, e in seen.get(partition, {}).items() if s in ends and ends[s] is None}
    unseen = sum(1 for s, e in ends.items() if e is None and s not in last)
    risk = at_risk(mirrored_end, answered, last, unseen)
    return FailoverPoint(partition, local_end, ends, last, risk, aborted)


def _catch_up(
    req: SyncRequest, pool: ClusterPool, opts: RunOptions, retries: int, report: PromoteReport
) -> None:
    """The last one-shot sync from the sources that answer, as ``sync`` runs it. A topic it
    cannot copy (no source answers: the disaster a failover is for) is promoted as the mirror
    holds it, with a warning."""
    report.catch_up = run_sync(req, pool, opts=opts, use_group=False, retries=retries)
    for p in report.catch_up.all_partitions():
        if p.status.value in ("in-sync", "synced"):
            continue
        where = f"topic {p.topic}" + (f" partition {p.partition}" if p.partition >= 0 else "")
        report.warnings.append(
            f"{where}: not caught up ({p.status.value} at offset {p.local_end_after}): {p.reason}"
        )


def _grant_withheld(
    req: SyncRequest, local: Cluster, report: PromoteReport, topics: Sequence[str]
) -> None:
    """The writes --read-only withheld on the promoted ``topics``, created and recorded as
    partsync's (so a later link removes them only if it created them). A prefixed grant is
    created for each promoted topic it covers, by name: as a prefix it would also open
    topics that are still mirrors."""
    if not topics:
        return
    record = AclRecord(local, req.acls.record_topic)
    try:
        _created, withheld = record.read()
    except PartsyncError as e:
        report.warnings.append(f"withheld ACLs not read, none granted: {e}")
        return
    grant: set[Acl] = set()
    for a in withheld:
        if a.pattern == PREFIXED:
            covered = [t for t in topics if a.applies_to(a.resource_type, t)]
            grant.update(dataclasses.replace(a, name=t, pattern=LITERAL) for t in covered)
        elif in_scope(a, topics, ()):
            grant.add(a)
    if not grant:
        return
    ordered = sorted(grant)
    record.add(ordered, "promote")
    create_acls(local, ordered)
    report.granted = [a.describe() for a in ordered]


def promote(
    req: SyncRequest,
    pool: ClusterPool,
    *,
    group: str | None,
    groups: GroupsToSync | None = None,
    opts: RunOptions | None = None,
    retries: int = 2,
    planned: PlannedSwitch | None = None,
) -> PromoteReport:
    """Promote the request's topics on its local cluster (the module's steps); ``planned``:
    only once the mirror is at lag 0 with its sources (``run.planned_switch``)."""
    report = PromoteReport()
    local = pool.get(req.local)
    _refuse_while_followed(local, group)
    promoted = read_promotions(local)
    if promoted is None:
        raise UsageError(
            f"cluster {local.name}: not authorized to describe topic partsync.promotions, where "
            "a promotion is recorded for every later run to see: grant DESCRIBE, READ and WRITE "
            "on it (and CREATE, or create it: compacted, one partition)"
        )
    report.already = [promoted[t] for t in req.topics if t in promoted]
    todo = dataclasses.replace(req, topics=tuple(t for t in req.topics if t not in promoted))
    if not todo.topics:
        # A promote stopped between recording and granting: grant what is still withheld.
        _grant_withheld(req, local, report, [p.topic for p in report.already])
        return report
    if planned is not None and groups is not None and groups.groups:
        refuse_live_groups_on_source(pool.get(groups.source), groups.groups)
    _catch_up(todo, pool, opts or RunOptions(), retries, report)
    if planned is not None:

        def again() -> None:
            report.warnings.clear()
            _catch_up(todo, pool, opts or RunOptions(), retries, report)

        report.not_in_sync = wait_in_sync(
            todo, pool, again, watch_s=planned.watch_s, timeout_s=planned.timeout_s
        )
        if report.not_in_sync:
            return report
    seen = read_source_ends(local)
    now = int(time.time() * 1000)
    for topic in todo.topics:
        try:
            report.promoted.append(_promotion(todo, pool, topic, seen.get(topic, {}), group, now))
        except PartsyncError as e:
            report.failed[topic] = str(e)
    if groups is not None and groups.groups:
        report.groups = _last_group_copy(groups, pool, local, [p.topic for p in report.promoted])
    write_promotions(local, report.promoted)
    topics = [p.topic for p in (*report.promoted, *report.already)]
    _grant_withheld(req, local, report, topics)
    return report


def _promotion(
    req: SyncRequest,
    pool: ClusterPool,
    topic: str,
    seen: dict[int, dict[str, int]],
    job: str | None,
    now: int,
) -> Promotion:
    """Abort what replays left open, then read the failover point of every partition."""
    local = pool.get(req.local)
    info = local.topic(topic, refresh=True)
    if info is None:
        raise TopicError("topic does not exist", cluster=local.name, topic=topic)
    parts = list(range(info.partitions))
    mirrored = {p: b.end for p, b in local.bounds(topic, parts).items()}
    aborted = {p: abort_left_open(local, topic, p) for p in parts}
    for p in parts:
        _drop_fillers(local, topic, p)
    local_ends = {p: b.end for p, b in local.bounds(topic, parts).items()}
    sources: dict[str, dict[int, int] | None] = {}
    for ref in req.sources:
        try:
            sources[ref.name] = {p: b.end for p, b in pool.get(ref).bounds(topic, parts).items()}
        except PartsyncError as e:
            log.info("source %s did not answer for topic %s: %s", ref.name, topic, e)
            sources[ref.name] = None
    points = tuple(_point(p, local_ends[p], sources, seen, aborted[p], mirrored[p]) for p in parts)
    return Promotion(topic, local.name, now, job, points)


def _drop_fillers(local: Cluster, topic: str, partition: int) -> None:
    """A mirror start that could not finish (its sources went dark while it filled up to their
    log start) leaves filler records at the head of the log, which a producer's consumers
    would read: the log start moves past them (DeleteRecords), as the start would have."""
    b = local.bounds(topic, [partition])[partition]
    if b.end == b.log_start:
        return
    conn = local.connect_leader(topic, partition)
    past = b.log_start
    try:
        for batch in read_batches(
            conn, local.name, topic, partition, b.log_start, b.end, fetch_bytes=1 << 20
        ):
            if not is_filler(batch):
                break
            past = batch.last_offset + 1
    finally:
        local.release(conn)
    if past > b.log_start:
        local.delete_records(topic, partition, past)
        log.warning(
            "topic %s partition %d: the log start moved from %d to %d, past the filler records "
            "of a mirror start that could not finish",
            topic,
            partition,
            b.log_start,
            past,
        )


def _last_group_copy(
    groups: GroupsToSync, pool: ClusterPool, local: Cluster, topics: Sequence[str]
) -> OffsetsReport:
    source = pool.get(groups.source)
    return copy_group_offsets(source, local, groups.groups, topics)
