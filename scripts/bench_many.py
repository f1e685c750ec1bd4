"""The first sync of many one-record partitions: partsync's fixed cost per partition (issue 15,
goal 2: 1000 partitions in at most 1.5 s).

    python scripts/bench_many.py [--partitions 1000] [--rounds 5] [--warmup 1]
                                 [--local kafka|tansu] [--trees /tmp/before,.] [--count]
                                 [--other-partitions 0] [-- extra sync args]

The source is Tansu; the local cluster is Apache Kafka 4.1.1 (a JVM process) or Tansu. Each
round creates a fresh topic of ``--partitions`` partitions on both, one 100-byte record per
source partition, and runs ``partsync sync --no-group`` once per source tree, alternating, so
two trees (e.g. a git worktree of the commit before and this one) are compared side by side.
``--warmup`` rounds come first and are not counted (printed as such): a freshly started Kafka
JVM answers a thousand partitions' first InitProducerId and Produce requests about twice as
slowly as a running one (its JIT and transaction coordinator warm up), and a production cluster
is a running one.
``--other-partitions N`` first creates N partitions of other topics (no records) on both
clusters, as a production cluster holds many topics a run does not sync.
It prints each run's wall time and partsync's CPU time, then the medians per tree. With
``--count`` each run also prints the requests partsync sent, by API (counted in the client).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench_contenders"))

from _bytecode import cache_bytecode

from partsync.demo.brokers import Broker, start_tansu
from partsync.demo.data import Rec, create_topic, produce
from tests.support.kafka_jvm import KafkaCluster, start_kafka_cluster

# Run partsync's CLI with every request counted by API (printed to stderr at exit).
_COUNTING = """
import atexit, collections, sys, threading
from partsync._kafka import connection as C
counts, lock = collections.Counter(), threading.Lock()
send, send_parts = C.BrokerConnection.send, C.BrokerConnection.send_parts
def counted_send(self, api, *a, **k):
    with lock: counts[api] += 1
    return send(self, api, *a, **k)
def counted_parts(self, api, *a, **k):
    with lock: counts[api] += 1
    return send_parts(self, api, *a, **k)
C.BrokerConnection.send, C.BrokerConnection.send_parts = counted_send, counted_parts
atexit.register(lambda: print("REQUESTS " + repr(dict(sorted(counts.items()))), file=sys.stderr))
from partsync.ui.cli import main
sys.argv = ["partsync", *sys.argv[1:]]
main()
"""


def _run(tree: Path, argv: list[str], count: bool) -> tuple[float, float, str]:
    cmd = (
        [sys.executable, "-c", _COUNTING, *argv]
        if count
        else [sys.executable, "-m", "partsync", *argv]
    )
    env = dict(os.environ, PYTHONPATH=str(tree))
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(
        cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    if p.returncode != 0:
        raise SystemExit(f"{tree}: sync exited {p.returncode}:\n{p.stderr[-3000:]}")
    doc = json.loads(p.stdout)
    behind = [q for t in doc["topics"] for q in t["partitions"] if q["local_end_after"] < 1]
    if behind:
        raise SystemExit(f"{tree}: {len(behind)} partitions not copied")
    counted = next((ln for ln in p.stderr.splitlines() if ln.startswith("REQUESTS ")), "")
    return wall, cpu, counted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="rounds first, not counted")
    ap.add_argument("--local", choices=("kafka", "tansu"), default="kafka")
    ap.add_argument("--trees", default=".", help="comma-separated partsync source trees")
    ap.add_argument("--count", action="store_true", help="print each run's requests by API")
    ap.add_argument(
        "--other-partitions",
        type=int,
        default=0,
        help="partitions of other topics on both clusters, made first",
    )
    ap.add_argument("--json", action="store_true", help="end with the medians as one JSON line")
    ap.add_argument("extra", nargs="*", help="more `partsync sync` arguments (after --)")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    cache_bytecode(*trees)
    n = args.partitions

    src = start_tansu("bench-many-src")
    tmp = tempfile.TemporaryDirectory(prefix="bench-many-")
    local: Broker | KafkaCluster | None = None
    try:
        if args.local == "kafka":
            local = start_kafka_cluster("4.1.1", data_dir=Path(tmp.name), heap="1g")
        else:
            local = start_tansu("bench-many-local")
        for k in range(0, args.other_partitions, 1000):
            for broker in (src, local):
                create_topic(
                    broker.bootstrap,
                    f"other-{k // 1000}",
                    min(1000, args.other_partitions - k),
                    timeout=120,
                )
        results: dict[Path, list[tuple[float, float]]] = {t: [] for t in trees}
        for r in range(-args.warmup, args.rounds):
            for tree in trees:
                i = trees.index(tree)
                topic = f"many-{r}-{i}" if r >= 0 else f"many-warmup{-r}-{i}"
                create_topic(src.bootstrap, topic, n)
                create_topic(local.bootstrap, topic, n)
                produce(
                    src.bootstrap, topic, [Rec(b"k", b"v" * 100, partition=p) for p in range(n)]
                )
                argv = [
                    "sync",
                    "--topic",
                    topic,
                    "--sources",
                    src.bootstrap,
                    "--local",
                    local.bootstrap,
                    "--no-group",
                    "--json",
                    *args.extra,
                ]
                wall, cpu, counted = _run(tree, argv, args.count)
                label = f"round {r + 1}" if r >= 0 else "warm-up (not counted)"
                if r >= 0:
                    results[tree].append((wall, cpu))
                print(
                    f"{label} {tree}: wall {wall:.2f} s, partsync CPU {cpu:.2f} s {counted}",
                    flush=True,
                )
        print(
            f"\nfirst sync of {n} one-record partitions, local {args.local}, medians of "
            f"{args.rounds} after {args.warmup} warm-up round(s):"
        )
        medians: dict[str, dict[str, float]] = {}
        for tree, runs in results.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            medians[str(tree)] = {"wall_s": wall, "cpu_s": cpu}
            print(f"  {tree}: wall {wall:.2f} s, partsync CPU {cpu:.2f} s")
        if args.json:
            print(
                json.dumps(
                    {
                        "partitions": n,
                        "local": args.local,
                        "rounds": args.rounds,
                        "warmup": args.warmup,
                        "other_partitions": args.other_partitions,
                        "trees": medians,
                    }
                )
            )
    finally:
        if local is not None:
            local.stop()
        src.stop()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
