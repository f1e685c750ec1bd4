"""How fast an empty local partition is brought to its source's log start (filler records).

    python scripts/bench_fill.py [--broker kafka|noida] [--kafka-version 4.1.1] [--log-start N]

Two brokers of one kind play source and local. The source partition is given log start
``--log-start`` (filler batches produced to it, then DeleteRecords) and 1,000 real records;
``partsync sync`` then copies it into an empty local topic, which it must first fill up to the
log start. Prints the run's wall time and the fill rate in offsets per second, and checks that
the local log starts exactly where the source's does. The broker validates every filler record,
so its CPU sets the rate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from partsync._kafka import Connection
from partsync.demo.brokers import Broker, start_noida
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from partsync.wire.filler import filler_batch
from tests.integration.sync_support import bounds, delete_records

TOPIC = "fill"


def _start(kind: str, version: str) -> Broker:
    if kind == "noida":
        return start_noida(Path(tempfile.mkdtemp(prefix="fill-")))
    from tests.support.brokers import start_kafka_jvm

    return start_kafka_jvm(version, Path(tempfile.mkdtemp(prefix="fill-")))


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
    args = ap.parse_args()
    src, dst = _start(args.broker, args.kafka_version), _start(args.broker, args.kafka_version)
    try:
        for b in (src, dst):
            create_topic(b.bootstrap, TOPIC, 1)
        t0 = time.monotonic()
        _advance(src, args.log_start, args.filler_records)
        print(f"source log start {args.log_start:,} made in {time.monotonic() - t0:.1f} s",
              flush=True)  # fmt: skip
        produce(src.bootstrap, TOPIC, make_records(1000, seed=1), partition=0, compression="lz4")
        t0 = time.monotonic()
        argv = [sys.executable, "-m", "partsync", "sync", "--topic", TOPIC, "--sources",
                src.bootstrap, "--local", dst.bootstrap, "--no-group", "--json",
                "--filler-records", str(args.filler_records)]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        wall = time.monotonic() - t0
        doc = json.loads(done.stdout)
        if done.returncode != 0:
            print(json.dumps(doc, indent=1)[:3000], done.stderr[-2000:])
            return 1
        got, want = bounds(dst, TOPIC, 1)[0], bounds(src, TOPIC, 1)[0]
        assert got == want, (got, want)
        assert_partitions_identical(src.bootstrap, dst.bootstrap, TOPIC, 1)
        print(f"{args.broker}: sync with a fill of {args.log_start:,} offsets took {wall:.1f} s: "
              f"{args.log_start / wall / 1e6:.1f} M offsets/s; local log {got.log_start}.."
              f"{got.end} = source's; identical")  # fmt: skip
    finally:
        src.stop()
        dst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
