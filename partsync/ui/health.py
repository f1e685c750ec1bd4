"""Liveness and readiness of a follower, as ``/healthz`` and ``/readyz`` answer them: a pure
decision over plain facts (``decide``), table-tested; ``LiveMetrics`` gathers the facts and the
metrics server answers with them.

Ready: the process joined its group (or runs without one) and each partition it was given has
had its first planning round (a plan or a round's result), with or without partitions: a spare
replica with nothing assigned is ready, so it does not stall a rollout. Once ready it stays
ready (a rebalance later does not take it out of service).

Live: the runner's control loop ticked within ``stall_s`` and, while the process owns
partitions, something moved within ``stall_s``: a plan, a round's end, a verified append, a
source long poll answered (an idle poll that found nothing new counts), an assignment. Every
wait of a follower is bounded well below the default (the long poll by --follow-wait-ms, a
caught-up worker re-plans every 30 s, retries back off to at most 30 s), so only a stuck
process stays silent that long.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STALL_S", "Health", "HealthFacts", "decide"]

STALL_S = 120.0  # no progress this long: not live


@dataclass(frozen=True, slots=True)
class HealthFacts:
    """What the process knows about itself, times on one monotonic clock (seconds)."""

    now: float
    started: float  # when the metrics (the follower) started
    in_group: bool  # runs with a group (else it writes every partition given)
    joined: bool  # the group gave it its assignment (possibly empty); ignored without a group
    # The runner handed out its first partitions (possibly none); only without a group: a group
    # hands a spare member nothing at all.
    assigned: bool
    unplanned: int  # partitions owned now that have not had a planning round yet
    owned: int  # partitions owned now
    last_tick: float | None  # the runner's control loop, last seen (None: not started)
    last_progress: float | None  # plan, round end, append, answered long poll, assignment
    was_ready: bool = False  # answered ready before (readiness latches)
    stall_s: float = STALL_S


@dataclass(frozen=True, slots=True)
class Health:
    live: bool
    ready: bool
    live_reason: str  # why not live, or "ok"
    ready_reason: str  # why not ready, or "ok"


def _live(f: HealthFacts) -> tuple[bool, str]:
    if f.last_tick is None:
        if f.now - f.started > f.stall_s:
            return False, f"the runner has not started {f.now - f.started:.0f}s after start"
        return True, "ok"
    if f.now - f.last_tick > f.stall_s:
        return False, f"the runner loop made no progress for {f.now - f.last_tick:.0f}s"
    if f.owned:
        since = f.now - max(f.last_progress or f.started, f.started)
        if since > f.stall_s:
            return False, (
                f"no plan, append or answered long poll for {since:.0f}s "
                f"on {f.owned} owned partition(s)"
            )
    return True, "ok"


def _ready(f: HealthFacts) -> tuple[bool, str]:
    if f.was_ready:
        return True, "ok"
    if f.in_group:
        if not f.joined:  # the group gives nothing to a spare member, but it does answer
            return False, "joining the group"
    elif not f.assigned:
        return False, "starting"
    if f.unplanned:
        return False, f"first planning round of {f.unplanned} partition(s) under way"
    return True, "ok"


def decide(f: HealthFacts) -> Health:
    """Live and ready, each with the reason when not (a process that is not live is not
    ready either: its partitions make no progress)."""
    live, live_reason = _live(f)
    ready, ready_reason = _ready(f)
    if not live:
        ready, ready_reason = False, live_reason
    return Health(live, ready, live_reason, ready_reason)
