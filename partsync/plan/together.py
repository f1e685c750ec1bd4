"""Which rounds the engine takes together: many partitions' copies in one round, many partitions
per Fetch and per Produce request (``copy.bulk``), instead of a round per partition.

A round taken together skips what only some copies need: comparing several sources with each
other, fillers before a source's log start, filling compaction holes, replaying transactions,
K connections and byte pieces for a long fat link. A copy that needs one of them takes the
partition's usual round; so does one that meets one later (a transaction, a gap), from the
local end the round reached. What it keeps is the check before anything is written: the local
log's last batch must be the serving source's batch at the same offset, byte for byte (the
usual round's ``copy.boundary.check_local_boundary``), read in the same round as the copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from partsync.plan.comparator import Condition, PartitionPlan

__all__ = ["SMALL_OFFSETS", "TOGETHER_MAX", "TOGETHER_MIN", "TogetherRule", "together_ok"]

# The most offsets a copy may miss to be taken together over K connections per broker (bigger
# ones are taken together only over one connection per broker: K connections and pieces are
# what the usual copy gives a long fat link).
SMALL_OFFSETS = 256
# Partitions ready at once that are worth a round together: below this the usual rounds (a few
# at a time, each pipelined) are as fast. And the most one round takes (it works through them a
# wave at a time, ``copy.bulk.WAVE``); more ready partitions run as several rounds at once.
TOGETHER_MIN = 16
TOGETHER_MAX = 1024


@dataclass(frozen=True)
class TogetherRule:
    """The copy options the rule reads (plain data: ``CopyOptions`` lives above ``plan``)."""

    fill_holes: bool = False
    connections_per_broker: int = 1


def together_ok(plan: PartitionPlan, rule: TogetherRule, *, first_round: bool) -> bool:
    """Whether ``plan``'s copy may be taken together with others.

    It must copy from one source (nothing to compare sources with), from the local end (no
    bootstrap), be small or read over one connection per broker, and either start an empty
    local partition (nothing to compare with) or continue one whose last batch the serving
    source still holds (compared in the round), outside the process's first round of the
    partition: that round is the usual one, which also finishes a mirror start that was
    stopped half way (``copy.boundary.trim_bootstrap_head``). Compaction holes being filled
    compare batches record by record (``wire.holes``): the usual rounds do that."""
    if (
        plan.condition is not Condition.BEHIND
        or plan.bootstrap
        or len(plan.serving) != 1
        or not plan.chunks
        or plan.chunks[0].start != plan.local.end
        or plan.missing <= 0
    ):
        return False
    if plan.missing > SMALL_OFFSETS and rule.connections_per_broker != 1:
        return False
    if plan.local.end == plan.local.log_start:
        return True
    source = plan.sources.get(plan.serving[0])
    return (
        not first_round
        and not rule.fill_holes
        and source is not None
        and source.log_start <= plan.local.end - 1
    )
