"""What a cut connection costs a sync: wall time and runs until the copy converges.

    python scripts/bench_faults.py [--tree PATH] [--cut-rate 0.06] [--mb 12] [--partitions 4]

A source topic (Tansu; lz4, zstd, gzip and snappy partitions, about ``--mb`` MB) is copied to a
fresh noida-db local broker through the strict test proxy, which cuts both connections right
after forwarding a fraction ``--cut-rate`` of the Produce requests (seeded): the append may or
may not have landed, and its answer never comes. ``sync`` is run again until it exits 0 (at
most ``--max-runs``); each run's wall time, exit code and the cuts it met are printed, then the
copy is checked record by record. ``--tree`` runs another partsync source tree (e.g. a git
worktree of an older commit) with this tree's proxy. ``--cut-rate 0`` gives the baseline.
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

from partsync.demo.brokers import start_noida, start_tansu
from partsync.demo.data import (
    assert_partitions_identical,
    create_topic,
    make_records,
    produce,
)
from tests.integration.kafka_proxy import StrictProxy

TOPIC = "faults"
CODECS = ("lz4", "zstd", "gzip", "snappy")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tree", type=Path, default=Path("."), help="partsync source tree to run")
    ap.add_argument("--cut-rate", type=float, default=0.06)
    ap.add_argument("--seed", type=int, default=1306)
    ap.add_argument("--mb", type=float, default=12.0, help="approximate source size")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-runs", type=int, default=8)
    args = ap.parse_args()
    value_size = 400
    per_partition = int(args.mb * 1e6 / args.partitions / (value_size + 60))
    src = start_tansu("faults-src")
    dst = start_noida(Path(tempfile.mkdtemp(prefix="faults-dst-")))
    try:
        create_topic(src.bootstrap, TOPIC, args.partitions)
        create_topic(dst.bootstrap, TOPIC, args.partitions)
        for p in range(args.partitions):
            recs = make_records(per_partition, seed=p, partition=p, value_size=value_size)
            produce(src.bootstrap, TOPIC, recs, compression=CODECS[p % 4], batch_size=16384)
        with StrictProxy(dst.bootstrap) as proxy:
            proxy.kafka.cut_after_produce(args.cut_rate, seed=args.seed)
            total = 0.0
            for run in range(1, args.max_runs + 1):
                cuts_before = proxy.kafka.injected["cut-after-produce"]
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
                    proxy.bootstrap,
                    "--json",
                ]
                done = subprocess.run(
                    argv, cwd=args.tree.resolve(), capture_output=True, text=True, check=False
                )
                wall = time.monotonic() - t0
                total += wall
                cuts = proxy.kafka.injected["cut-after-produce"] - cuts_before
                copied = sum(
                    p["bytes"] for t in json.loads(done.stdout)["topics"] for p in t["partitions"]
                )
                print(
                    f"run {run}: exit {done.returncode} in {wall:.1f} s, {cuts} cuts, "
                    f"{copied / 1e6:.1f} MB copied",
                    flush=True,
                )
                if done.returncode == 0:
                    break
            violations = [str(v) for v in proxy.violations]
        if done.returncode != 0:
            print(
                f"did not converge in {run} runs ({total:.1f} s); "
                f"{len(violations)} Produce rule violations"
            )
            return 1
        assert_partitions_identical(src.bootstrap, dst.bootstrap, TOPIC, args.partitions)
        print(
            f"converged in {run} run(s), {total:.1f} s in all; identical; "
            f"{len(violations)} Produce rule violations"
        )
    finally:
        src.stop()
        dst.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
