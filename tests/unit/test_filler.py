"""Filler batches (``partsync.wire.filler``): valid client appends under every Produce rule,
marked so a killed start can tell them from data, and cheap to make again."""

from __future__ import annotations

import pytest

from partsync.wire.batch import Batch, check_appendable
from partsync.wire.filler import FILLER_HEADER, MAX_FILLER_RECORDS, filler_batch, is_filler
from partsync.wire.records import decode_records
from tests.unit.test_batch import build, parse


def test_a_filler_batch_is_a_valid_client_append() -> None:
    raw = filler_batch(1000, 1_700_000_000_123)
    b = Batch.parse(memoryview(raw))
    assert b.crc_ok() and b.magic == 2 and b.base_offset == 0
    assert (b.record_count, b.last_offset_delta) == (1000, 999)  # no offset holes
    assert b.codec == "zstd" and not b.log_append_time and not b.is_transactional
    assert b.base_timestamp == b.max_timestamp == 1_700_000_000_123
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1)
    check_appendable(b)
    recs = decode_records(b)
    assert [r.offset for r in recs] == list(range(1000))
    assert all(r.key is None and r.value is None for r in recs)
    assert recs[0].headers == ((FILLER_HEADER, None),)
    assert all(r.headers == () for r in recs[1:])


def test_filler_batches_are_recognised_and_data_is_not() -> None:
    assert is_filler(Batch.parse(memoryview(filler_batch(3, 5))))
    assert not is_filler(parse(build(3, codec="zstd")))


def test_only_the_header_changes_between_filler_batches_of_one_size() -> None:
    one, two = filler_batch(5000, 1), filler_batch(5000, 2)
    assert one[61:] == two[61:] and one[:61] != two[:61]


@pytest.mark.parametrize("count", [0, MAX_FILLER_RECORDS + 1])
def test_filler_batch_sizes_are_bounded(count: int) -> None:
    with pytest.raises(ValueError):
        filler_batch(count, 0)
