"""A task whose driver plan is stale by the time it runs (a Spark task scheduled late, a retried
attempt): its first round reuses the plan's bounds only while the local log has not moved."""

from __future__ import annotations

import pytest

from partsync.config import load_config
from partsync.demo.data import create_topic, produce
from partsync.io.pool import ClusterPool
from partsync.plan.results import Status
from partsync.run.engine import run_partition_task
from partsync.run.planner import SyncRequest, plan_topics
from partsync.run.task import tasks_for
from tests.integration.sync_support import Clusters, assert_batches_identical, ends, records

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


def _request(clusters: Clusters, topic: str) -> SyncRequest:
    cfg = load_config(clusters.config)
    return SyncRequest(topics=(topic,), sources=(cfg.resolve("a"),), local=cfg.resolve("local"))


def test_a_task_planned_before_the_local_log_moved_reads_every_bound_again(
    clusters: Clusters, topic: str
) -> None:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    create_topic(local, topic, 1)
    produce(a, topic, records(40, seed=1, partition=0), batch_size=1, linger_ms=0)
    req = _request(clusters, topic)
    with ClusterPool() as pool:
        stale = tasks_for(req, plan_topics(req, pool))
    assert [t.plan.local.end for t in stale] == [0] and stale[0].plan.target_end == 40
    # Meanwhile another run copies the planned range, and the source grows.
    with ClusterPool() as pool:
        fresh = tasks_for(req, plan_topics(req, pool))
        assert run_partition_task(fresh[0], pool).status is Status.SYNCED
    produce(a, topic, records(25, seed=2, partition=0), batch_size=1, linger_ms=0)

    # The stale task must neither call the local log (at 40) ahead of its planned sources (at
    # 40 too: "in sync", or beyond them: "unsafe") nor copy from offset 0: after the fence it
    # finds the local log moved, reads the sources again, and copies what is new.
    result = run_partition_task(stale[0])
    assert result.status is Status.SYNCED, result.reason
    assert result.local_end_after == 65
    assert ends(clusters["local"], topic, 1) == {0: 65}
    assert_batches_identical(clusters["a"], clusters["local"], topic, 0)
