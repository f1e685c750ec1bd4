"""partsync.wire.records: decompress every codec and parse v2 records, against golden broker bytes,
kafka-python's batch builder and a hand-written encoder (tests/unit/diffkit.py)."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from partsync.errors import CorruptBatchError
from partsync.wire.batch import Batch, iter_batches
from partsync.wire.records import Record, decode_records, decompress, iter_records
from tests.unit import diffkit
from tests.unit.diffkit import BASE_TS, R, make_batch

GOLDEN = Path(__file__).parent / "golden"
MANIFEST = GOLDEN / "manifest.json"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _batch(raw: bytes) -> Batch:
    (b,) = list(iter_batches(raw))
    return b


def _hex(field: dict[str, str] | None) -> bytes | None:
    return None if field is None else bytes.fromhex(field["hex"])


def _golden_files() -> list[str]:
    if not MANIFEST.exists():
        return []
    return sorted(json.loads(MANIFEST.read_text())["files"])


# -- golden bytes from a real broker ---------------------------------------------------------


@pytest.mark.skipif(not MANIFEST.exists(), reason="no golden batches captured")
@pytest.mark.parametrize("name", _golden_files())
def test_golden_batches_decode_to_the_manifest(name: str) -> None:
    meta = json.loads(MANIFEST.read_text())["files"][name]
    raw = (GOLDEN / name).read_bytes()
    batches = list(iter_batches(raw))
    assert len(batches) == meta["batch_count"]
    for b, want in zip(batches, meta["batches"]):
        assert b.codec == want["codec"]
        got = decode_records(b)
        assert len(got) == len(want["records"])
        for r, w in zip(got, want["records"]):
            assert r.offset == w["offset"]
            assert r.timestamp == w["timestamp"]
            assert r.key == _hex(w["key"])
            assert r.value == _hex(w["value"])
            assert r.control == want["control"]
            if not want["control"]:
                assert list(r.headers) == [(k, _hex(v)) for k, v in w["headers"]]


@pytest.mark.skipif(not MANIFEST.exists(), reason="no golden batches captured")
def test_golden_codecs_hold_the_same_records() -> None:
    per_codec = {}
    for codec in CODECS:
        raw = (GOLDEN / f"{codec}.bin").read_bytes()
        per_codec[codec] = [r for b in iter_batches(raw) for r in iter_records(b)]
    assert len(per_codec["none"]) == 6
    for codec in CODECS[1:]:
        assert per_codec[codec] == per_codec["none"], codec


@pytest.mark.skipif(not (GOLDEN / "txn_commit.bin").exists(), reason="no golden batches captured")
def test_golden_control_record_is_flagged() -> None:
    batches = list(iter_batches((GOLDEN / "txn_commit.bin").read_bytes()))
    marker = decode_records(batches[-1])
    assert [r.control for r in marker] == [True]
    assert marker[0].key == b"\x00\x00\x00\x01"  # version 0, type 1 = COMMIT
    assert not any(r.control for r in decode_records(batches[0]))


# -- kafka-python's builder (another client's framing, e.g. xerial snappy) -------------------


def _kafka_python_batch(codec: str, n: int = 50) -> tuple[bytes, list[R]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder
    recs = diffkit.records(n, seed=3)
    builder = DefaultRecordBatchBuilder(2, diffkit.CODEC_IDS[codec], 0, -1, -1, -1, 1 << 30)
    for i, r in enumerate(recs):
        builder.append(i, r.ts, r.key, r.value, list(r.headers))
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, 0, 1000)  # as fetched: the broker's base offset
    return bytes(buf), recs


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode(codec: str) -> None:
    raw, recs = _kafka_python_batch(codec)
    b = _batch(raw)
    assert b.crc_ok() and b.codec == codec
    got = decode_records(b)
    assert [r.offset for r in got] == list(range(1000, 1050))
    assert [(r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (r.ts, r.key, r.value, tuple(r.headers)) for r in recs
    ]
    if codec == "snappy":
        assert bytes(b.data[61:69]) == b"\x82SNAPPY\x00"  # kafka-python writes xerial framing


# -- hand-built batches: framings, timestamps, nulls ----------------------------------------


@pytest.mark.parametrize(
    ("codec", "opts"),
    [
        ("none", {}),
        ("gzip", {}),
        ("snappy", {"snappy_framing": "xerial"}),
        ("snappy", {"snappy_framing": "raw"}),
        ("lz4", {}),
        ("zstd", {}),
        ("zstd", {"zstd_frames": 3}),
    ],
)
def test_every_codec_and_framing(codec: str, opts: dict[str, Any]) -> None:
    recs = diffkit.records(40, seed=1)
    b = _batch(make_batch(recs, base_offset=7, codec=codec, **opts))
    got = decode_records(b)
    assert [r.offset for r in got] == list(range(7, 47))
    assert [r.value for r in got] == [r.value for r in recs]


def test_xerial_snappy_with_several_blocks() -> None:
    data = bytes(range(256)) * 500
    assert decompress(2, diffkit.xerial(data, block=1000)) == data


def test_nulls_empties_and_headers() -> None:
    recs = [
        R(None, b"v", (), BASE_TS),
        R(b"", None, (("h", None), ("e", b""), ("ü", b"\xff")), BASE_TS + 5),
        R(b"k", b"", (), BASE_TS - 3),
    ]
    got = decode_records(_batch(make_batch(recs, base_offset=100)))
    assert got == [
        Record(100, BASE_TS, None, b"v", ()),
        Record(101, BASE_TS + 5, b"", None, (("h", None), ("e", b""), ("ü", b"\xff"))),
        Record(102, BASE_TS - 3, b"k", b"", ()),
    ]


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    recs = diffkit.records(3)
    got = decode_records(_batch(make_batch(recs, log_append_time=BASE_TS + 999)))
    assert [r.timestamp for r in got] == [BASE_TS + 999] * 3


def test_compacted_batch_keeps_its_offsets() -> None:
    recs = [R(b"a", b"1", offset_delta=0), R(b"b", b"2", offset_delta=3)]
    got = decode_records(_batch(make_batch(recs, base_offset=10, last_offset_delta=4)))
    assert [r.offset for r in got] == [10, 13]


def test_large_varints_round_trip() -> None:
    value = b"x" * 300_000  # length needs a 3-byte varint
    recs = [R(b"k", value, ts=BASE_TS), R(b"k2", b"v", ts=BASE_TS + (1 << 40))]
    got = decode_records(_batch(make_batch(recs)))
    assert got[0].value == value and got[1].timestamp == BASE_TS + (1 << 40)


# -- corrupt input -----------------------------------------------------------------------------


def test_record_count_mismatch() -> None:
    raw = make_batch(diffkit.records(3), record_count=4)
    with pytest.raises(CorruptBatchError, match="declares 4 records but holds 3"):
        decode_records(_batch(raw))


def test_cut_short_record() -> None:
    raw = bytearray(make_batch(diffkit.records(2)))
    raw = raw[:-5]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptBatchError, match="malformed record #1"):
        decode_records(_batch(bytes(raw)))


def test_offset_delta_outside_the_batch() -> None:
    raw = make_batch([R(b"a", b"1", offset_delta=5)], last_offset_delta=0)
    with pytest.raises(CorruptBatchError, match="offset delta 5 outside 0..0"):
        decode_records(_batch(raw))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_garbage_compressed_bytes(codec: str) -> None:
    raw = bytearray(make_batch(diffkit.records(5), codec=codec))
    raw[61:] = b"\x82SNAPPY\x00" + bytes(20) if codec == "snappy" else b"garbage!" * 4
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(CorruptBatchError, match=f"cannot decompress {codec}"):
        decode_records(_batch(bytes(raw)))


def test_unknown_codec() -> None:
    raw = bytearray(make_batch(diffkit.records(1)))
    struct.pack_into(">h", raw, 21, 6)
    with pytest.raises(CorruptBatchError, match="unknown compression codec 6"):
        decode_records(_batch(bytes(raw)))


# -- the record digest -------------------------------------------------------------------------


def test_record_digest_covers_every_field() -> None:
    base = Record(5, BASE_TS, b"k", b"v", (("h", b"1"),))
    variants = [
        Record(6, BASE_TS, b"k", b"v", (("h", b"1"),)),
        Record(5, BASE_TS + 1, b"k", b"v", (("h", b"1"),)),
        Record(5, BASE_TS, b"K", b"v", (("h", b"1"),)),
        Record(5, BASE_TS, None, b"v", (("h", b"1"),)),
        Record(5, BASE_TS, b"", b"v", (("h", b"1"),)),
        Record(5, BASE_TS, b"k", b"w", (("h", b"1"),)),
        Record(5, BASE_TS, b"k", None, (("h", b"1"),)),
        Record(5, BASE_TS, b"k", b"v", (("h", b"2"),)),
        Record(5, BASE_TS, b"k", b"v", (("h", None),)),
        Record(5, BASE_TS, b"k", b"v", (("h1", b""),)),
        Record(5, BASE_TS, b"k", b"v", ()),
        Record(5, BASE_TS, b"k", b"v", (("h", b"1"),), control=True),
        Record(5, BASE_TS, b"kv", b"", (("h", b"1"),)),  # bytes moved between fields
    ]
    digests = {base.digest()} | {v.digest() for v in variants}
    assert len(digests) == len(variants) + 1
    assert Record(5, BASE_TS, b"k", b"v", (("h", b"1"),)).digest() == base.digest()


def test_record_digest_ignores_batch_layout() -> None:
    recs = diffkit.records(10)
    one = [
        r for b in iter_batches(diffkit.log_of(recs, [10], codec="gzip")) for r in iter_records(b)
    ]
    three = [
        r
        for b in iter_batches(diffkit.log_of(recs, [3, 3, 4], codec="lz4"))
        for r in iter_records(b)
    ]
    assert [r.digest() for r in one] == [r.digest() for r in three]


def test_pure_layers_import_no_network_or_kafka_module() -> None:
    # What the modules import themselves (crc32c pulls socket in through importlib.metadata, so
    # sys.modules alone cannot tell).
    allowed = {
        "__future__",
        "functools",
        "gzip",
        "hashlib",
        "struct",
        "zlib",
        "collections.abc",
        "dataclasses",
        "typing",
        "lz4.frame",
        "snappy",
        "zstandard",
        "partsync.wire.batch",
        "partsync.wire.markers",
        "partsync.errors",
        "partsync.wire.records",
    }
    for name in ("records", "digest"):
        tree = ast.parse(
            (Path(__file__).parents[2] / "partsync" / "wire" / f"{name}.py").read_text()
        )
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imported <= allowed, (name, imported - allowed)
    code = (
        "import sys, partsync.wire.records, partsync.wire.digest; "
        "bad = [m for m in ('kafka', 'pyspark', 'partsync._kafka', 'partsync.io.cluster') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
