"""``/healthz`` and ``/readyz``: the pure decision as a table, the facts ``LiveMetrics`` gathers,
and the endpoints over HTTP (no brokers). Also the lag in seconds, which the same follower
facts (the sources' long poll) feed."""

from __future__ import annotations

import threading
from dataclasses import replace
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from partsync.plan.comparator import Bounds, plan_partition
from partsync.plan.results import PartitionResult, Status
from partsync.ui.health import STALL_S, HealthFacts, decide
from partsync.ui.metrics import LiveMetrics, serve_metrics
from tests.support.http import http_get as _get

# A follower 1000 s into its life that ticked and progressed just now, owning 2 planned partitions.
FINE = HealthFacts(
    now=1000.0,
    started=0.0,
    in_group=True,
    joined=True,
    assigned=True,
    unplanned=0,
    owned=2,
    last_tick=999.0,
    last_progress=999.5,
)
LATE = 1000.0 - STALL_S - 1  # just beyond the bound


@pytest.mark.parametrize(
    ("facts", "live", "ready", "reason"),
    [
        (FINE, True, True, "ok"),
        # A spare replica: in the group, nothing assigned, nothing moving: live and ready.
        (replace(FINE, owned=0, last_progress=None), True, True, "ok"),
        (replace(FINE, owned=0, last_progress=LATE), True, True, "ok"),
        # ... which the group never hands partitions: joined is enough.
        (replace(FINE, owned=0, assigned=False), True, True, "ok"),
        # Without a group: ready once the runner handed out its partitions and planned them.
        (replace(FINE, in_group=False, joined=False), True, True, "ok"),
        (replace(FINE, in_group=False, joined=False, assigned=False), True, False, "starting"),
        (replace(FINE, joined=False), True, False, "joining the group"),
        (replace(FINE, unplanned=1), True, False, "first planning round of 1 partition(s)"),
        # Ready once: a rebalance (not joined, new partitions unplanned) keeps it in service.
        (replace(FINE, joined=False, unplanned=3, was_ready=True), True, True, "ok"),
        # Starting: the runner's loop has not ticked yet, within the bound.
        (
            replace(
                FINE, now=10.0, last_tick=None, last_progress=None, assigned=False, joined=False
            ),
            True,
            False,
            "joining the group",
        ),
        (replace(FINE, last_tick=None, last_progress=None), False, False, "has not started"),
        # The control loop stalled.
        (replace(FINE, last_tick=LATE), False, False, "runner loop made no progress"),
        # Owned partitions and nothing moved (no plan, append, answered poll) for too long.
        (replace(FINE, last_progress=LATE), False, False, "on 2 owned partition(s)"),
        (replace(FINE, last_progress=None, started=LATE), False, False, "no plan, append"),
        # Exactly at the bound is still live.
        (replace(FINE, last_progress=1000.0 - STALL_S), True, True, "ok"),
    ],
)
def test_health_decision(facts: HealthFacts, live: bool, ready: bool, reason: str) -> None:
    h = decide(facts)
    assert (h.live, h.ready) == (live, ready)
    shown = h.live_reason if not live else h.ready_reason
    assert reason in shown, shown


def _member(joined: bool) -> SimpleNamespace:
    ev = threading.Event()
    if joined:
        ev.set()
    return SimpleNamespace(group="g", generation=1, rebalances=1, joined=ev)


def test_live_metrics_gather_the_facts_from_the_runner_calls() -> None:
    m = LiveMetrics()
    assert not m.health().ready and m.health().ready_reason == "starting"
    member = _member(False)
    m.watch_group(member)
    assert m.health().ready_reason == "joining the group"
    member.joined.set()
    m.set_owned([("t", 0), ("t", 1)])
    assert m.health().ready_reason.startswith("first planning round of 2")
    m.observe_plan(plan_partition("t", 0, Bounds(0, 5), {"a": Bounds(0, 10)}))
    m.observe(PartitionResult("t", 1, Status.ERROR, 0, 0, 10, reason="unreachable"))
    m.heartbeat(0.0)
    h = m.health()
    assert h.live and h.ready
    member.joined.clear()  # a rebalance later: still ready
    assert m.health().ready
    # Nothing moves and the loop stops ticking: not live, with the reason.
    late = m.health(now=m._mono_started + 10 * STALL_S)
    assert not late.live and "runner loop made no progress" in late.live_reason


