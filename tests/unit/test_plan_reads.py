"""The plan reads the local cluster and every source at once (``run.planner``); what it
concludes must not depend on which read failed first. Clusters are stand-ins answering the
reads the planner makes; the reads themselves are tested against real brokers."""

from __future__ import annotations

from typing import Any

import pytest

from partsync.config import ClusterRef
from partsync.errors import ClusterError
from partsync.io.cluster import TopicInfo
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import Bounds
from partsync.run.planner import SyncRequest, plan_topics


class Stand:
    def __init__(self, name: str, partitions: int | None, *, bounds_fail: bool = False) -> None:
        self.name, self.partitions, self.bounds_fail = name, partitions, bounds_fail

    def watch(self, topics: object) -> None:
        pass

    def topic(self, topic: str, refresh: bool = False) -> TopicInfo | None:
        if self.partitions is None or topic.startswith("partsync."):  # no promotion recorded
            return None
        leaders = dict.fromkeys(range(self.partitions), 1)
        return TopicInfo(topic, self.partitions, leaders, topic_id=f"id-{self.name}")

    def bounds(self, topic: str, parts: list[int]) -> dict[int, Bounds]:
        if self.bounds_fail:
            raise ClusterError("ListOffsets timed out", cluster=self.name)
        return {p: Bounds(0, 5) for p in parts}

    def log_ends(self, topic: str, parts: list[int]) -> dict[int, int]:
        return dict.fromkeys(parts, 0)

    def topic_configs(self, topic: str) -> tuple[dict[str, str], list[str]]:
        return {}, []


def _plan(monkeypatch: pytest.MonkeyPatch, local: Stand, *sources: Stand) -> Any:
    refs = {s.name: ClusterRef(s.name, (("127.0.0.1", 9),)) for s in (local, *sources)}
    pool = ClusterPool()
    pool._clusters.update({s.name: s for s in (local, *sources)})  # type: ignore[misc]
    req = SyncRequest(("t",), tuple(refs[s.name] for s in sources), refs[local.name])
    [plan] = plan_topics(req, pool)
    return plan


def test_a_source_whose_bounds_fail_still_counts_its_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = _plan(monkeypatch, Stand("L", 4), Stand("a", 4), Stand("b", 6, bounds_fail=True))
    assert plan.refused and "partition counts differ between sources" in plan.refused
    assert "a: 4, b: 6" in plan.refused


def test_a_local_cluster_whose_bounds_fail_is_still_refused_for_its_partition_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = _plan(monkeypatch, Stand("L", 6, bounds_fail=True), Stand("a", 4))
    assert plan.refused and "a local topic cannot shrink" in plan.refused
    assert plan.error is None


def test_a_local_read_failure_past_the_counts_stops_the_run_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The local cluster unreachable is the run's error (``plan_topics`` raises), as it was when
    # the local reads came after the sources'.
    with pytest.raises(ClusterError, match="cluster L: ListOffsets timed out"):
        _plan(monkeypatch, Stand("L", 4, bounds_fail=True), Stand("a", 4))


def test_every_sources_bounds_failing_is_named_after_the_local_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plan = _plan(monkeypatch, Stand("L", 4), Stand("a", 4, bounds_fail=True))
    assert plan.error == "no source of topic t answered"
    assert plan.unreachable == ("a",)
    assert [p.partition for p in plan.partitions] == []
