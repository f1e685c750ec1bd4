"""Transaction markers: the control batches a transaction coordinator writes on EndTxn.

A marker is one control record whose key is (version int16, type int16): type 0 ends its
producer's transaction in the partition with an abort, 1 with a commit. Its value (version,
coordinator epoch) and the batch's producer epoch and timestamp are the writing cluster's own,
so two clusters' markers at the same offset are the same marker when their types are.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from partsync.errors import CorruptBatchError, PartsyncError, UnsafeError
from partsync.wire.batch import Batch
from partsync.wire.records import iter_records

__all__ = [
    "ABORT",
    "COMMIT",
    "control_key",
    "describe_transactions_at",
    "marker_name",
    "marker_type",
    "same_marker",
]

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")


def control_key(batch: Batch) -> bytes:
    """The key of the one control record a control batch holds (version and type)."""
    records = list(iter_records(batch)) if batch.is_control else []
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptBatchError(
            f"{batch.describe()} is not a transaction marker (one control record keyed by "
            "version and type)",
            offset=batch.base_offset,
        )
    return records[0].key


def marker_type(batch: Batch) -> int:
    """``ABORT`` or ``COMMIT``: the type of the marker ``batch`` holds."""
    kind: int = _KEY.unpack_from(control_key(batch))[1]
    if kind not in (ABORT, COMMIT):
        raise UnsafeError(
            f"control batch at offset {batch.base_offset} holds a control record of type {kind}, "
            "not a transaction marker (commit 1, abort 0): it cannot be replayed",
            offset=batch.base_offset,
        )
    return kind


def marker_name(kind: int) -> str:
    return "commit" if kind == COMMIT else "abort"


def same_marker(a: Batch, b: Batch) -> bool:
    """Whether two clusters hold the same marker: both control batches at the same offset,
    ending a transaction the same way."""
    return (
        a.is_control
        and b.is_control
        and a.base_offset == b.base_offset
        and marker_type(a) == marker_type(b)
    )


def describe_transactions_at(batches: Mapping[str, Batch | None], offset: int) -> str | None:
    """Where clusters disagree at ``offset`` because one holds a transaction marker and another
    data: which transaction, by producer id, each holds there (a replayed
    transaction that its local coordinator ended early, e.g. aborted when no run resumed it
    within the transaction timeout, reads like this). None when that is not the difference."""
    markers = {n: b for n, b in batches.items() if b is not None and b.is_control}
    data = {n: b for n, b in batches.items() if b is not None and not b.is_control}
    if not markers or not data:
        return None
    parts = []
    for n, b in markers.items():
        try:
            kind = marker_name(marker_type(b))
        except PartsyncError:
            kind = "control"
        parts.append(
            f"{n} holds the {kind} marker of producer id {b.producer_id} (epoch "
            f"{b.producer_epoch}) at offset {offset}"
        )
    for n, b in data.items():
        what = (
            f"data of the transaction of producer id {b.producer_id} (epoch {b.producer_epoch})"
            if b.is_transactional
            else "data outside any transaction"
        )
        parts.append(f"{n} holds {what} there, in batch {b.base_offset}..{b.last_offset}")
    return (
        "; ".join(parts) + ": a transaction ended at a different offset, as when a replayed "
        "transaction's local coordinator aborted it (no run resumed it within "
        "--transaction-timeout)"
    )
