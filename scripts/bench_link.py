"""Long fat links: what ``--connections-per-broker K`` buys over a capped, delayed link.

    python scripts/bench_link.py [--mb 24] [--partitions 4] [--rate-mb 2] [--rtt-ms 40] [--batch-kb 64]
                                 [--ks 1,2,4,8,16] [--chunk-offsets 50000,2000]
                                 [--modes one-shot,follow]

The source (Tansu) is reached through the test suite's link emulator (tests/integration/
kafka_proxy.py, ``LinkShape``: every TCP connection carries at most ``--rate-mb`` MB/s each way
and waits ``--rtt-ms`` per round trip; tc netem is not available here); the local cluster
(Tansu) is direct. For each ``--chunk-offsets`` value and each K, a fresh local topic gets a
one-shot ``partsync sync --no-group --connections-per-broker K`` (``--modes follow``: the same
with ``--follow``, stopped once the local topic has caught up). Reported per run: wall time,
MB/s of source bytes, connections opened through the link, the rate against K=1 (goal: at least
0.75 K) and against K connections' capacity (K x rate; goal: at least 0.6).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from partsync._kafka import LATEST, Connection
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
    ap.add_argument("--batch-kb", type=int, default=64, help="source batch size, KiB")
    ap.add_argument("--modes", default="one-shot", help="one-shot, follow, or both (comma)")
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
            produce(src.bootstrap, TOPIC, recs, compression="none", batch_size=a.batch_kb << 10)
        shape = LinkShape(rate, a.rtt_ms / 2000)
        runs = [(m, int(c)) for m in a.modes.split(",") for c in a.chunk_offsets.split(",")]
        for mode, chunk in runs:
            base = None
            for k in ks:
                dst = start_tansu("link-dst")
                try:
                    create_topic(dst.bootstrap, TOPIC, a.partitions)
                    with StrictProxy(src.bootstrap, shape=shape) as proxy:
                        tmp = Path(tempfile.mkdtemp(prefix="link-"))
                        cfg = write_config(
                            tmp / "partsync.toml",
                            {"a": src, "local": dst},
                            addresses={"a": proxy.bootstrap},
                        )
                        argv = [
                            sys.executable,
                            "-m",
                            "partsync",
                            "--config",
                            str(cfg),
                            "sync",
                            "--topic",
                            TOPIC,
                            "--sources",
                            "a",
                            "--no-group",
                            "--json",
                            "--connections-per-broker",
                            str(k),
                            "--chunk-offsets",
                            str(chunk),
                        ]
                        t0 = time.monotonic()
                        if mode == "follow":
                            wall, doc = _follow(argv, src.bootstrap, dst.bootstrap, a.partitions)
                        else:
                            done = subprocess.run(
                                argv, capture_output=True, text=True, timeout=900, check=False
                            )
                            wall = time.monotonic() - t0
                            if done.returncode:
                                raise SystemExit(
                                    f"K={k}: exit {done.returncode}\n{done.stderr[-2000:]}"
                                )
                            doc = json.loads(done.stdout)
                        conns = proxy.connections_made
                    assert_partitions_identical(src.bootstrap, dst.bootstrap, TOPIC, a.partitions)
                finally:
                    dst.stop()
                parts = [q for t in doc["topics"] for q in t["partitions"]]
                copied = sum(q["bytes"] for q in parts)
                # The link's rate: bytes over the copy's own time (partitions copy at once),
                # without the process start, metadata and planning the wall time also holds.
                copy_s = max(q["seconds"] for q in parts)
                mbps = copied / 1e6 / copy_s
                base = base or mbps
                row = {
                    "mode": mode,
                    "chunk_offsets": chunk,
                    "k": k,
                    "wall_s": round(wall, 2),
                    "copy_s": round(copy_s, 2),
                    "mb_per_s": round(mbps, 2),
                    "connections": conns,
                    "vs_k1": round(mbps / base, 2),
                    "of_capacity": round(mbps * 1e6 / (k * rate), 2),
                }
                rows.append(row)
                print(
                    f"{mode:8s} chunk {chunk:6d}  K={k:2d}  wall {wall:6.2f} s  copy {copy_s:6.2f} s  "
                    f"{mbps:6.2f} MB/s  {conns:3d} connections  x{row['vs_k1']:.2f} of K=1  "
                    f"{row['of_capacity']:.2f} of capacity",
                    flush=True,
                )
    finally:
        src.stop()
    if a.json:
        print(json.dumps({"rate_mb": a.rate_mb, "rtt_ms": a.rtt_ms, "mb": a.mb, "rows": rows}))
    return 0


def _ends(bootstrap: str, partitions: int) -> dict[int, int]:
    host, _, port = bootstrap.rpartition(":")
    with Connection(host, int(port), cluster="bench") as c:
        got = c.list_offsets(TOPIC, list(range(partitions)), LATEST)
    return {p: off for p, (_code, off) in got.items()}


def _follow(argv: list[str], src: str, dst: str, partitions: int) -> tuple[float, dict[str, Any]]:
    """Run ``sync --follow`` until the local topic has caught up with the backlog, then stop it
    (SIGTERM) and read its report: the seconds until caught up, and the JSON."""
    target = _ends(src, partitions)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [*argv, "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while _ends(dst, partitions) != target:
            if proc.poll() is not None or time.monotonic() - t0 > 900:
                assert proc.stderr is not None  # stderr=PIPE
                raise SystemExit(f"follow run ended or stalled: {proc.stderr.read()[-2000:]}")
            time.sleep(0.05)
        wall = time.monotonic() - t0
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return wall, json.loads(out)


if __name__ == "__main__":
    sys.exit(main())
