"""The copy alone (``sync --no-group``) of two partsync trees, side by side, on Tansu.

    git worktree add /tmp/before <commit>
    python scripts/bench_compare.py /tmp/before . [--rounds 3] [--records 5000]

One source topic (8 partitions, lz4, about 300 MB as stored) is copied into a fresh local
broker by each tree in turn, alternating, ``--rounds`` times; wall and CPU seconds of the
partsync process are printed per run. Used to measure what a change costs the copy itself,
without the group join that dominates short one-shot runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from partsync.demo.brokers import start_tansu
from partsync.demo.data import create_topic, make_records, produce

TOPIC = "compare"
PARTITIONS = 8


def _copy(tree: Path, src: str, dst: str) -> tuple[float, float, int, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "partsync", "sync", "--topic", TOPIC, "--sources", src,
            "--local", dst, "--no-group", "--json"]  # fmt: skip
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    doc = json.loads(done.stdout)
    copied = sum(p["bytes"] for t in doc["topics"] for p in t["partitions"])
    return wall, cpu, copied, done.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("before", type=Path, help="a partsync source tree (e.g. a git worktree)")
    ap.add_argument("after", type=Path, help="another partsync source tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=5000, help="records per produce call")
    args = ap.parse_args()
    src = start_tansu("compare-src")
    try:
        create_topic(src.bootstrap, TOPIC, PARTITIONS)
        for p in range(PARTITIONS):
            for k in range(4):
                recs = make_records(args.records, seed=p * 10 + k, partition=p, value_size=2000)
                produce(src.bootstrap, TOPIC, recs, compression="lz4")
        for rnd in range(args.rounds):
            for name, tree in (("before", args.before), ("after", args.after)):
                dst = start_tansu(f"compare-{name}-{rnd}")
                try:
                    create_topic(dst.bootstrap, TOPIC, PARTITIONS)
                    wall, cpu, copied, code = _copy(tree.resolve(), src.bootstrap, dst.bootstrap)
                finally:
                    dst.stop()
                print(f"{name} round {rnd}: {wall:.2f} s wall, {cpu:.2f} CPU s, "
                      f"{copied / 1e6:.1f} MB, exit {code}", flush=True)  # fmt: skip
    finally:
        src.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
