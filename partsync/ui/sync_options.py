"""The options of ``partsync plan`` and ``partsync sync`` as click declares them: names,
types, defaults and help texts, the contract with users' command lines and docs/cli.md. What
they mean together is checked in ``sync_args``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from partsync.copy.options import PARALLELISM, CopyOptions
from partsync.ui.cli_common import selection_options

__all__ = ["plan_options", "sync_options"]

# Options plan --scan shares with sync: what the scan predicts a sync with them does.
compaction_holes_option = click.option(
    "--compaction-holes",
    type=click.Choice(["refuse", "fill"]),
    default=CopyOptions().compaction_holes,
    show_default=True,
    help="Offsets a compacted source no longer holds (records or whole batches the log "
    "cleaner removed): refuse the partition there (exit 3, nothing written past the hole), or "
    "fill them with hole records (tombstones under --hole-key with a 'partsync-hole' header) "
    "at exactly those offsets, which the compacted local topic's own cleaning removes again. "
    "Only a batch with holes inside is re-encoded (same codec and timestamps); every other "
    "batch stays shallow. Needs a compacted local topic.",
)
max_in_flight_option = click.option(
    "--max-in-flight-bytes",
    type=click.IntRange(min=1 << 16),
    default=CopyOptions().max_in_flight_bytes,
    show_default=True,
    help="Memory bound per partition copy: fetched bytes not yet confirmed appended.",
)
transactions_option = click.option(
    "--transactions",
    type=click.Choice(["refuse", "replay"]),
    default=None,
    help="Transactional source data and its commit/abort markers: replay each source "
    "transaction with a local transactional producer, its data shallow and its marker "
    "(EndTxn) landing at the source marker's offset, so read_committed consumers see what "
    "they see on the source; or refuse the partition there (exit 3, nothing written past it). "
    "A replay streams transactions: one still open in the source at the end of a run is "
    "left open locally and resumed by the next run (JSON: open_transactions); one that cannot "
    "be left open is held back until its marker, and the partition is behind (exit 4). "
    "[default: replay; refuse with --no-fencing, which a replay needs]",
)

scan_option = click.option(
    "--scan",
    is_flag=True,
    help="Also read the ranges to copy from the sources that serve them (as much as a sync "
    "fetches; batch headers only, nothing decompressed) and report the compaction holes a "
    "sync fills, the batches it re-encodes, the transactions it replays, and where a sync "
    "with the same --compaction-holes, --transactions and --max-in-flight-bytes would "
    "refuse (exit 3) or wait for source transactions to end.",
)


def plan_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Every option of ``plan`` but --config, in --help's order."""
    return _with(
        f,
        [
            selection_options,
            scan_option,
            compaction_holes_option,
            transactions_option,
            max_in_flight_option,
        ],
    )


def sync_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Every option of ``sync`` but --config, in --help's order."""
    return _with(f, _SYNC_OPTIONS)


