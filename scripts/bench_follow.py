#!/usr/bin/env python
"""Follow-mode latency: from a record's delivery on the source to its arrival on the local cluster.

Starts a source and a local test broker (Tansu by default), one ``partsync sync --follow``
process (in a group, as in production), then produces ``--records`` single-record batches at
``--rate`` per second spread over the partitions. A consumer on the local cluster reads them
back; the latency of a record is its arrival at that consumer minus its delivery report on the
source. A few warm-up records go through the whole path first and are not counted. Reported: p50 / p95 / p99 / max in milliseconds, and the follower's CPU time.

    python scripts/bench_follow.py [--records 500] [--rate 50] [--partitions 4]
                                   [--follow-wait-ms 500] [--broker tansu|noida] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from partsync.demo.brokers import start_noida, start_tansu
from partsync.demo.data import create_topic


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--rate", type=float, default=50.0, help="records per second")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--follow-wait-ms", type=int, default=500)
    ap.add_argument(
        "--broker",
        choices=("tansu", "noida", "kafka"),
        default="tansu",
        help="test brokers for source and local; kafka: Apache Kafka "
        "(--kafka-version) JVMs from Maven jars",
    )
    ap.add_argument("--kafka-version", default="4.1.1")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    from confluent_kafka import Consumer, Producer, TopicPartition

    if a.broker == "kafka":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.support.brokers import start_kafka_jvm

        def start() -> Any:
            return start_kafka_jvm(a.kafka_version, Path(tempfile.mkdtemp(prefix="follow-k-")))
    else:
        start = start_tansu if a.broker == "tansu" else start_noida
    src, dst = start(), start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    follower = None
    try:
        topic = "follow-latency"
        create_topic(src.bootstrap, topic, a.partitions)
        create_topic(dst.bootstrap, topic, a.partitions)
        cfg = tmp / "partsync.toml"
        cfg.write_text(
            f'local = "local"\n[clusters.src]\nbootstrap_servers = ["{src.bootstrap}"]\n'
            f'[clusters.local]\nbootstrap_servers = ["{dst.bootstrap}"]\n'
        )
        env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
        follower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "partsync",
                "--config",
                str(cfg),
                "sync",
                "--topic",
                topic,
                "--sources",
                "src",
                "--follow",
                "--group",
                "bench",
                "--session-timeout",
                "6",
                "--follow-wait-ms",
                str(a.follow_wait_ms),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "follower.log").open("w"),
            env=env,
        )
        consumer = Consumer(
            {
                "bootstrap.servers": dst.bootstrap,
                "group.id": "bench-reader",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
                "enable.auto.commit": False,
                "log_level": 3,
            }
        )
        # Assigned, not subscribed: a reader's own group join would add its rebalance delay.
        consumer.assign([TopicPartition(topic, p, 0) for p in range(a.partitions)])
        producer = Producer({"bootstrap.servers": src.bootstrap, "linger.ms": 0, "log_level": 3})
        delivered: dict[bytes, float] = {}

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                delivered[msg.key()] = time.monotonic()

        time.sleep(8)  # let the follower join its group and start tailing
        # Warm-up (not measured): records through the whole path until they arrive, so that
        # connections, the brokers' JIT and the reader's first fetches are behind us.
        warm = 5 * a.partitions
        for i in range(warm):
            producer.produce(topic, b"w", b"warm%03d" % i, partition=i % a.partitions)
        producer.flush(30)
        seen, deadline = 0, time.monotonic() + 60
        while seen < warm and time.monotonic() < deadline:
            m = consumer.poll(0.05)
            if m is not None and not m.error():
                seen += 1
        arrived: dict[bytes | None, float] = {}  # by key, as consumed (every record has one)
        gap = 1.0 / a.rate
        next_at = time.monotonic()
        for i in range(a.records):
            producer.produce(
                topic, b"x" * 200, b"k%06d" % i, partition=i % a.partitions, on_delivery=on_delivery
            )
            producer.poll(0)
            next_at += gap
            while time.monotonic() < next_at:
                # Delivery reports come only from poll(): polled once per record, a report
                # waited for the next record (20 ms at 50/s) and latencies came out negative.
                producer.poll(0)
                m = consumer.poll(max(0.0, min(0.002, next_at - time.monotonic())))
                if m is not None and not m.error():
                    arrived[m.key()] = time.monotonic()
        producer.flush(30)
        deadline = time.monotonic() + 60
        while len(arrived) < a.records and time.monotonic() < deadline:
            m = consumer.poll(0.05)
            if m is not None and not m.error():
                arrived[m.key()] = time.monotonic()
        consumer.close()
        lat = [(arrived[k] - delivered[k]) * 1000 for k in delivered if k in arrived]
        if os.environ.get("BENCH_DUMP"):
            print([round(x) for x in lat], file=sys.stderr)
        follower.send_signal(signal.SIGTERM)
        code = follower.wait(60)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = {
            "broker": a.broker,
            "records": a.records,
            "rate_per_s": a.rate,
            "partitions": a.partitions,
            "follow_wait_ms": a.follow_wait_ms,
            "arrived": len(lat),
            "follower_exit": code,
            "latency_ms": {
                "p50": round(_pct(lat, 0.5), 1),
                "p95": round(_pct(lat, 0.95), 1),
                "p99": round(_pct(lat, 0.99), 1),
                "max": round(max(lat), 1),
            }
            if lat
            else None,
            "follower_cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        }
        print(json.dumps(out) if a.json else json.dumps(out, indent=2))
        return 0 if len(lat) == a.records and code == 0 else 1
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
        src.stop()
        dst.stop()


if __name__ == "__main__":
    sys.exit(main())