def test_a_partition_refused_as_unsafe_does_not_make_the_process_dead() -> None:
    m = LiveMetrics()
    m.set_owned([("t", 0)])
    m.observe(PartitionResult("t", 0, Status.UNSAFE, 5, 5, 10, reason="divergent"))
    later = m._mono_started + 10 * STALL_S
    m.heartbeat(0.0)
    m._last_tick = later  # the loop goes on; the refused partition makes no progress
    assert m.health(now=later).live
    m.observe(PartitionResult("t", 0, Status.ERROR, 5, 5, 10, reason="unreachable"))
    assert not m.health(now=later).live  # retried forever: it must make progress


def test_the_endpoints_answer_200_or_503_with_the_reason() -> None:
    m = LiveMetrics()
    server = serve_metrics(m, 0, "127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _get(f"{base}/healthz") == (200, "ok\n")
        assert _get(f"{base}/readyz") == (503, "starting\n")
        m.set_owned([])  # a spare replica without a group: nothing to plan
        m.heartbeat(0.0)
        assert _get(f"{base}/readyz") == (200, "ok\n")
        code, text = _get(f"{base}/metrics")
        assert code == 200 and "partsync_process_start_time_seconds" in text
        m._last_tick = m._mono_started - 10 * STALL_S  # the loop stalled long ago
        code, text = _get(f"{base}/healthz")
        assert code == 503 and "runner loop made no progress" in text
        assert _get(f"{base}/readyz")[0] == 503
    finally:
        server.shutdown()


def _lag_seconds(m: LiveMetrics) -> dict[int, float]:
    return {
        int(s.labels["partition"]): s.value
        for f in text_string_to_metric_families(m.render())
        for s in f.samples
        if s.name == "partsync_partition_lag_seconds"
    }


def test_lag_seconds_is_source_newest_minus_mirror_newest_as_the_poll_saw_them() -> None:
    m = LiveMetrics()
    m.set_owned([("t", 0)])
    m.observe_plan(plan_partition("t", 0, Bounds(0, 100), {"a": Bounds(0, 100)}))
    assert _lag_seconds(m) == {0: 0.0}  # caught up: 0, whatever the timestamps
    # New data: the poll at the mirror's end (100) sees batch 100..109 stamped at 50 s.
    m.source_high_watermark("a", "t", 0, 110)
    m.source_batch("a", "t", 0, 109, 50_000)
    assert _lag_seconds(m) == {}  # behind, and no batch the poll saw is on the mirror yet
    m.observe(PartitionResult("t", 0, Status.SYNCED, 100, 110, 110, batches=1))
    assert _lag_seconds(m) == {0: 0.0}
    # More arrives (stamped at 62.5 s) and the follower stops copying: 12.5 s behind.
    m.source_high_watermark("a", "t", 0, 130)
    m.source_batch("a", "t", 0, 119, 62_500)
    assert _lag_seconds(m) == {0: 12.5}
    # An older answer (a batch below the newest seen) changes nothing.
    m.source_batch("a", "t", 0, 112, 51_000)
    assert _lag_seconds(m) == {0: 12.5}
    # The mirror passes the seen batch but the source has more the poll did not see: unknown.
    m.observe(PartitionResult("t", 0, Status.SYNCED, 110, 120, 130, batches=1))
    assert _lag_seconds(m) == {}
    m.observe(PartitionResult("t", 0, Status.SYNCED, 120, 130, 130, batches=1))
    assert _lag_seconds(m) == {0: 0.0}
