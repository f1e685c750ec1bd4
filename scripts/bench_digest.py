#!/usr/bin/env python
"""Digest throughput of ``partsync diff`` per core, on synthetic batches (no broker needed).

For each codec it builds record batches with kafka-python's batch builder (what a Java-style
client writes; snappy in xerial framing), then times, on one thread:

* ``batch``: what ``--level batch`` does per fetched batch: CRC32C check + ``Batch.digest()``;
* ``record``: what ``--level record`` does: decompress, parse every record, ``Record.digest()``;
* ``chunk``: grouping batch digests into offset-aligned chunk digests (``iter_chunks``).

Throughput is reported in stored (on-the-wire) bytes per second and, for the record level, also
in uncompressed bytes and records per second. Each measurement is the best of ``--repeat`` runs.

    python scripts/bench_digest.py [--mib 32] [--records-per-batch 500] [--value-size 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import struct
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from partsync.wire.batch import Batch, iter_batches
from partsync.wire.digest import batch_digest, batch_unit, iter_chunks
from partsync.wire.records import iter_records, records_section

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BASE_TS = 1_700_000_000_000
PARAMS = ("mib", "records_per_batch", "value_size", "chunk_offsets", "repeat")


def build_log(codec: str, mib: float, per_batch: int, value_size: int, seed: int = 0) -> bytes:
    """Concatenated batches (absolute base offsets) holding about ``mib`` MiB of record values.

    Values are hex text, about 2:1 compressible like typical JSON/text payloads.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(seed)
    target = int(mib * (1 << 20))
    out = bytearray()
    offset = 0
    produced = 0
    while produced < target:
        b = DefaultRecordBatchBuilder(2, CODECS[codec], 0, 1000, 0, offset, 1 << 30)
        for i in range(per_batch):
            value = rng.randbytes(value_size // 2).hex().encode()
            b.append(
                i,
                BASE_TS + offset + i,
                b"key-%d" % (offset + i),
                value,
                [("trace", b"%016x" % rng.getrandbits(64))],
            )
            produced += len(value)
        raw = bytearray(b.build())
        struct.pack_into(">q", raw, 0, offset)  # as fetched: the broker's base offset
        out += raw
        offset += per_batch
    return bytes(out)


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench(codec: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    log = build_log(codec, args.mib, args.records_per_batch, args.value_size)
    batches: list[Batch] = list(iter_batches(log))
    stored = len(log)
    records = sum(b.record_count for b in batches)
    uncompressed = sum(len(records_section(b)) + 61 for b in batches)

    def batch_level() -> None:
        for b in iter_batches(log):
            if not b.crc_ok():
                raise AssertionError("bad CRC")
            batch_digest(b)

    def record_level() -> None:
        for b in iter_batches(log):
            for r in iter_records(b):
                r.digest()

    units = [batch_unit(b) for b in batches]

    def chunking() -> None:
        for _ in iter_chunks(units, args.chunk_offsets):
            pass

    rows = []
    for level, fn in (("batch", batch_level), ("record", record_level), ("chunk", chunking)):
        secs = best_of(args.repeat, fn)
        rows.append(
            {
                "level": level,
                "codec": codec,
                "batches": len(batches),
                "records": records,
                "stored_bytes": stored,
                "uncompressed_bytes": uncompressed,
                "seconds": secs,
                "stored_bytes_per_s": stored / secs,
                "uncompressed_bytes_per_s": uncompressed / secs,
                "records_per_s": records / secs,
            }
        )
    return rows


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=float, default=32, help="MiB of record values per codec")
    ap.add_argument("--records-per-batch", type=int, default=500)
    ap.add_argument("--value-size", type=int, default=200, help="bytes per record value")
    ap.add_argument("--chunk-offsets", type=int, default=10_000)
    ap.add_argument("--codecs", default=",".join(CODECS), help="comma-separated subset")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args(argv)

    rows = []
    for codec in [c.strip() for c in args.codecs.split(",") if c.strip()]:
        if codec not in CODECS:
            ap.error(f"unknown codec {codec!r}")
        rows.extend(bench(codec, args))

    if args.json:
        doc = {
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "threads": 1,
            "params": {k: getattr(args, k) for k in PARAMS},
            "results": rows,
        }
        print(json.dumps(doc, indent=2))
        return 0

    print(
        f"digest throughput, one core ({platform.machine()}, Python {sys.version.split()[0]}); "
        f"{args.records_per_batch} records/batch, {args.value_size}-byte values"
    )
    head = (
        f"{'level':<7}{'codec':<8}{'stored MiB':>11}{'stored MiB/s':>14}"
        f"{'uncompr. MiB/s':>16}{'records/s':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        if r["level"] == "chunk":
            continue
        print(
            f"{r['level']:<7}{r['codec']:<8}{_mib(r['stored_bytes']):>11}"
            f"{_mib(r['stored_bytes_per_s']):>14}{_mib(r['uncompressed_bytes_per_s']):>16}"
            f"{r['records_per_s']:>12,.0f}"
        )
    chunk = [r for r in rows if r["level"] == "chunk"]
    if chunk:
        rate = min(r["batches"] / r["seconds"] for r in chunk)
        print(
            f"chunk digests: >= {rate:,.0f} batch digests/s grouped (negligible next to digesting)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
