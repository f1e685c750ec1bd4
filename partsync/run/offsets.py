"""Consumer group failover: copy a group's committed offsets from a source cluster to the local
one, verbatim (offsets are identical across partsync's clusters, so nothing is translated).

For each group and topic: the local group must have no live members (Kafka lets only members
commit to a group that has them, and consumers running there would be overtaken); the source's
committed offsets are read with OffsetFetch and committed on the local cluster with OffsetCommit
as a standalone client, with the committed leader epoch left unknown (-1: the source's epochs
mean nothing locally, and a consumer validating a foreign epoch would reset or rewind) and the
metadata string kept. A commit beyond the local log end is clamped to it (a consumer whose
committed offset is past the end resets by ``auto.offset.reset``) and reported ``clamped``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from partsync.errors import BrokerError, ClusterError, ExitStatus, TopicError, UnsafeError
from partsync.io.broker_errors import COORDINATOR_RETRY_CODES
from partsync.io.cluster import Cluster
from partsync.io.group_offsets import GroupCoordinator, offset_at_time
from partsync.retry import Backoff, retry_on

__all__ = [
    "GroupOffsets",
    "OffsetCopy",
    "OffsetsFollower",
    "OffsetsReport",
    "copy_group_offsets",
    "reset_group_offsets_to_time",
]

log = logging.getLogger(__name__)

# How long a group command waits for its coordinator to be ready (``_patiently``).
COORDINATOR_WAIT_S = 30.0


@dataclass(frozen=True)
class OffsetCopy:
    topic: str
    partition: int
    source_offset: int | None  # None: the group has no commit for the partition on the source
    local_offset: int | None  # what was committed locally (None: nothing)
    status: str  # copied, clamped, no-commit; reset (--to-datetime)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "source_offset": self.source_offset,
            "local_offset": self.local_offset,
            "status": self.status,
        }


@dataclass(frozen=True)
class GroupOffsets:
    group: str
    partitions: tuple[OffsetCopy, ...] = ()
    status: str = "copied"  # copied, no-commits, not-found, refused, error
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "status": self.status,
            "reason": self.reason,
            "partitions": [p.to_dict() for p in self.partitions],
        }


@dataclass(frozen=True)
class OffsetsReport:
    groups: tuple[GroupOffsets, ...]

    @property
    def exit_status(self) -> ExitStatus:
        """3 if a group was refused (live members: a person must stop them), 1 on errors."""
        statuses = {g.status for g in self.groups}
        if "refused" in statuses:
            return ExitStatus.UNSAFE
        if statuses & {"error", "not-found"}:
            return ExitStatus.FAILURE
        return ExitStatus.OK

    def to_dict(self) -> dict[str, Any]:
        return {"groups": [g.to_dict() for g in self.groups]}


def _partitions(cluster: Cluster, topic: str) -> list[int]:
    info = cluster.topic(topic)
    if info is None:
        raise TopicError("topic does not exist", cluster=cluster.name, topic=topic)
    return list(range(info.partitions))


def _copy_one(source: Cluster, local: Cluster, group: str, topics: Sequence[str]) -> GroupOffsets:
    local_coord = GroupCoordinator(local, group)
    source_coord = GroupCoordinator(source, group)
    try:
        _check_idle(local_coord, local, group)
        copies: list[OffsetCopy] = []
        for topic in topics:
            parts = _partitions(source, topic)
            committed = source_coord.committed(topic, parts)
            ends = local.bounds(topic, parts)
            todo: dict[int, tuple[int, str | None]] = {}
            for p in parts:
                c = committed.at(p)
                if c is None:
                    copies.append(OffsetCopy(topic, p, None, None, "no-commit"))
                    continue
                end = ends[p].end
                offset = min(c.offset, end)
                todo[p] = (offset, c.metadata)
                copies.append(
                    OffsetCopy(
                        topic, p, c.offset, offset, "clamped" if offset < c.offset else "copied"
                    )
                )
            if todo:
                local_coord.commit(topic, todo)
        if any(c.source_offset is not None for c in copies):
            return GroupOffsets(group, tuple(copies))
        return _nothing_committed(source_coord, source, group, topics, tuple(copies))
    finally:
        local_coord.close()
        source_coord.close()


def _nothing_committed(
    coord: GroupCoordinator,
    source: Cluster,
    group: str,
    topics: Sequence[str],
    copies: tuple[OffsetCopy, ...],
) -> GroupOffsets:
    """A group without a commit on any partition asked for: unknown to the source (a typo
    must not look like success: ``not-found``, exit 1), or known with nothing committed for
    these topics (``no-commits``: nothing to copy, said so)."""
    listed = source.coordinators.has_group(group)
    described = coord.describe()
    if listed is False or (listed is None and described.unknown):
        return GroupOffsets(
            group,
            copies,
            status="not-found",
            reason=f"cluster {source.name} has no group {group!r} (no members, "
            "no committed offsets): check the group's name",
        )
    state = described.check().state
    return GroupOffsets(
        group,
        copies,
        status="no-commits",
        reason=f"group {group!r} has no committed offset for "
        f"{', '.join(topics)} on cluster {source.name} (state {state}): "
        "nothing copied",
    )


def copy_group_offsets(
    source: Cluster, local: Cluster, groups: Sequence[str], topics: Sequence[str]
) -> OffsetsReport:
    """Copy each group's committed offsets for ``topics`` from ``source`` to ``local``."""
    return _each_group(groups, lambda group: _copy_one(source, local, group, topics))