_SYNC_OPTIONS: list[Callable[[Any], Any]] = [
    selection_options,
    max_in_flight_option,
    click.option(
        "--connections-per-broker",
        type=click.IntRange(min=1, max=16),
        default=1,
        show_default=True,
        help="TCP connections per source broker and partition (for long fat links): the copy "
        "cuts its range into byte-sized pieces that the connections share, each with up to 2 "
        "fetches in flight.",
    ),
    click.option(
        "--parallelism",
        type=click.IntRange(min=1),
        default=PARALLELISM,
        show_default=True,
        help="Partitions copied at the same time (memory is bounded by --memory-budget, "
        "not by this).",
    ),
    click.option(
        "--engine",
        type=click.Choice(["local", "spark"]),
        default="local",
        show_default=True,
        help="Where partition tasks run: threads in this process, or Apache Spark.",
    ),
    click.option(
        "--spark-master", default=None, help="Spark master URL for --engine spark (e.g. local[4])."
    ),
    click.option(
        "--retries",
        type=click.IntRange(min=0),
        default=2,
        show_default=True,
        help="Re-plan and retry partitions that failed with a retriable error.",
    ),
    click.option(
        "--max-bytes-per-sec",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="Cap the bytes fetched per second by this process, for shared WAN links "
        "(per-cluster caps: max_bytes_per_sec in the config file).",
    ),
    click.option(
        "--deadline",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        metavar="SECONDS",
        help="Stop cleanly (in-flight appends confirmed) after SECONDS and exit 4 if not "
        "caught up.",
    ),
    click.option(
        "--metrics-file",
        type=click.Path(dir_okay=False),
        default=None,
        metavar="FILE",
        help="Write Prometheus metrics for this run to FILE, atomically "
        "(node_exporter textfile collector). One-shot runs only.",
    ),
    click.option(
        "--follow",
        is_flag=True,
        help="Keep running: tail the sources (broker fetch wait, no busy polling) and append "
        "new batches as they arrive, until SIGTERM/Ctrl-C.",
    ),
    click.option(
        "--group",
        default=None,
        metavar="NAME",
        help="Local group that splits the partitions between partsync processes of this job "
        "(local cluster's group coordinator only; no offsets are committed). "
        "Default: partsync.<topics>.",
    ),
    click.option(
        "--no-group",
        is_flag=True,
        help="Do not join a group: this process writes every selected partition. Only safe "
        "when no other partsync process writes these topics (implied by --engine spark).",
    ),
    click.option(
        "--session-timeout",
        type=click.FloatRange(min=1),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Group session timeout: how soon a dead process's partitions move to the others. "
        "With the consumer group protocol the broker's group.consumer.session.timeout.ms decides "
        "that (45 s by default); partsync still stops writing if the group is unreachable "
        "this long.",
    ),
    click.option(
        "--group-protocol",
        type=click.Choice(["auto", "consumer", "classic"]),
        default="auto",
        show_default=True,
        help="How the group splits partitions. consumer: KIP-848 (Kafka 4.0+, or 3.9 with it "
        "enabled): no first-join delay, partitions move only once released. classic: "
        "JoinGroup/SyncGroup, which every broker speaks. auto: consumer where the local cluster "
        "offers it. Every process of one job must use the same protocol.",
    ),
    click.option(
        "--follow-wait-ms",
        type=click.IntRange(min=10, max=30_000),
        default=500,
        show_default=True,
        help="Follow mode: longest a fetch waits at the brokers for new data.",
    ),
    click.option(
        "--memory-budget",
        type=click.IntRange(min=1 << 20),
        default=CopyOptions().memory_budget,
        show_default=True,
        metavar="BYTES",
        help="Memory bound for the whole process: fetched bytes not yet confirmed appended, over "
        "all partitions copied at once (each also within --max-in-flight-bytes).",
    ),
    click.option(
        "--sync-groups",
        default=None,
        metavar="G1,G2",
        help="Follow mode: keep copying these consumer groups' committed offsets for the job's "
        "topics to the local cluster (as `partsync offsets` does), so a failover finds them "
        "current. A group with live members on the local cluster is left alone.",
    ),
    click.option(
        "--groups-from",
        default=None,
        metavar="CLUSTER",
        help="The cluster --sync-groups copies commits from; default: the first of --sources.",
    ),
    click.option(
        "--sync-groups-interval",
        type=click.FloatRange(min=0.5),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="How often --sync-groups copies the commits.",
    ),
    click.option(
        "--topic-check-interval",
        "topic_check",
        type=click.FloatRange(min=0.5),
        default=30.0,
        show_default=True,
        metavar="SECONDS",
        help="Follow mode: how often the sources' topics are checked for new partitions (the "
        "local topic grows and they are copied) and for being deleted and created again (the "
        "topic is refused).",
    ),
    click.option(
        "--metrics-port",
        type=click.IntRange(min=0, max=65535),
        default=None,
        metavar="PORT",
        help="Follow mode: serve Prometheus metrics at http://HOST:PORT/metrics, and the liveness "
        "and readiness checks /healthz and /readyz (200, or 503 with the reason).",
    ),
    click.option(
        "--metrics-host",
        default="0.0.0.0",
        show_default=True,
        help="Address --metrics-port binds to.",
    ),
    click.option(
        "--replication-wait",
        type=click.FloatRange(min=0),
        default=CopyOptions().hw_wait_s,
        show_default=True,
        metavar="SECONDS",
        help="Before appending to a local partition whose high watermark is below its log end "
        "(an append not yet on every in-sync replica), wait up to SECONDS for replication; "
        "then that partition fails with a retriable error (exit 1).",
    ),
    click.option(
        "--filler-records",
        type=click.IntRange(min=1, max=1_000_000),
        default=CopyOptions().filler_records,
        show_default=True,
        metavar="N",
        help="Records per filler batch when an empty local partition is brought to its sources' "
        "log start (the fillers are deleted before the copy; fewer per batch if the local "
        "max.message.bytes is small).",
    ),
    compaction_holes_option,
    click.option(
        "--hole-key",
        default=CopyOptions().hole_key.decode(),
        show_default=True,
        metavar="KEY",
        help="The key of hole records (--compaction-holes fill). Consumers read them until the "
        "local topic's compaction removes them: pick a key their key deserializer accepts.",
    ),
    transactions_option,
    click.option(
        "--transaction-timeout",
        type=click.FloatRange(min=1),
        default=CopyOptions().transaction_timeout_ms / 1000,
        show_default=True,
        metavar="SECONDS",
        help="The local transaction timeout of a replay (--transactions replay): a transaction a "
        "run left open (its source transaction had no marker yet, or the run was killed) stays "
        "open (read_committed consumers wait at it) until a later run ends it or this timeout "
        "aborts it, where the mirror then differs: run again well within it. A source transaction "
        "that may stay open longer is held back instead. At most the local "
        "transaction.max.timeout.ms.",
    ),
    click.option(
        "--fencing-renew",
        type=click.FloatRange(min=1),
        default=CopyOptions().fencing_renew_s,
        show_default=True,
        metavar="SECONDS",
        help="Renew a partition owner's fencing identity (a new producer epoch) when it is older "
        "than SECONDS; must be well below the local cluster's transactional.id.expiration.ms "
        "(Kafka default 7 days), after which Kafka forgets the id and fencing stops working.",
    ),
    click.option(
        "--fencing/--no-fencing",
        default=True,
        show_default=True,
        help="Append with a producer id under the partition's transactional id, so a newer "
        "partsync writer of the partition fences older ones (needs WRITE on "
        "TransactionalId 'partsync:' prefixed ids under ACLs).",
    ),
]


def _with(f: Callable[..., Any], options: list[Callable[[Any], Any]]) -> Callable[..., Any]:
    for opt in reversed(options):  # the first in the list is the first in --help
        f = opt(f)
    return f
