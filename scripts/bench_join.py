"""What joining the local group costs a one-shot run (issue 15, goal 1).

    python scripts/bench_join.py [--kafka 4.1.1] [--repeat 5] [--partitions 4] [--records 200]

The local cluster is Apache Kafka with its default group settings (a first join of an empty
classic group waits ``group.initial.rebalance.delay.ms``, 3 s); the source is Tansu. Each
repetition copies a fresh topic (``--partitions`` x ``--records`` small lz4 records, so the copy
itself is short) with ``partsync sync``, once per way of claiming partitions:

- ``no-op``: the same sync run again once the copy is in sync (plans, finds nothing, no group);
- ``consumer``: the default group (``--group-protocol auto``, KIP-848 where Kafka offers it);
- ``classic``: ``--group-protocol classic`` (JoinGroup/SyncGroup);
- ``no-group``: ``--no-group`` (no claim at all; only safe when nothing else writes).

It prints each run's wall time and the medians, and the extra over the no-op run. The goal is
a one-shot run with work costing at most 0.5 s more than a no-op run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from partsync.demo.brokers import start_tansu
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from tests.support.kafka_jvm import start_kafka_cluster

WAYS = {
    "consumer": ["--group-protocol", "auto"],
    "classic": ["--group-protocol", "classic"],
    "no-group": ["--no-group"],
}


def _sync(config: Path, topic: str, extra: list[str]) -> tuple[float, dict[str, Any]]:
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--json",
        *extra,
    ]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit(f"sync {topic} {extra} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return wall, json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kafka", default="4.1.1", help="local Apache Kafka version")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--records", type=int, default=200, help="records per partition")
    ap.add_argument("--json", action="store_true", help="end with the medians as one JSON line")
    args = ap.parse_args()
    src = start_tansu("join-src")
    local = start_kafka_cluster(args.kafka, 1, data_dir=Path(tempfile.mkdtemp(prefix="join-")))
    try:
        config = Path(tempfile.mkdtemp(prefix="join-cfg-")) / "partsync.toml"
        config.write_text(
            f'local = "local"\n[clusters.a]\nbootstrap_servers = ["{src.bootstrap}"]\n'
            f'[clusters.local]\nbootstrap_servers = ["{local.bootstrap}"]\n'
        )
        walls: dict[str, list[float]] = {w: [] for w in ["no-op", *WAYS]}
        protocols: dict[str, set[str]] = {w: set() for w in WAYS}
        n = 0
        for rep in range(args.repeat + 1):  # the first round warms up (JIT, __consumer_offsets)
            for way, extra in WAYS.items():
                n += 1
                topic = f"join-{n}"
                create_topic(src.bootstrap, topic, args.partitions)
                create_topic(local.bootstrap, topic, args.partitions)
                for p in range(args.partitions):
                    produce(
                        src.bootstrap,
                        topic,
                        make_records(args.records, seed=n * 100 + p, partition=p),
                        compression="lz4",
                    )
                wall, doc = _sync(config, topic, extra)
                noop, _ = _sync(config, topic, extra)
                assert_partitions_identical(src.bootstrap, local.bootstrap, topic, args.partitions)
                if "group" in doc:
                    protocols[way].add(doc["group"]["protocol"])
                print(f"round {rep} {way:9s} {wall:6.2f} s   no-op {noop:5.2f} s", flush=True)
                if rep:
                    walls[way].append(wall)
                    walls["no-op"].append(noop)
        med = {w: statistics.median(v) for w, v in walls.items()}
        print(
            f"\nKafka {args.kafka} local (group.initial.rebalance.delay.ms default), "
            f"{args.partitions} x {args.records} records, median of {args.repeat}:"
        )
        for way, m in med.items():
            over = "" if way == "no-op" else f"   +{m - med['no-op']:.2f} s over no-op"
            spoke = f"   ({', '.join(sorted(protocols[way]))})" if protocols.get(way) else ""
            print(f"  {way:9s} {m:6.2f} s{over}{spoke}")
        if args.json:
            print(
                json.dumps(
                    {
                        "kafka": args.kafka,
                        "repeat": args.repeat,
                        "median_wall_s": {w: round(m, 3) for w, m in med.items()},
                        "protocols": {w: sorted(p) for w, p in protocols.items()},
                    }
                )
            )
    finally:
        local.stop()
        src.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
