"""How fast an empty local partition is brought to its source's log start (filler records).

    python scripts/bench_fill.py [--broker kafka|noida] [--kafka-version 4.1.1] [--log-start N]
                                 [--filler-records N] [--segment-bytes N]

Two brokers of one kind play source and local. The source partition is given log start
``--log-start`` (filler batches produced to it, then DeleteRecords) and 1,000 real records;
``partsync sync`` then copies it into an empty local topic, which it must first fill up to the
log start. Prints the run's wall time and the fill rate in offsets per second, and checks that
the local log starts exactly where the source's does. The broker validates every filler record,
so its CPU sets the rate. Also prints the most the local partition held on disk while the sync
ran (polled every 0.1 s): fillers are deleted as they go, so that stays bounded by what is
appended between two DeleteRecords and one retention check of the broker (the test launcher
sets log.retention.check.interval.ms to 1 s; Kafka's default is 5 minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from partsync._kafka import Connection
from partsync.demo.brokers import Broker, start_noida
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from partsync.wire.filler import filler_batch
from tests.integration.sync_support import bounds, delete_records

TOPIC = "fill"


def _start(kind: str, version: str, data_dir: Path) -> Broker:
    if kind == "noida":
        return start_noida(data_dir)
    from tests.support.brokers import start_kafka_jvm

    return start_kafka_jvm(version, data_dir)


def _disk(data_dir: Path) -> tuple[int, int]:
    """Bytes on disk (allocated blocks: Kafka's index files are sparse) of the topic's
    partition directories under ``data_dir``: in live segments, and in all files, those the
    broker already deleted (renamed ``*.deleted``, removed file.delete.delay.ms later, 60 s by
    default) included."""
    live = total = 0
    for part in data_dir.rglob(f"{TOPIC}-0"):
        for f in part.iterdir():
            n = f.stat().st_blocks * 512
            total += n
            live += 0 if f.name.endswith(".deleted") else n
    return live, total


class _PeakDisk:
    """The largest ``_disk`` seen, polled every 0.1 s while the sync runs."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.peak = data_dir, (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            try:
                live, total = _disk(self.data_dir)
            except OSError:
                continue  # a segment deleted while it was looked at
            self.peak = (max(self.peak[0], live), max(self.peak[1], total))

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._thread.join()
        return self.peak


def _advance(broker: Broker, to: int, per_batch: int) -> None:
    """Give the source partition log start ``to``: filler batches, then DeleteRecords."""
    with Connection(broker.host, broker.port, cluster="source") as conn:
        done = 0
        while done < to:
            n = min(per_batch, to - done)
            conn.send_produce(TOPIC, {0: filler_batch(n, int(time.time() * 1000))}, acks=-1)
            answer = conn.receive_produce()[0]
            assert answer.error_code == 0, answer
            done += n
    delete_records(broker.bootstrap, TOPIC, 0, to)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--broker", choices=("kafka", "noida"), default="kafka")
    ap.add_argument("--kafka-version", default="4.1.1")
    ap.add_argument("--log-start", type=int, default=50_000_000)
    ap.add_argument("--filler-records", type=int, default=500_000)
    ap.add_argument(
        "--segment-bytes",
        type=int,
        default=None,
        help="segment.bytes of the local topic (a segment is freed only once it is "
        "wholly below the log start, and never while it is the active one)",
    )
    args = ap.parse_args()
    dst_dir = Path(tempfile.mkdtemp(prefix="fill-local-"))
    src = _start(args.broker, args.kafka_version, Path(tempfile.mkdtemp(prefix="fill-")))
    dst = _start(args.broker, args.kafka_version, dst_dir)
    try:
        create_topic(src.bootstrap, TOPIC, 1)
        segments = {} if args.segment_bytes is None else {"segment.bytes": str(args.segment_bytes)}
        create_topic(dst.bootstrap, TOPIC, 1, segments)
        t0 = time.monotonic()
        _advance(src, args.log_start, args.filler_records)
        print(
            f"source log start {args.log_start:,} made in {time.monotonic() - t0:.1f} s", flush=True
        )
        produce(src.bootstrap, TOPIC, make_records(1000, seed=1), partition=0, compression="lz4")
        t0 = time.monotonic()
        argv = [
            sys.executable,
            "-m",
            "partsync",
            "sync",
            "--topic",
            TOPIC,
            "--sources",
            src.bootstrap,
            "--local",
            dst.bootstrap,
            "--no-group",
            "--json",
            "--filler-records",
            str(args.filler_records),
        ]
        disk = _PeakDisk(dst_dir)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        peak = disk.stop()
        doc = json.loads(done.stdout)
        if done.returncode != 0:
            print(json.dumps(doc, indent=1)[:3000], done.stderr[-2000:])
            return 1
        got, want = bounds(dst, TOPIC, 1)[0], bounds(src, TOPIC, 1)[0]
        assert got == want, (got, want)
        assert_partitions_identical(src.bootstrap, dst.bootstrap, TOPIC, 1)
        print(
            f"{args.broker}: sync with a fill of {args.log_start:,} offsets took {wall:.1f} s: "
            f"{args.log_start / wall / 1e6:.1f} M offsets/s; local log {got.log_start}.."
            f"{got.end} = source's; identical; the local partition's live segments held "
            f"at most {peak[0] / 1e6:.1f} MB during the run, its files {peak[1] / 1e6:.1f} MB "
            "(deleted segments wait file.delete.delay.ms before they go)"
        )
    finally:
        src.stop()
        dst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
