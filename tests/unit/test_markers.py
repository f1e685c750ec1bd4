"""Transaction markers (wire.markers): their type, and that two clusters' markers compare
equal exactly when they end a transaction at the same offset the same way, whatever the
coordinator epoch, producer identity and timestamp each cluster wrote."""

from __future__ import annotations

import struct

import pytest

from partsync.errors import CorruptBatchError, UnsafeError
from partsync.wire.batch import Batch, check_appendable, client_header, seal
from partsync.wire.digest import batch_digest, describe_record_difference
from partsync.wire.markers import ABORT, COMMIT, marker_type, same_marker
from partsync.wire.records import decode_records, encode_varint
from tests.unit.test_batch import TS, build
from tests.unit.test_batch import parse as parse_batch

CONTROL = 0x30  # control + transactional, as a coordinator writes a marker


def _record(key: bytes, value: bytes) -> bytes:
    body = (
        b"\x00"
        + encode_varint(0)
        + encode_varint(0)
        + encode_varint(len(key))
        + key
        + encode_varint(len(value))
        + value
        + encode_varint(0)
    )
    return encode_varint(len(body)) + body


def marker(
    kind: int,
    *,
    offset: int = 40,
    epoch: int = 0,
    producer: tuple[int, int] = (7, 0),
    ts: int = TS,
    version: int = 0,
) -> Batch:
    """A marker as a coordinator writes it: one control record, key (version, type), value
    (version, coordinator epoch)."""
    record = _record(struct.pack(">hh", version, kind), struct.pack(">hi", 0, epoch))
    raw = bytearray(seal(client_header(CONTROL, 1, ts), record, 1))
    struct.pack_into(">q", raw, 0, offset)
    struct.pack_into(">qh", raw, 43, *producer)  # producer id and epoch, CRC-covered: sealed again
    return Batch.parse(memoryview(seal(bytes(raw), record, 1)))


def test_golden_commit_marker() -> None:
    """The bytes of a commit marker at offset 40, field by field."""
    b = marker(COMMIT, epoch=5)
    assert (b.base_offset, b.is_control, b.is_transactional) == (40, True, True)
    assert (b.producer_id, b.producer_epoch, b.record_count, b.last_offset_delta) == (7, 0, 1, 0)
    assert bytes(b.data[61:]) == bytes.fromhex(
        "2000000008000000010c00000000000500"
    )  # length 16, attributes, timestamp and offset deltas, key (4), value (6), no headers
    b.verify_crc()
    (r,) = decode_records(b)
    assert (r.offset, r.control, r.key, r.value) == (40, True, b"\0\0\0\1", b"\0\0\0\0\0\5")


def test_marker_types() -> None:
    assert marker_type(marker(COMMIT)) == COMMIT
    assert marker_type(marker(ABORT)) == ABORT


def test_a_control_record_that_is_no_marker_is_refused() -> None:
    with pytest.raises(UnsafeError, match="type 3, not a transaction marker") as e:
        marker_type(marker(3))
    assert e.value.offset == 40


def test_a_data_batch_is_no_marker() -> None:
    with pytest.raises(CorruptBatchError, match="not a transaction marker"):
        marker_type(Batch.parse(memoryview(build(2))))


def test_markers_compare_by_offset_and_type_only() -> None:
    """Each cluster's coordinator writes its own epoch, producer identity and time."""
    ours = marker(COMMIT, epoch=0, producer=(7, 0), ts=TS)
    theirs = marker(COMMIT, epoch=9, producer=(1234, 3), ts=TS + 5000)
    assert same_marker(ours, theirs) and batch_digest(ours) == batch_digest(theirs)
    assert decode_records(ours)[0].digest() == decode_records(theirs)[0].digest()
    aborted = marker(ABORT, epoch=9, producer=(1234, 3))
    assert not same_marker(ours, aborted) and batch_digest(ours) != batch_digest(aborted)
    assert decode_records(ours)[0].digest() != decode_records(aborted)[0].digest()
    elsewhere = marker(COMMIT, offset=41)
    assert not same_marker(ours, elsewhere) and batch_digest(ours) != batch_digest(elsewhere)
    assert batch_digest(ours) != batch_digest(marker(COMMIT, version=1))


def test_replay_lets_transactional_batches_and_markers_through() -> None:
    txn = Batch.parse(memoryview(build(3, transactional=True, producer=(7, 0, 0))))
    for b in (txn, marker(COMMIT)):
        with pytest.raises(UnsafeError, match="--transactions replay"):
            check_appendable(b)
        check_appendable(b, transactions=True)


def test_diff_describes_a_commit_against_an_abort() -> None:
    ours, theirs = decode_records(marker(COMMIT, epoch=1))[0], decode_records(marker(ABORT))[0]
    said = describe_record_difference({"a": ours, "local": theirs}, "a")
    assert said == "local's transaction marker is an abort, a's a commit"
    same = decode_records(marker(COMMIT, epoch=9, ts=TS + 1))[0]
    assert describe_record_difference({"a": ours, "local": same}, "a") == "records are equal"


def test_a_marker_where_another_cluster_holds_transaction_data_names_both_transactions() -> None:
    from partsync.wire.markers import describe_transactions_at

    data = parse_batch(build(3, base_offset=40, producer=(9, 2, 0), transactional=True))
    said = describe_transactions_at({"local": marker(ABORT, producer=(7, 1)), "a": data}, 40)
    assert said is not None
    assert "local holds the abort marker of producer id 7 (epoch 1) at offset 40" in said
    assert "a holds data of the transaction of producer id 9 (epoch 2) there" in said
    plain = describe_transactions_at(
        {"local": marker(COMMIT), "a": parse_batch(build(2, base_offset=40))}, 40
    )
    assert plain is not None and "a holds data outside any transaction there" in plain
    assert describe_transactions_at({"local": data, "a": data}, 40) is None
    assert describe_transactions_at({"local": marker(ABORT), "a": marker(COMMIT)}, 40) is None
    assert describe_transactions_at({"local": marker(ABORT), "a": None}, 40) is None
