"""The batch layer against golden bytes captured from a real broker (``tests/unit/golden``).

Each ``<codec>.bin`` holds partition 0 of a topic as a Fetch v4 response returned it (data
produced by librdkafka); ``txn_commit.bin`` holds a committed transaction (a transactional
batch and its COMMIT control batch). ``manifest.json`` describes every batch header and the
decoded records; ``scripts/capture_golden.py`` regenerates them.
"""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path
from typing import Any

import pytest

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch, check_appendable, iter_batches, rewrite_for_append
from partsync.wire.digest import batch_digest

with warnings.catch_warnings():
    # kafka-python 3.0 warns (DeprecationWarning) while loading its JSON protocol schemas.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

GOLDEN = Path(__file__).parent / "golden"
MANIFEST: dict[str, Any] = json.loads((GOLDEN / "manifest.json").read_text())
FILES = sorted(MANIFEST["files"])
CODEC_FILES = [f for f in FILES if f != "txn_commit.bin"]

HEADER_FIELDS = (
    "base_offset",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "record_count",
)


def load(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def golden_batches() -> list[tuple[str, int]]:
    return [(f, i) for f in FILES for i in range(len(MANIFEST["files"][f]["batches"]))]


def _hex(field: dict[str, str] | None) -> bytes | None:
    return None if field is None else bytes.fromhex(field["hex"])


def test_every_codec_is_covered() -> None:
    codecs = {MANIFEST["files"][f]["codec"] for f in CODEC_FILES}
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert "txn_commit.bin" in FILES


@pytest.mark.parametrize("name", FILES)
def test_walk_matches_manifest(name: str) -> None:
    meta = MANIFEST["files"][name]
    data = load(name)
    assert len(data) == meta["size"]
    batches = list(iter_batches(data))
    assert len(batches) == meta["batch_count"] == len(meta["batches"])
    assert sum(b.record_count for b in batches if not b.is_control) == meta["record_count"]
    assert batches[-1].next_offset == meta["high_watermark"]
    pos = 0
    for b, want in zip(batches, meta["batches"]):
        assert (pos, b.size) == (want["byte_offset"], want["size"])
        assert b.size == 12 + want["batch_length"]
        assert bytes(b.data) == data[pos : pos + b.size]
        for f in HEADER_FIELDS:
            assert getattr(b, f) == want[f], f
        assert b.codec == want["codec"]
        assert b.is_transactional == want["transactional"]
        assert b.is_control == want["control"]
        assert b.log_append_time == (want["timestamp_type"] == "LogAppendTime")
        assert b.crc_ok()
        b.verify_crc()
        assert not b.has_holes  # a client-produced log has none
        assert [r["offset"] for r in want["records"]] == list(range(b.base_offset, b.next_offset))
        pos += b.size
    # Offsets are contiguous across batches: what a shallow copy must reproduce.
    assert [b.base_offset for b in batches[1:]] == [b.next_offset for b in batches[:-1]]


@pytest.mark.parametrize("name", FILES)
def test_every_cut_of_a_golden_file_yields_the_whole_batches_before_it(name: str) -> None:
    """A Fetch response may be cut anywhere by max bytes: only whole batches come out."""
    data = load(name)
    ends = [b["byte_offset"] + b["size"] for b in MANIFEST["files"][name]["batches"]]
    for cut in range(len(data) + 1):
        got = [b.base_offset for b in iter_batches(data[:cut])]
        whole = [
            b["base_offset"]
            for b, end in zip(MANIFEST["files"][name]["batches"], ends)
            if end <= cut
        ]
        assert got == whole, cut


@pytest.mark.parametrize("name", FILES)
def test_start_skips_to_the_batch_containing_it(name: str) -> None:
    meta = MANIFEST["files"][name]
    data = load(name)
    for offset in range(meta["high_watermark"] + 1):
        got = [b.base_offset for b in iter_batches(data, start=offset)]
        want = [
            b["base_offset"]
            for b in meta["batches"]
            if b["base_offset"] + b["last_offset_delta"] >= offset
        ]
        assert got == want, offset


@pytest.mark.parametrize("name,index", golden_batches())
def test_rewrite_of_golden_batch_changes_only_the_append_fields(name: str, index: int) -> None:
    data = load(name)
    b = list(iter_batches(data))[index]
    out = rewrite_for_append(b, producer_id=987_654, producer_epoch=3, sequence=41)
    original = bytes(b.data)
    assert len(out) == len(original)
    assert out[0:8] == bytes(8)  # BaseOffset 0, as Kafka requires from a client
    assert out[8:17] == original[8:17]  # BatchLength, PartitionLeaderEpoch, Magic
    assert out[21:43] == original[21:43]  # Attributes .. MaxTimestamp
    assert out[43:57] == struct.pack(">qhi", 987_654, 3, 41)
    assert out[57:] == original[57:]  # RecordCount and the records, compressed as stored
    new = Batch.parse(memoryview(out))
    assert new.crc_ok()
    # Same batch at the same offset once the broker assigns it: same digest.
    restored = bytearray(out)
    struct.pack_into(">q", restored, 0, b.base_offset)
    assert batch_digest(Batch.parse(memoryview(restored))) == batch_digest(b)


@pytest.mark.parametrize("name,index", golden_batches())
def test_rewritten_golden_batch_decodes_to_the_manifest_records(name: str, index: int) -> None:
    """An independent reader (kafka-python) accepts the rewritten batch's CRC and finds the
    same records, at offset deltas 0..n-1."""
    data = load(name)
    b = list(iter_batches(data))[index]
    want = MANIFEST["files"][name]["batches"][index]
    kp = DefaultRecordBatch(bytearray(rewrite_for_append(b, 5, 0, 0)))
    assert kp.validate_crc()
    assert kp.base_offset == 0
    got = list(kp)
    assert [r.offset for r in got] == [r["offset"] - b.base_offset for r in want["records"]]
    if b.is_control:
        return
    assert [(r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in got] == [
        (r["timestamp"], _hex(r["key"]), _hex(r["value"]), [(k, _hex(v)) for k, v in r["headers"]])
        for r in want["records"]
    ]


@pytest.mark.parametrize("name", CODEC_FILES)
def test_golden_data_batches_are_appendable(name: str) -> None:
    for b in iter_batches(load(name)):
        check_appendable(b)


def test_golden_transaction_is_refused() -> None:
    txn, marker = iter_batches(load("txn_commit.bin"))
    assert txn.is_transactional and not txn.is_control
    assert marker.is_control and marker.base_sequence == -1 and marker.record_count == 1
    with pytest.raises(UnsafeError, match="transactional batch 0..1"):
        check_appendable(txn)
    with pytest.raises(UnsafeError, match="control batch") as exc:
        check_appendable(marker)
    assert exc.value.offset == 2
