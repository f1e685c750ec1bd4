"""The copy alone (``sync --no-group``) of two partsync trees, side by side, on Tansu.

    git worktree add /tmp/before <commit>
    python scripts/bench_compare.py /tmp/before . [--rounds 3] [--records 5000]
        [--partitions 8] [--batch-bytes 65536] [--value-size 2000] [--parallelism 8]

One source topic (``--partitions``, lz4, four produce calls of ``--records`` records per
partition, in producer batches of ``--batch-bytes``; about 300 MB as stored by default) is
copied into a fresh local broker by each tree in turn, alternating, ``--rounds`` times; wall
and CPU seconds of the partsync process and CPU seconds of the local broker are printed per
run. Used to measure what a change costs the copy itself, without the group join that
dominates short one-shot runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from partsync.demo.brokers import Broker, start_tansu
from partsync.demo.data import create_topic, make_records, produce

TOPIC = "compare"


def _copy(tree: Path, src: str, dst: str, parallelism: int) -> tuple[float, float, int, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "sync",
        "--topic",
        TOPIC,
        "--sources",
        src,
        "--local",
        dst,
        "--no-group",
        "--json",
        "--parallelism",
        str(parallelism),
    ]
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    doc = json.loads(done.stdout)
    copied = sum(p["bytes"] for t in doc["topics"] for p in t["partitions"])
    return wall, cpu, copied, done.returncode


def _broker_cpu(broker: Broker) -> float:
    """CPU seconds (user + system) a broker process has used so far."""
    assert broker.process is not None
    fields = Path(f"/proc/{broker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("before", type=Path, help="a partsync source tree (e.g. a git worktree)")
    ap.add_argument("after", type=Path, help="another partsync source tree")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=5000, help="records per produce call")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--batch-bytes", type=int, default=64 * 1024, help="producer batch.size")
    ap.add_argument("--value-size", type=int, default=2000, help="bytes per record value")
    ap.add_argument("--parallelism", type=int, default=8, help="partsync sync --parallelism")
    args = ap.parse_args()
    src = start_tansu("compare-src")
    try:
        create_topic(src.bootstrap, TOPIC, args.partitions)
        for p in range(args.partitions):
            for k in range(4):
                recs = make_records(
                    args.records, seed=p * 10 + k, partition=p, value_size=args.value_size
                )
                produce(src.bootstrap, TOPIC, recs, compression="lz4", batch_size=args.batch_bytes)
        for rnd in range(args.rounds):
            for name, tree in (("before", args.before), ("after", args.after)):
                dst = start_tansu(f"compare-{name}-{rnd}")
                try:
                    create_topic(dst.bootstrap, TOPIC, args.partitions)
                    broker0 = _broker_cpu(dst)
                    wall, cpu, copied, code = _copy(
                        tree.resolve(), src.bootstrap, dst.bootstrap, args.parallelism
                    )
                    broker = _broker_cpu(dst) - broker0
                finally:
                    dst.stop()
                print(
                    f"{name} round {rnd}: {wall:.2f} s wall, {cpu:.2f} CPU s, "
                    f"local broker {broker:.2f} CPU s, {copied / 1e6:.1f} MB, exit {code}",
                    flush=True,
                )
    finally:
        src.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
