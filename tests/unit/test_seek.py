"""Seeking by time from data records only (wire.seek): a replayed marker stamped later than
the data around it must not capture the answer, as it does Kafka's ListOffsets(timestamp)."""

from __future__ import annotations

import pytest

from partsync.wire.batch import Batch
from partsync.wire.markers import COMMIT
from partsync.wire.seek import first_data_at_or_after
from tests.unit.test_batch import build, parse
from tests.unit.test_markers import marker


def _data(base: int, timestamp: int, n: int = 3) -> Batch:
    return parse(build(n, base_offset=base, timestamp=timestamp))  # records t, t+10, t+20


def _log() -> list[Batch]:
    late = marker(COMMIT, offset=3, producer=(1, 0), ts=9_999_999)  # the local leader's "now"
    return [_data(0, 1000), late, _data(4, 2000), _data(7, 1500), _data(10, 3000)]


@pytest.mark.parametrize(
    ("timestamp", "start", "offset"),
    [
        (0, 0, 0),
        (1010, 0, 1),  # inside the first batch
        (1021, 0, 4),  # past the first batch: the marker at 3 is skipped
        (1500, 0, 4),  # the first record that new, though a later batch is older
        (2015, 0, 6),
        (2021, 0, 10),  # 7..9 is older (1500..1520): skipped without a match
        (3020, 0, 12),
        (3021, 0, None),  # nothing that new: the caller takes the log end
        (1000, 2, 2),  # from where the search starts (Kafka's hint)
        (1000, 5, 5),
    ],
)
def test_the_first_data_record_at_or_after_a_time(
    timestamp: int, start: int, offset: int | None
) -> None:
    assert first_data_at_or_after(_log(), timestamp, start) == offset
