"""What a partition does after each copy round: the copy engine's one decision, pure.

A partition is copied in rounds (re-plan, fence, verified copy: ``run.task.copy_round``). After
each round its result decides the next step, here, over plain data and without I/O, so that
the engine that runs rounds (``run.engine``) only carries it out:

- ``DONE``: the rounds are over. Unsafe needs a person; handed over means another writer owns
  the partition (its producer epoch fenced ours); a stop request; a one-shot run caught up; or
  a failure that may not be retried (not retriable, or one too many without progress).
- ``AGAIN``: a new round at once with a new producer session: a copy of many partitions taken
  together stopped before a batch this partition's own rounds must see to (``HandedOnError``).
- ``RETRY``: a new round after the backoff, with a new session (the broker's sequence state is
  unknown after a failure) and the clusters' metadata read again (the leader may have moved).
- ``WAIT``: caught up, following: a new round once a source has data at ``wait_from``.

Progress resets the count of failures in a row: a round that appended, or a local log that
moved since the last round (an append whose answer a cut connection lost), starts a new run of
bad luck, so a flaky link that keeps making progress converges in one run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from partsync.errors import HandedOnError
from partsync.plan.results import PartitionResult, Status

__all__ = ["Decision", "RoundsState", "Step", "after_round"]


class Step(enum.Enum):
    DONE = "done"
    AGAIN = "again"
    RETRY = "retry"
    WAIT = "wait"


@dataclass(frozen=True)
class RoundsState:
    """What the decision remembers between a partition's rounds."""

    failures: int = 0  # retriable failures in a row without progress
    # The furthest local end a failed or handed-on round started from: a later round that
    # starts further on saw the log move (progress, even if its own appends failed).
    last_start: int | None = None


@dataclass(frozen=True)
class Decision:
    step: Step
    state: RoundsState
    reset_backoff: bool = False  # the next failure waits the first delay again
    wait_from: int | None = None  # WAIT: the offset a source must have data at


def after_round(
    result: PartitionResult,
    state: RoundsState,
    *,
    follow: bool,
    retries: int,
    stopped: bool,
) -> Decision:
    """The step after a round that ended with ``result``.

    ``follow``: rounds go on after catching up, and failures are retried for as long as the
    run lasts. ``retries``: failures in a row a one-shot run retries. ``stopped``: the
    partition's stop is set (a stop request, a revoke, an expired lease)."""
    if result.status in (Status.UNSAFE, Status.HANDED_OVER) or stopped:
        return Decision(Step.DONE, state)
    if isinstance(result.error, HandedOnError):
        start = max(state.last_start or 0, result.local_end_before)
        return Decision(Step.AGAIN, RoundsState(state.failures, start))
    if result.status is Status.ERROR:
        # The furthest start seen: a round that failed before planning reports the driver's
        # (older) start, which must not count as the log moving.
        moved = state.last_start is not None and result.local_end_before > state.last_start
        progressed = bool(result.batches) or moved
        failures = (0 if progressed else state.failures) + 1
        start = max(state.last_start or 0, result.local_end_before)
        after = RoundsState(failures, start)
        if not result.retriable or (not follow and failures > retries):
            return Decision(Step.DONE, after, reset_backoff=progressed)
        return Decision(Step.RETRY, after, reset_backoff=progressed)
    caught_up = RoundsState(0, state.last_start)
    if not follow:
        return Decision(Step.DONE, caught_up, reset_backoff=True)
    wait_from = result.local_end_after if result.wait_from is None else result.wait_from
    return Decision(Step.WAIT, caught_up, reset_backoff=True, wait_from=wait_from)
