#!/usr/bin/env python
"""Capture golden record-batch bytes from a real broker for the batch layer's unit tests.

For each codec (none, gzip, snappy, lz4, zstd) this produces six records with confluent-kafka
(librdkafka's batch builder) into a fresh topic, in two batches (4 + 2 records, the second one
after a flush), then fetches partition 0 from offset 0 with a hand-written Fetch v4 request and
writes the raw ``records`` bytes of the response to ``tests/unit/golden/<codec>.bin``. A
transactional producer's two committed records give ``txn_commit.bin`` (one transactional data
batch + one control batch holding the COMMIT marker). ``manifest.json`` describes every file:
batch headers and the decoded records, so unit tests can assert decompressed content.

Bytes come from noida-db, which verifies CRCs on append. The same data is also produced to Tansu
and its fetched batches are compared with noida's (printed, and summarised in the manifest).

    python scripts/capture_golden.py [--out tests/unit/golden]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

from partsync.demo.brokers import Broker, recv_exact, start_noida, start_tansu
from partsync.demo.data import COMPRESSIONS, Rec, create_topic, produce

with warnings.catch_warnings():
    # kafka-python 3.0 warns (DeprecationWarning) while loading its JSON protocol schemas.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.record.default_records import DefaultRecordBatch

BASE_TS = 1_700_000_000_000
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Batch v2 header (Kafka's DefaultRecordBatch).
_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc (CRC32C of attributes..end)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
_FIELDS = [
    "base_offset",
    "batch_length",
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
]


def sample_records() -> list[Rec]:
    """Six records: keys, headers (incl. an empty and a null value), one null key, one null
    value, repetitive values so every codec really compresses."""
    hdrs: list[tuple[str, bytes | None]] = [("trace", b"abc-123"), ("empty", b""), ("nul", None)]
    out = []
    for i in range(6):
        key: bytes | None = f"key-{i}".encode()
        value: bytes | None = (f"value-{i} " + "partsync golden " * 8).encode()
        if i == 2:
            key = None
        if i == 4:
            value = None
        out.append(
            Rec(
                key,
                value,
                list(hdrs) if i % 2 == 0 else [("i", str(i).encode())],
                BASE_TS + i * 10,
                0,
            )
        )
    return out


def fetch_raw(broker: Broker, topic: str, partition: int = 0) -> tuple[bytes, int]:
    """Fetch every stored batch of ``topic[partition]`` (Fetch v4, read_uncommitted).

    Returns (raw records bytes from offset 0 up to the high watermark, high watermark).
    Tansu answers min_bytes=0 with no partitions, so min_bytes=1; noida ignores max bytes.
    """
    out = bytearray()
    offset, high = 0, None
    corr = 0
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        while high is None or offset < high:
            corr += 1
            req = FetchRequest(
                replica_id=-1,
                max_wait_ms=200,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
            )
            req.API_VERSION = 4
            req.with_header(correlation_id=corr, client_id="partsync-golden")
            sock.sendall(req.encode(header=True, framed=True))
            size = struct.unpack(">i", recv_exact(sock, 4))[0]
            resp = FetchResponse.decode(recv_exact(sock, size), version=4, header=True)
            part = resp.responses[0].partitions[0]
            if part.error_code:
                raise RuntimeError(f"Fetch {topic}[{partition}]@{offset}: error {part.error_code}")
            high = part.high_watermark
            data = bytes(part.records or b"")
            # The response starts at the batch containing `offset`; keep whole batches only.
            pos = 0
            while pos + 12 <= len(data):
                base, length = struct.unpack_from(">qi", data, pos)
                if pos + 12 + length > len(data):
                    break  # cut short by max bytes
                last = base + struct.unpack_from(">i", data, pos + 23)[0]
                if last >= offset:
                    out += data[pos : pos + 12 + length]
                    offset = last + 1
                pos += 12 + length
            if pos == 0 and offset < high:
                raise RuntimeError(f"Fetch {topic}[{partition}]@{offset}: no whole batch")
    return bytes(out), high


def _bytes_json(b: bytes | None) -> dict[str, str] | None:
    if b is None:
        return None
    out = {"hex": b.hex()}
    try:
        out["utf8"] = b.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return out


def describe(raw: bytes) -> list[dict[str, Any]]:
    """Batch headers (own struct parsing) and records (decoded by kafka-python, CRC checked)."""
    batches = []
    pos = 0
    while pos < len(raw):
        head = dict(zip(_FIELDS, _HEADER.unpack_from(raw, pos)))
        size = 12 + head["batch_length"]
        attrs = head["attributes"]
        kp = DefaultRecordBatch(bytearray(raw[pos : pos + size]))
        if not kp.validate_crc():
            raise AssertionError(f"bad CRC in batch at byte {pos}")
        records = []
        for r in kp:
            if kp.is_control_batch:
                records.append(
                    {
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "control_type": r.type,
                        "control_version": r.version,
                        "key": _bytes_json(bytes(r.key)),
                        "value": _bytes_json(bytes(r.value)),
                    }
                )
                continue
            records.append(
                {
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                    "key": _bytes_json(r.key),
                    "value": _bytes_json(r.value),
                    "headers": [[k, _bytes_json(v)] for k, v in r.headers],
                }
            )
        batches.append(
            {
                "byte_offset": pos,
                "size": size,
                **head,
                "codec": next(k for k, v in CODEC_IDS.items() if v == attrs & 0x7),
                "timestamp_type": "LogAppendTime" if attrs & 0x8 else "CreateTime",
                "transactional": bool(attrs & 0x10),
                "control": bool(attrs & 0x20),
                "records": records,
            }
        )
        pos += size
    return batches


def check_content(batches: list[dict[str, Any]], recs: list[Rec]) -> None:
    """The decoded data records must be exactly what was produced, at offsets 0..n-1."""
    got = [r for b in batches if not b["control"] for r in b["records"]]
    want = [
        {
            "offset": i,
            "timestamp": r.timestamp_ms,
            "key": _bytes_json(r.key),
            "value": _bytes_json(r.value),
            "headers": [[k, _bytes_json(v)] for k, v in r.headers],
        }
        for i, r in enumerate(recs)
    ]
    if got != want:
        raise AssertionError(f"decoded records differ from produced ones:\n{got}\n{want}")


def produce_codec(broker: Broker, topic: str, codec: str, recs: list[Rec]) -> None:
    create_topic(broker.bootstrap, topic, 1)
    # Two produce calls, each flushed: two batches (4 + 2 records).
    produce(broker.bootstrap, topic, recs[:4], compression=codec, linger_ms=50)
    produce(broker.bootstrap, topic, recs[4:], compression=codec, linger_ms=50)


def produce_txn(broker: Broker, topic: str, recs: list[Rec]) -> None:
    from confluent_kafka import Producer

    create_topic(broker.bootstrap, topic, 1)
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": f"golden-{topic}",
            "linger.ms": 50,
            "log_level": 3,
        }
    )
    try:
        p.init_transactions(15)
        p.begin_transaction()
        for r in recs:
            headers: Any = r.headers
            p.produce(
                topic,
                key=r.key,
                value=r.value,
                headers=headers,
                timestamp=r.timestamp_ms or 0,
                partition=0,
            )
        p.commit_transaction(15)
    finally:
        p.close()


def _masked(batch: dict[str, Any]) -> dict[str, Any]:
    """Fields that legitimately differ between two brokers/producers are left out: producer ids
    (noida counts from 1000, Tansu from 1), the CRC covering them, the leader epoch (Tansu writes
    -1 into control batches), and a control batch's wall-clock timestamps."""
    skip = {"crc", "producer_id", "partition_leader_epoch"}
    if batch["control"]:
        skip |= {"base_timestamp", "max_timestamp", "records"}
    return {k: v for k, v in batch.items() if k not in skip}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/unit/golden"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    recs = sample_records()
    txn_recs = [
        Rec(b"txn-key-0", b"txn-value-0", [("t", b"0")], BASE_TS, 0),
        Rec(b"txn-key-1", b"txn-value-1", [], BASE_TS + 1, 0),
    ]
    manifest: dict[str, Any] = {
        "source": "noida-db 0.2.3, produced by confluent-kafka (librdkafka), fetched with Fetch v4",
        "regenerate": "python scripts/capture_golden.py",
        "format": (
            "Each .bin is the concatenated stored batches of partition 0 from offset 0, as a Fetch "
            "v4 response returns them. Per batch: its header fields (byte_offset/size locate it in "
            "the file; crc is the stored CRC32C) and its records decoded by kafka-python. Bytes "
            "fields are {hex, utf8 (when valid UTF-8)} or null for a null key/value/header value; "
            "headers are [name, value] pairs. Control records give control_type (0 abort, 1 "
            "commit) and the raw key/value. Timestamps are ms; data timestamps are fixed, the "
            "control batch's is the broker's wall clock at commit."
        ),
        "files": {},
    }
    with start_noida() as noida, start_tansu() as tansu:
        jobs: list[tuple[str, str, list[Rec]]] = [(c, f"golden-{c}", recs) for c in COMPRESSIONS]
        jobs.append(("txn_commit", "golden-txn", txn_recs))
        for name, topic, data in jobs:
            per_broker = {}
            for broker in (noida, tansu):
                if name == "txn_commit":
                    produce_txn(broker, topic, data)
                else:
                    produce_codec(broker, topic, name, data)
                raw, high = fetch_raw(broker, topic)
                batches = describe(raw)
                check_content(batches, data)
                per_broker[broker.kind] = (raw, high, batches)
            raw, high, batches = per_broker["noida"]
            t_raw, t_high, t_batches = per_broker["tansu"]
            same = [_masked(b) for b in batches] == [_masked(b) for b in t_batches]
            (args.out / f"{name}.bin").write_bytes(raw)
            manifest["files"][f"{name}.bin"] = {
                "codec": "none" if name == "txn_commit" else name,
                "topic": topic,
                "partition": 0,
                "size": len(raw),
                "high_watermark": high,
                "record_count": sum(b["record_count"] for b in batches if not b["control"]),
                "batch_count": len(batches),
                "tansu_same_layout": same,
                "batches": batches,
            }
            print(
                f"{name}.bin: {len(raw)} bytes, {len(batches)} batches, hw {high}; "
                f"tansu: {len(t_raw)} bytes, {len(t_batches)} batches, hw {t_high}, "
                f"same layout: {same}"
            )
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
