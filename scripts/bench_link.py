"""Long fat links: what ``--connections-per-broker K`` buys over a capped, delayed link.

    python scripts/bench_link.py [--mb 24] [--partitions 4] [--rate-mb 2] [--rtt-ms 40]
                                 [--ks 1,2,4,8,16] [--chunk-offsets 50000,2000]

The source (Tansu) is reached through the test suite's link emulator (tests/integration/
kafka_proxy.py, ``LinkShape``: every TCP connection carries at most ``--rate-mb`` MB/s each way
and waits ``--rtt-ms`` per round trip; tc netem is not available here); the local cluster
(Tansu) is direct. For each ``--chunk-offsets`` value and each K, a fresh local topic gets a
one-shot ``partsync sync --no-group --connections-per-broker K``. Reported per run: wall time,
MB/s of source bytes, connections opened through the link, the rate against K=1 (goal: at least
0.75 K) and against K connections' capacity (K x rate; goal: at least 0.6).
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

from partsync.demo.brokers import start_tansu
from partsync.demo.data import assert_partitions_identical, create_topic, make_records, produce
from tests.integration.kafka_proxy import LinkShape, StrictProxy
from tests.integration.sync_support import write_config

TOPIC = "link"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=float, default=24.0, help="approximate source size (stored)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate-mb", type=float, default=2.0, help="per-connection cap, MB/s")
    ap.add_argument("--rtt-ms", type=float, default=40.0)
    ap.add_argument("--ks", default="1,2,4,8,16")
    ap.add_argument("--chunk-offsets", default="50000,2000")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    rate = a.rate_mb * 1e6
    value_size = 400
    per_partition = int(a.mb * 1e6 / a.partitions / (value_size + 60))
    src = start_tansu("link-src")
    rows = []
    try:
        create_topic(src.bootstrap, TOPIC, a.partitions)
        for p in range(a.partitions):
            recs = make_records(per_partition, seed=p, partition=p, value_size=value_size)
            produce(src.bootstrap, TOPIC, recs, compression="none", batch_size=65536)
        shape = LinkShape(rate, a.rtt_ms / 2000)
        for chunk in (int(c) for c in a.chunk_offsets.split(",")):
            base = None
            for k in ks:
                dst = start_tansu("link-dst")
                try:
                    create_topic(dst.bootstrap, TOPIC, a.partitions)
                    with StrictProxy(src.bootstrap, shape=shape) as proxy:
                        tmp = Path(tempfile.mkdtemp(prefix="link-"))
                        cfg = write_config(tmp / "partsync.toml", {"a": src, "local": dst},
                                           addresses={"a": proxy.bootstrap})  # fmt: skip
                        argv = [sys.executable, "-m", "partsync", "--config", str(cfg), "sync",
                                "--topic", TOPIC, "--sources", "a", "--no-group", "--json",
                                "--connections-per-broker", str(k), "--chunk-offsets", str(chunk)]  # fmt: skip
                        t0 = time.monotonic()
                        p = subprocess.run(argv, capture_output=True, text=True, timeout=900,
                                           check=False)  # fmt: skip
                        wall = time.monotonic() - t0
                        if p.returncode:
                            raise SystemExit(f"K={k}: exit {p.returncode}\n{p.stderr[-2000:]}")
                        doc = json.loads(p.stdout)
                        conns = proxy.connections_made
                    assert_partitions_identical(src.bootstrap, dst.bootstrap, TOPIC, a.partitions)
                finally:
                    dst.stop()
                copied = sum(q["bytes"] for t in doc["topics"] for q in t["partitions"])
                mbps = copied / 1e6 / wall
                base = base or mbps
                row = {"chunk_offsets": chunk, "k": k, "wall_s": round(wall, 2),
                       "mb_per_s": round(mbps, 2), "connections": conns,
                       "vs_k1": round(mbps / base, 2),
                       "of_capacity": round(mbps * 1e6 / (k * rate), 2)}  # fmt: skip
                rows.append(row)
                print(f"chunk {chunk:6d}  K={k:2d}  {wall:6.2f} s  {mbps:6.2f} MB/s  "
                      f"{conns:3d} connections  x{row['vs_k1']:.2f} of K=1  "
                      f"{row['of_capacity']:.2f} of capacity", flush=True)  # fmt: skip
    finally:
        src.stop()
    if a.json:
        print(json.dumps({"rate_mb": a.rate_mb, "rtt_ms": a.rtt_ms, "mb": a.mb, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
