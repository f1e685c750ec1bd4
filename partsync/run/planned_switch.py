"""``partsync promote --planned``: a switch of primaries while both clusters are up (going back
to the original primary after a failback). Lag 0 is checked, not assumed: the consumer groups
being moved have no members on the source, and after the catch-up every source partition ends
where the mirror does, with no transaction open (its last stable offset at its end), and stays
there while watched. Only then is anything promoted, so nothing is at risk and nothing will be
exported when the old primary is made a mirror (``partsync failback``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from partsync.errors import GroupError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.pool import ClusterPool
from partsync.run.link_status import group_members
from partsync.run.planner import SyncRequest

__all__ = ["PlannedSwitch", "in_sync_problems", "refuse_live_groups_on_source", "wait_in_sync"]


@dataclass(frozen=True)
class PlannedSwitch:
    # How long the sources' ends must stay put, and how long to catch up before refusing.
    watch_s: float = 5.0
    timeout_s: float = 120.0


def refuse_live_groups_on_source(source: Cluster, groups: Sequence[str]) -> None:
    """The groups being moved must have stopped on the source: a commit after their last copy
    would be lost."""
    live = {g: n for g in groups if (n := group_members(source, g))}
    if live:
        raise GroupError(
            f"a planned switch moves consumer groups that still have members on cluster "
            f"{source.name}: "
            + ", ".join(f"{g} ({n})" for g, n in sorted(live.items()))
            + "; stop those consumers first, or their last commits are lost",
            cluster=source.name,
        )


def _source_partitions(
    req: SyncRequest, pool: ClusterPool
) -> Iterator[tuple[str, Cluster, str, list[int]]]:
    """(source name, source, topic, its partitions there) for each topic each source has."""
    for topic in req.topics:
        for ref in req.sources:
            source = pool.get(ref)
            info = source.topic(topic, refresh=True)
            if info is not None:
                yield ref.name, source, topic, list(range(info.partitions))


def in_sync_problems(req: SyncRequest, pool: ClusterPool) -> dict[str, tuple[int, int, int]]:
    """Per "source:topic-partition", (local end, source end, source last stable offset) where
    the mirror does not end where its source does, or a source transaction is still open."""
    local = pool.get(req.local)
    out = {}
    for name, source, topic, parts in _source_partitions(req, pool):
        mine = {p: b.end for p, b in local.bounds(topic, parts).items()}
        for p, b in source.bounds(topic, parts).items():
            lso = source.last_stable_offset(topic, p)
            if b.end != mine[p] or lso != b.end:
                out[f"{name}:{topic}-{p}"] = (mine[p], b.end, lso)
    return out


def _source_ends(req: SyncRequest, pool: ClusterPool) -> dict[str, int]:
    return {
        f"{name}:{topic}-{p}": e
        for name, source, topic, parts in _source_partitions(req, pool)
        for p, e in source.log_ends(topic, parts).items()
    }


def wait_in_sync(
    req: SyncRequest,
    pool: ClusterPool,
    catch_up: Callable[[], None],
    *,
    watch_s: float,
    timeout_s: float,
) -> list[str]:
    """Catch up until the mirror ends where its sources do and the sources' ends stay put for
    ``watch_s``; what is still off after ``timeout_s`` (empty: lag 0)."""
    deadline = time.monotonic() + timeout_s
    problems: list[str] = []
    while True:
        try:
            off = in_sync_problems(req, pool)
            if not off:
                before = _source_ends(req, pool)
                time.sleep(watch_s)
                after = _source_ends(req, pool)
                moved = {k: (before[k], e) for k, e in after.items() if before.get(k) != e}
                if not moved:
                    return []
                problems = [
                    f"{k}: the source's end moved {a} -> {b} within {watch_s:g}s (a producer "
                    "still writes there)"
                    for k, (a, b) in sorted(moved.items())
                ]
            else:
                problems = [
                    f"{k}: mirror ends at {mine}, source at {end}"
                    + (f", a source transaction open from {lso}" if lso < end else "")
                    for k, (mine, end, lso) in sorted(off.items())
                ]
        except PartsyncError as e:
            problems = [f"not known to be in sync: {e}"]
        if time.monotonic() >= deadline:
            return problems
        catch_up()
