"""What filling compaction holes costs (issue 17): a topic Apache Kafka really compacted, mirrored
with ``sync --compaction-holes fill``, against a shallow copy of the same records without holes.

    python scripts/bench_holes.py [--records 200000] [--versions 10] [--codec lz4]
                                  [--kafka-version 4.1.1] [--repeat 3] [--json]

Two Kafka brokers (JVM processes) play source and local. The source gets ``--records`` records
whose keys each appear ``--versions`` times in random order, in a compacted topic whose segments
roll every 100 ms, and the script waits until Kafka's own cleaner has kept only the newest
record of each key (about 1 record in ``--versions``): holes inside batches, whole batches
removed, and empty batches kept for producers' last sequences. The kept records are also
produced, in the same order and codec, to an uncompacted topic without holes (the baseline:
what a plain shallow copy of that data costs). Each run copies one topic into a fresh
compacted local topic and reports wall time and partsync's CPU time (median of ``--repeat``),
offsets per second, and the bytes stored on each side; it checks that the filled mirror holds
every kept record at its source offset.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from partsync.demo.data import Rec, create_topic, produce
from partsync.io.cluster import Cluster
from tests.integration.sync_support import cluster_ref, consumed
from tests.support.brokers import start_kafka_jvm

COMPACT = {"cleanup.policy": "compact"}


def _stored_bytes(bootstrap: str, topic: str) -> int:
    """The bytes of the partition's batches as the broker serves them (one pass)."""
    from partsync.io.reader import read_batches

    with Cluster(cluster_ref(bootstrap, "x")) as c:
        b = c.bounds(topic, [0])[0]
        conn = c.connect_leader(topic, 0)
        try:
            return sum(
                x.size
                for x in read_batches(conn, "x", topic, 0, b.log_start, b.end, fetch_bytes=8 << 20)
            )
        finally:
            conn.close()


def _records(n: int, versions: int, seed: int) -> list[Rec]:
    rng = random.Random(seed)
    keys = [k for k in range(n // versions) for _ in range(versions)]
    rng.shuffle(keys)
    base = 1_700_000_000_000
    return [
        Rec(
            key=b"user-%08d" % k,
            value=(b'{"user":%d,"seq":%d,"state":"' % (k, i))
            + rng.randbytes(60).hex().encode()
            + b'"}',
            timestamp_ms=base + i,
        )
        for i, k in enumerate(keys)
    ]


def _wait_compacted(bootstrap: str, topic: str, want: int, timeout: float = 600) -> int:
    """Wait until Kafka's cleaner has left about ``want`` records (within 5%; the segment
    before the active one may keep a few duplicates) and stopped removing any for 10 s."""
    deadline = time.monotonic() + timeout
    held, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = len(consumed(bootstrap, topic, 0))
        if now != held:
            held, since = now, time.monotonic()
        elif held <= want * 1.05 and time.monotonic() - since >= 10:
            return held
        time.sleep(1)
    raise SystemExit(f"Kafka's cleaner left {held} records of {topic}, expected about {want}")


def run_sync(
    src: str, dst: str, topic: str, fill: bool = False
) -> tuple[float, float, dict[str, Any]]:
    """One ``partsync sync`` of ``topic`` as its own process: wall time, its CPU time, and
    the partition's JSON result (exits on a failed sync)."""
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "sync",
        "--sources",
        src,
        "--local",
        dst,
        "--topic",
        topic,
        "--json",
        "--no-group",
    ]
    if fill:
        argv += ["--compaction-holes", "fill"]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, check=False, cwd=ROOT, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"sync failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, json.loads(p.stdout)["topics"][0]["partitions"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--versions", type=int, default=10, help="records per key (1 in N kept)")
    ap.add_argument("--codec", default="lz4")
    ap.add_argument("--kafka-version", default="4.1.1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-holes-"))
    source = start_kafka_jvm(args.kafka_version, tmp / "src")
    try:
        recs = _records(args.records, args.versions, seed=17)
        create_topic(
            source.bootstrap,
            "compacted",
            1,
            {**COMPACT, "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"},
        )
        rounds = 20
        per = len(recs) // rounds
        for i in range(rounds):
            produce(
                source.bootstrap,
                "compacted",
                recs[i * per : (i + 1) * per],
                partition=0,
                compression=args.codec,
                batch_size=256 << 10,
            )
            time.sleep(0.2)  # the next round rolls the segment
        produce(source.bootstrap, "compacted", [Rec(key=b"roll", value=b"x")], partition=0)
        keys = len({r.key for r in recs}) + 1
        held = _wait_compacted(source.bootstrap, "compacted", keys)
        kept = consumed(source.bootstrap, "compacted", 0)
        end = args.records - args.records % rounds + 1
        for name in ("plain", "warmup"):
            create_topic(source.bootstrap, name, 1)
            produce(
                source.bootstrap,
                name,
                [Rec(key=r[3], value=r[4], headers=list(r[5]), timestamp_ms=r[2]) for r in kept],
                partition=0,
                compression=args.codec,
                batch_size=256 << 10,
            )
        sizes = {t: _stored_bytes(source.bootstrap, t) for t in ("compacted", "plain")}
        runs: dict[str, list[tuple[float, float, dict[str, Any]]]] = {"plain": [], "compacted": []}
        for n in range(args.repeat):  # a fresh local broker per repetition
            local = start_kafka_jvm(args.kafka_version, tmp / f"dst{n}")
            try:
                # A fresh JVM answers its first requests slowly: warm it up with a copy of the
                # baseline's data (not counted), then alternate which topic goes first.
                create_topic(local.bootstrap, "warmup", 1, COMPACT)
                run_sync(source.bootstrap, local.bootstrap, "warmup", fill=False)
                order = list(runs.items())[:: 1 if n % 2 == 0 else -1]
                for topic, results in order:
                    create_topic(local.bootstrap, topic, 1, COMPACT)
                    results.append(
                        run_sync(
                            source.bootstrap, local.bootstrap, topic, fill=topic == "compacted"
                        )
                    )
                if n == 0:
                    mirror = {r[0]: r for r in consumed(local.bootstrap, "compacted", 0)}
                    assert all(mirror[r[0]] == r for r in kept), "a kept record moved"
                    assert len(mirror) == end, (len(mirror), end)
            finally:
                local.stop()
        rows = []
        for topic, results in runs.items():
            last = results[-1][2]
            rows.append(
                {
                    "topic": topic,
                    "fill": topic == "compacted",
                    "offsets": end if topic == "compacted" else len(kept),
                    "records": len(kept),
                    "source_bytes": sizes[topic],
                    "wall_s": statistics.median(r[0] for r in results),
                    "cpu_s": statistics.median(r[1] for r in results),
                    "holes_filled": last["holes_filled"],
                    "batches": last["batches"],
                    "batches_reencoded": last["batches_reencoded"],
                }
            )
        out = {
            "records_produced": args.records,
            "kept": held,
            "codec": args.codec,
            "kafka": args.kafka_version,
            "rows": rows,
        }
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"{args.records} records, {held} kept by Kafka's cleaner ({args.codec}):")
            for r in rows:
                print(
                    f"  {r['topic']:>9} fill={r['fill']!s:5} {r['offsets']:>7} offsets "
                    f"{r['source_bytes'] / 1e6:6.1f} MB stored: {r['wall_s']:.2f} s wall, "
                    f"{r['cpu_s']:.2f} s CPU, {r['offsets'] / r['wall_s']:,.0f} offsets/s, "
                    f"holes {r['holes_filled']}, re-encoded {r['batches_reencoded']}"
                )
    finally:
        source.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
