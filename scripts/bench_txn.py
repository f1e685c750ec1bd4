"""What replaying transactions costs (issue 17): a transactional topic mirrored with
``sync --transactions replay`` (the default), against a shallow copy of the same records
produced without transactions.

    python scripts/bench_txn.py [--txns 500] [--records 20] [--producers 2] [--abort-every 10]
                                [--codec lz4] [--kafka-version 4.1.1] [--repeat 3] [--json]

Two Kafka brokers (JVM processes) play source and local. ``--producers`` transactional
confluent-kafka producers write ``--txns`` transactions in all, each of ``--records`` records in
one partition, round after round: every producer begins and sends (so their transactions
interleave), then each commits (every ``--abort-every``-th aborts). The same records are also
produced without transactions, one flushed batch per transaction, to a plain topic (the
baseline: the same batches without markers). Each run copies one topic into a fresh local
topic and reports wall time and partsync's CPU time (median of ``--repeat``), and what each
marker costs over the baseline; the mirror is checked batch by batch (offsets, kinds, marker
types) against the source.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from partsync.demo.brokers import Broker
from partsync.demo.data import create_topic, make_records
from partsync.wire.digest import batch_digest
from scripts.bench_holes import run_sync
from tests.integration.sync_support import fetch_batches
from tests.support.brokers import start_kafka_jvm


def _fill(bootstrap: str, args: argparse.Namespace) -> int:
    """Both topics; returns the number of markers written."""
    from confluent_kafka import Producer

    common = {
        "bootstrap.servers": bootstrap,
        "compression.type": args.codec,
        "linger.ms": 5,
        "log_level": 3,
    }
    txn = [Producer({**common, "transactional.id": f"bench-{n}"}) for n in range(args.producers)]
    for p in txn:
        p.init_transactions(30)
    plain = Producer({**common, "enable.idempotence": True})
    recs = make_records(args.txns * args.records, seed=5, value_size=200)
    done = 0
    while done < args.txns:
        batch = txn[: min(args.producers, args.txns - done)]
        for i, p in enumerate(batch):
            p.begin_transaction()
            for r in recs[(done + i) * args.records : (done + i + 1) * args.records]:
                for out, topic in ((p, "txn"), (plain, "plain")):
                    out.produce(
                        topic, key=r.key, value=r.value, timestamp=r.timestamp_ms or 0, partition=0
                    )
            p.flush(30)
            plain.flush(30)
        for i, p in enumerate(batch):
            if (done + i + 1) % args.abort_every == 0:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
        done += len(batch)
    return done


def _layout(broker: Broker, topic: str) -> list[tuple[int, int, bool, bool, bytes]]:
    return [
        (b.base_offset, b.last_offset, b.is_transactional, b.is_control, batch_digest(b))
        for b in fetch_batches(broker, topic, 0)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--txns", type=int, default=500)
    ap.add_argument("--records", type=int, default=20, help="records per transaction")
    ap.add_argument("--producers", type=int, default=2, help="transactions interleaved")
    ap.add_argument("--abort-every", type=int, default=10)
    ap.add_argument("--codec", default="lz4")
    ap.add_argument("--kafka-version", default="4.1.1")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    source = start_kafka_jvm(args.kafka_version, tmp / "src")
    try:
        for topic in ("txn", "plain", "warmup"):
            create_topic(source.bootstrap, topic, 1)
        markers = _fill(source.bootstrap, args)
        runs: dict[str, list[tuple[float, float, dict[str, Any]]]] = {"plain": [], "txn": []}
        for n in range(args.repeat):  # a fresh local broker per repetition
            local = start_kafka_jvm(args.kafka_version, tmp / f"dst{n}")
            try:
                create_topic(local.bootstrap, "warmup", 1)
                run_sync(
                    source.bootstrap, local.bootstrap, "warmup"
                )  # a fresh JVM is slow at first
                for topic, results in list(runs.items())[:: 1 if n % 2 == 0 else -1]:
                    create_topic(local.bootstrap, topic, 1)
                    results.append(run_sync(source.bootstrap, local.bootstrap, topic))
                if n == 0:
                    assert _layout(local, "txn") == _layout(source, "txn"), "a batch moved"
            finally:
                local.stop()
        rows = [
            {
                "topic": topic,
                "markers": markers if topic == "txn" else 0,
                "offsets": results[-1][2]["local_end_after"],
                "batches": results[-1][2]["batches"],
                "wall_s": statistics.median(r[0] for r in results),
                "cpu_s": statistics.median(r[1] for r in results),
            }
            for topic, results in runs.items()
        ]
        extra = rows[1]["wall_s"] - rows[0]["wall_s"]
        out = {
            "txns": args.txns,
            "records": args.records,
            "producers": args.producers,
            "codec": args.codec,
            "kafka": args.kafka_version,
            "rows": rows,
            "ms_per_marker": 1000 * extra / max(1, markers),
        }
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            for r in rows:
                print(
                    f"  {r['topic']:>5}: {r['offsets']:>7} offsets, {r['batches']:>6} batches, "
                    f"{r['markers']:>5} markers: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s "
                    "CPU"
                )
            print(f"  each marker costs {out['ms_per_marker']:.1f} ms of wall time")
    finally:
        source.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