def _patiently(one: Callable[[str], GroupOffsets], group: str) -> GroupOffsets:
    """``one(group)``, again (its coordinator found again) while a coordinator answers that
    it is loading, not available or not the group's, for up to ``COORDINATOR_WAIT_S``: a
    cluster's first group creates __consumer_offsets, whose coordinators then load it (a fresh
    DR cluster, mirrored without a group, answered NOT_COORDINATOR and the command failed)."""
    return retry_on(
        lambda: one(group),
        Backoff(0.2, 2.0, deadline=COORDINATOR_WAIT_S),
        lambda e: isinstance(e, BrokerError) and e.error_code in COORDINATOR_RETRY_CODES,
        again=lambda e: log.debug("group %s: %s; asking again", group, e),
    )


def _each_group(groups: Sequence[str], one: Callable[[str], GroupOffsets]) -> OffsetsReport:
    """``one`` for each group (``_patiently``); a refusal (live members) or failure is that
    group's result."""
    out = []
    for group in groups:
        try:
            out.append(_patiently(one, group))
        except UnsafeError as e:
            out.append(GroupOffsets(group, status="refused", reason=str(e)))
        except (ClusterError, TopicError) as e:
            out.append(GroupOffsets(group, status="error", reason=str(e)))
    return OffsetsReport(tuple(out))


def reset_group_offsets_to_time(
    local: Cluster, groups: Sequence[str], topics: Sequence[str], timestamp_ms: int
) -> OffsetsReport:
    """Commit each group's offsets for ``topics`` on ``local`` at the first data record whose
    timestamp is at least ``timestamp_ms`` (``wire.seek``), per partition; the log end where
    there is none (as Kafka's ``--reset-offsets --to-datetime`` does). Kafka's own answer
    (ListOffsets by timestamp) is only where the search starts: on a mirror a replayed
    transaction marker, stamped by the local leader when it was written, can capture it."""
    return _each_group(groups, lambda group: _reset_one(local, group, topics, timestamp_ms))


def _reset_one(local: Cluster, group: str, topics: Sequence[str], ts: int) -> GroupOffsets:
    coord = GroupCoordinator(local, group)
    try:
        _check_idle(coord, local, group)
        copies: list[OffsetCopy] = []
        for topic in topics:
            parts = _partitions(local, topic)
            bounds = local.bounds(topic, parts)
            todo: dict[int, tuple[int, str | None]] = {}
            for p in parts:
                todo[p] = (offset_at_time(local, topic, p, ts, bounds[p]), "")
                copies.append(OffsetCopy(topic, p, None, todo[p][0], "reset"))
            coord.commit(topic, todo)
        return GroupOffsets(group, tuple(copies))
    finally:
        coord.close()


def _check_idle(coord: GroupCoordinator, local: Cluster, group: str) -> None:
    described = coord.describe().check()
    if not described.idle:
        raise UnsafeError(
            f"group {group!r} has {described.members} live member(s) on the local cluster "
            f"(state {described.state}): stop those consumers before copying the group's "
            "offsets (Kafka lets only members commit to a group that has them)",
            cluster=local.name,
        )


class OffsetsFollower:
    """Follow mode's ``--sync-groups``: copies the groups' committed offsets from ``source`` to
    ``local`` at once and then every ``interval_s`` seconds, so that a failover finds them
    current (at most one interval, plus the copy's own lag, behind).

    A group with live members on the local cluster (a failover already under way) is left
    alone and reported once; it is copied again when they are gone. ``last`` holds each
    group's latest outcome and when it was last copied."""

    def __init__(
        self,
        source: Cluster,
        local: Cluster,
        groups: Sequence[str],
        topics: Sequence[str],
        interval_s: float,
        stop: threading.Event,
    ) -> None:
        self.source, self.local = source, local
        self.groups, self.topics = tuple(groups), tuple(topics)
        self.interval_s = interval_s
        self.stop = stop
        self.last: dict[str, GroupOffsets] = {}
        self.copied_at: dict[str, float] = {}  # wall-clock time of each group's last copy
        self._reported: dict[str, str | None] = {}
        self._thread = threading.Thread(target=self._run, name="sync-groups", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                self.sync_once()
            except Exception:  # pragma: no cover - a bug; the data copy goes on without it
                log.exception("--sync-groups crashed")
                return
            if self.stop.wait(self.interval_s):
                return

    def sync_once(self) -> OffsetsReport:
        report = copy_group_offsets(self.source, self.local, self.groups, self.topics)
        for g in report.groups:
            self.last[g.group] = g
            problem = None if g.status == "copied" else g.reason
            if g.status == "copied":
                self.copied_at[g.group] = time.time()
            if problem != self._reported.get(g.group):  # log changes, not every interval
                if problem is None:
                    log.info(
                        "group %s: committed offsets copied from %s", g.group, self.source.name
                    )
                else:
                    log.warning("group %s: committed offsets not copied: %s", g.group, problem)
            self._reported[g.group] = problem
        return report

    def to_dict(self) -> list[dict[str, Any]]:
        """Each group's latest outcome, for the follow run's report."""
        out = []
        for group in self.groups:
            g = self.last.get(group)
            d = {
                "group": group,
                "status": g.status if g else "not-run",
                "reason": g.reason if g else None,
                "copied_at": round(self.copied_at[group], 3) if group in self.copied_at else None,
            }
            out.append(d)
        return out
