"""The local marker of a replayed transaction (``copy.txn_replay``): the local log must end
at the source marker's offset before the replay ends its transaction, and the marker must land
there, of the same kind, from the replay's producer, replicated and alone."""

from __future__ import annotations

import time
from typing import Any

from partsync.copy.context import CopyContext
from partsync.errors import AppendMismatchError, ClusterError
from partsync.io.broker_errors import broker_error
from partsync.retry import Backoff, retry_until
from partsync.wire.batch import Batch, iter_batches
from partsync.wire.markers import ABORT, COMMIT, marker_name, marker_type

__all__ = ["await_marker", "check_ends_at_marker"]


def check_ends_at_marker(ctx: CopyContext, b: Batch, first: bool) -> None:
    """Before the source marker ``b`` is replayed (every append before it verified), what this
    copy confirmed, and for the copy's ``first`` marker the local log itself, must end at the
    marker's offset."""
    # Nothing else may be on its way there (an earlier transaction's marker; the fence waited
    # for those, and each marker of this copy is checked to end the log).
    leo = ctx.confirmed_end
    if first and leo == b.base_offset:
        _b, leo = ctx.local.bounds_and_log_ends(ctx.topic, [ctx.partition])[ctx.partition]
    if leo != b.base_offset:
        raise AppendMismatchError(
            f"the local log ends at {leo}, not at the source's "
            f"{marker_name(marker_type(b))} marker's offset {b.base_offset}",
            cluster=ctx.local.name,
            topic=ctx.topic,
            partition=ctx.partition,
            offset=b.base_offset,
        )


def await_marker(ctx: CopyContext, b: Batch, commit: bool, producer: tuple[int, int]) -> None:
    """EndTxn is answered before the coordinator writes its markers: wait until the local
    log holds a marker of the same kind at ``b``'s offset, replicated (a Fetch there waits
    for it: a consumer's Fetch returns nothing beyond the high watermark), with nothing
    after it."""
    at = b.base_offset
    kind = marker_name(COMMIT if commit else ABORT)
    where: dict[str, Any] = {
        "cluster": ctx.local.name,
        "topic": ctx.topic,
        "partition": ctx.partition,
        "offset": at,
    }
    conn = ctx.open(ctx.local)
    deadline = time.monotonic() + ctx.opts.produce_timeout_ms / 1000
    while True:
        ctx.check_running()
        got = conn.fetch(ctx.topic, [(ctx.partition, at, 64 << 10)], max_wait_ms=200, min_bytes=1)[
            ctx.partition
        ]
        if got.error_code:
            raise broker_error(got.error_code, f"reading the {kind} marker back", **where)
        landed = list(iter_batches(got.records, start=at))
        if landed:
            break
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the {kind} marker of the transaction replayed for offset {at} did not "
                f"land within {ctx.opts.produce_timeout_ms / 1000:g}s (the local high "
                f"watermark is {got.high_watermark})",
                **where,
            )
    first = landed[0]
    if first.base_offset != at:
        raise AppendMismatchError(
            f"the replayed transaction's marker for offset {at} did not land there (the "
            f"batch at {at} is {first.describe()}): another writer or a changed log; "
            "stopped writing",
            **where,
        )
    if (first.producer_id, first.producer_epoch) != producer:
        raise AppendMismatchError(
            f"the marker at offset {at} ends producer {first.producer_id}'s transaction "
            f"(epoch {first.producer_epoch}), not the replay's (producer {producer[0]}, "
            f"epoch {producer[1]}): another writer or a changed log; stopped writing",
            **where,
        )
    if not first.is_control or (marker_type(first) == COMMIT) != commit:
        got_kind = marker_name(marker_type(first)) if first.is_control else "no marker"
        raise AppendMismatchError(
            f"the local batch at offset {at} is {got_kind}, the source's a {kind} marker: "
            "the local transaction was ended by someone else (its timeout?)",
            **where,
        )

    # Alone and replicated: the log ends right after it and the high watermark has
    # reached it (a Fetch answer's high watermark may be older than its records).
    def replicated() -> tuple[bool, bool]:
        bounds, leo = ctx.local.bounds_and_log_ends(ctx.topic, [ctx.partition])[ctx.partition]
        if leo != at + 1:
            raise AppendMismatchError(
                f"the local log ends at {leo} right after the replayed transaction's "
                f"marker at offset {at}: another writer or a changed log; stopped writing",
                **where,
            )
        return bounds.end == leo, bounds.end == leo

    if not retry_until(replicated, Backoff(0.002, 0.05, deadline=ctx.opts.hw_wait_s)):
        raise ClusterError(
            f"the marker at offset {at} is not replicated after {ctx.opts.hw_wait_s:g}s",
            **where,
        )
