"""Where a consumer seeking by time should start: the first data record at or after a time.

Kafka answers ListOffsets(timestamp) from the first segment whose largest timestamp is at or
after the time, then the first batch in it whose max timestamp is (``UnifiedLog
.fetchOffsetByTimestamp``), transaction markers included. A mirror's replayed markers carry the
local leader's clock, not the source's (no client can stamp a control batch), so on a mirror of
older transactional data a marker captures the lookup and Kafka answers its offset. This
module answers from data records only, in offset order: the source's own answer wherever its
timestamps grow with its offsets. Pure: batches in, offset out.
"""

from __future__ import annotations

from collections.abc import Iterable

from partsync.wire.batch import Batch
from partsync.wire.records import iter_records

__all__ = ["first_data_at_or_after"]


def first_data_at_or_after(
    batches: Iterable[Batch], timestamp_ms: int, start: int = 0
) -> int | None:
    """The offset of the first data record at or after ``start`` whose timestamp is at least
    ``timestamp_ms``, in ``batches`` (a partition's, in offset order), or None if there is none.
    Control batches (markers) are skipped; a batch whose max timestamp is older is skipped
    without decoding its records."""
    for b in batches:
        if b.is_control or b.max_timestamp < timestamp_ms or b.last_offset < start:
            continue
        for r in iter_records(b):
            if r.offset >= start and r.timestamp >= timestamp_ms:
                return r.offset
    return None
