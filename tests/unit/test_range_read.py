"""How a range read sizes its next fetch after an answer without a whole batch: nothing at all
is asked again as it was (a full response), part of a batch or nothing twice asks for more."""

from __future__ import annotations

import pytest

from partsync._kafka import FetchedPartition
from partsync.io.reader import RangeRead
from tests.unit.diffkit import make_batch, records

BATCH = make_batch(records(3), base_offset=0)
ASKED = 1000


def _answer(data: bytes) -> FetchedPartition:
    return FetchedPartition(
        partition=0, error_code=0, high_watermark=10, log_start_offset=0, records=data
    )


def _read() -> RangeRead:
    return RangeRead("a", "t", 0, 0, 10, ASKED)


@pytest.mark.parametrize(
    ("answers", "least", "size"),
    [
        ([b""], 0, ASKED),  # nothing: a full response, asked again as it was
        ([b"", b""], 4 * ASKED, 4 * ASKED),  # nothing twice: the batch is bigger
        ([BATCH[:30]], 4 * ASKED, 4 * ASKED),  # part of a batch: bigger at once
        ([b"", BATCH, b""], 0, ASKED),  # a whole batch in between starts the count again
    ],
)
def test_the_next_fetch_grows_only_for_a_batch_bigger_than_it(
    answers: list[bytes], least: int, size: int
) -> None:
    read = _read()
    for data in answers:
        read.take(_answer(data))
    assert (read.least, read.request()[1]) == (least, size)


def test_a_whole_batch_moves_the_read_on() -> None:
    read = _read()
    fetched = read.take(_answer(BATCH))
    assert [b.base_offset for b in fetched.batches] == [0]
    assert read.request() == (3, ASKED)
