"""``partsync plan`` and ``partsync sync``: parse, call the planner and the sync driver, render."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from partsync.config import check_files
from partsync.copy.options import PARALLELISM, CopyOptions
from partsync.errors import ExitStatus, UsageError
from partsync.ui.cli_common import (
    EXIT_CODES_HELP,
    Ctx,
    Exit,
    TopicArgs,
    build_request,
    config_option,
    emit_json,
    error_doc,
    selection_options,
    stderr,
)

__all__ = ["plan", "sync"]

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


@click.command(epilog=EXIT_CODES_HELP)
@selection_options
@click.option(
    "--scan",
    is_flag=True,
    help="Also read the ranges to copy from the sources that serve them (as much as a sync "
    "fetches; batch headers only, nothing decompressed) and report the compaction holes a "
    "sync fills, the batches it re-encodes, the transactions it replays, and where a sync "
    "with the same --compaction-holes, --transactions and --max-in-flight-bytes would "
    "refuse (exit 3) or wait for source transactions to end.",
)
@compaction_holes_option
@transactions_option
@max_in_flight_option
@config_option
@click.pass_obj
def plan(
    ctx: Ctx,
    topics: tuple[str, ...],
    topic_patterns: tuple[str, ...],
    excludes: tuple[str, ...],
    sources: str,
    local: str | None,
    partitions: str | None,
    chunk_offsets: int,
    on_retention_gap: str,
    create_missing: bool,
    add_partitions: bool,
    as_json: bool,
    scan: bool,
    compaction_holes: str,
    transactions: str | None,
    max_in_flight_bytes: int,
) -> None:
    """Show what `sync` would copy, per partition. Writes nothing.

    For each partition: the local log start/end, each source's log start and high watermark,
    the offset ranges to copy and which source serves each, and the condition (in-sync, behind,
    or unsafe with the reason).
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.planner import plan_topics, resolve_topics
    from partsync.run.sync import plan_exit_status
    from partsync.ui.render import plan_notes, plan_table, print_table

    options = CopyOptions(
        compaction_holes=compaction_holes,
        transactions=_transactions(transactions, fencing=True),
        max_in_flight_bytes=max_in_flight_bytes,
    )
    req = build_request(
        ctx,
        TopicArgs(topics, topic_patterns, excludes),
        sources,
        local,
        partitions,
        chunk_offsets,
        create_missing,
        options,
        on_retention_gap=on_retention_gap,
        add_partitions=add_partitions,
    )
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        plans = plan_topics(req, pool)
        if scan:
            from partsync.run.scan import scan_topics

            plans = scan_topics(plans, req, pool, parallelism=PARALLELISM)
    if req.selection is not None and not as_json:
        stderr.print(
            f"topics: {', '.join(req.topics)} (selected by --topic-pattern/--exclude)",
            highlight=False,
            markup=False,
        )
    if as_json:
        emit_json({"topics": [tp.to_dict() for tp in plans]})
    else:
        print_table(plan_table(plans))
        for note in plan_notes(plans):
            stderr.print(note, highlight=False, markup=False)
        for tp in plans:
            for w in tp.warnings:
                stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
    raise Exit(plan_exit_status(plans))


@click.command(epilog=EXIT_CODES_HELP)
@selection_options
@max_in_flight_option
@click.option(
    "--connections-per-broker",
    type=click.IntRange(min=1, max=16),
    default=1,
    show_default=True,
    help="TCP connections per source broker and partition (for long fat links): the copy "
    "cuts its range into byte-sized pieces that the connections share, each with up to 4 "
    "fetches in flight.",
)
@click.option(
    "--parallelism",
    type=click.IntRange(min=1),
    default=PARALLELISM,
    show_default=True,
    help="Partitions copied at the same time (memory is bounded by --memory-budget, not by this).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="Where partition tasks run: threads in this process, or Apache Spark.",
)
@click.option(
    "--spark-master", default=None, help="Spark master URL for --engine spark (e.g. local[4])."
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Re-plan and retry partitions that failed with a retriable error.",
)
@click.option(
    "--max-bytes-per-sec",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Cap the bytes fetched per second by this process, for shared WAN links "
    "(per-cluster caps: max_bytes_per_sec in the config file).",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="SECONDS",
    help="Stop cleanly (in-flight appends confirmed) after SECONDS and exit 4 if not caught up.",
)
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Write Prometheus metrics for this run to FILE, atomically "
    "(node_exporter textfile collector). One-shot runs only.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep running: tail the sources (broker fetch wait, no busy polling) and append "
    "new batches as they arrive, until SIGTERM/Ctrl-C.",
)
@click.option(
    "--group",
    default=None,
    metavar="NAME",
    help="Local group that splits the partitions between partsync processes of this job "
    "(local cluster's group coordinator only; no offsets are committed). "
    "Default: partsync.<topics>.",
)
@click.option(
    "--no-group",
    is_flag=True,
    help="Do not join a group: this process writes every selected partition. Only safe "
    "when no other partsync process writes these topics (implied by --engine spark).",
)
@click.option(
    "--session-timeout",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Group session timeout: how soon a dead process's partitions move to the others. "
    "With the consumer group protocol the broker's group.consumer.session.timeout.ms decides "
    "that (45 s by default); partsync still stops writing if the group is unreachable this long.",
)
@click.option(
    "--group-protocol",
    type=click.Choice(["auto", "consumer", "classic"]),
    default="auto",
    show_default=True,
    help="How the group splits partitions. consumer: KIP-848 (Kafka 4.0+, or 3.9 with it "
    "enabled): no first-join delay, partitions move only once released. classic: "
    "JoinGroup/SyncGroup, which every broker speaks. auto: consumer where the local cluster "
    "offers it. Every process of one job must use the same protocol.",
)
@click.option(
    "--follow-wait-ms",
    type=click.IntRange(min=10, max=30_000),
    default=500,
    show_default=True,
    help="Follow mode: longest a fetch waits at the brokers for new data.",
)
@click.option(
    "--memory-budget",
    type=click.IntRange(min=1 << 20),
    default=CopyOptions().memory_budget,
    show_default=True,
    metavar="BYTES",
    help="Memory bound for the whole process: fetched bytes not yet confirmed appended, over "
    "all partitions copied at once (each also within --max-in-flight-bytes).",
)
@click.option(
    "--sync-groups",
    default=None,
    metavar="G1,G2",
    help="Follow mode: keep copying these consumer groups' committed offsets for the job's "
    "topics to the local cluster (as `partsync offsets` does), so a failover finds them "
    "current. A group with live members on the local cluster is left alone.",
)
@click.option(
    "--groups-from",
    default=None,
    metavar="CLUSTER",
    help="The cluster --sync-groups copies commits from; default: the first of --sources.",
)
@click.option(
    "--sync-groups-interval",
    type=click.FloatRange(min=0.5),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="How often --sync-groups copies the commits.",
)
@click.option(
    "--topic-check-interval",
    "topic_check",
    type=click.FloatRange(min=0.5),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Follow mode: how often the sources' topics are checked for new partitions (the "
    "local topic grows and they are copied) and for being deleted and created again (the "
    "topic is refused).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="PORT",
    help="Follow mode: serve Prometheus metrics at http://HOST:PORT/metrics, and the liveness "
    "and readiness checks /healthz and /readyz (200, or 503 with the reason).",
)
@click.option(
    "--metrics-host", default="0.0.0.0", show_default=True, help="Address --metrics-port binds to."
)
@click.option(
    "--replication-wait",
    type=click.FloatRange(min=0),
    default=CopyOptions().hw_wait_s,
    show_default=True,
    metavar="SECONDS",
    help="Before appending to a local partition whose high watermark is below its log end "
    "(an append not yet on every in-sync replica), wait up to SECONDS for replication; "
    "then that partition fails with a retriable error (exit 1).",
)
@click.option(
    "--filler-records",
    type=click.IntRange(min=1, max=1_000_000),
    default=CopyOptions().filler_records,
    show_default=True,
    metavar="N",
    help="Records per filler batch when an empty local partition is brought to its sources' "
    "log start (the fillers are deleted before the copy; fewer per batch if the local "
    "max.message.bytes is small).",
)
@compaction_holes_option
@click.option(
    "--hole-key",
    default=CopyOptions().hole_key.decode(),
    show_default=True,
    metavar="KEY",
    help="The key of hole records (--compaction-holes fill). Consumers read them until the "
    "local topic's compaction removes them: pick a key their key deserializer accepts.",
)
@transactions_option
@click.option(
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
)
@click.option(
    "--fencing-renew",
    type=click.FloatRange(min=1),
    default=CopyOptions().fencing_renew_s,
    show_default=True,
    metavar="SECONDS",
    help="Renew a partition owner's fencing identity (a new producer epoch) when it is older "
    "than SECONDS; must be well below the local cluster's transactional.id.expiration.ms "
    "(Kafka default 7 days), after which Kafka forgets the id and fencing stops working.",
)
@click.option(
    "--fencing/--no-fencing",
    default=True,
    show_default=True,
    help="Append with a producer id under the partition's transactional id, so a newer "
    "partsync writer of the partition fences older ones (needs WRITE on "
    "TransactionalId 'partsync:' prefixed ids under ACLs).",
)
@config_option
@click.pass_obj
def sync(
    ctx: Ctx,
    topics: tuple[str, ...],
    topic_patterns: tuple[str, ...],
    excludes: tuple[str, ...],
    sources: str,
    local: str | None,
    partitions: str | None,
    chunk_offsets: int,
    on_retention_gap: str,
    create_missing: bool,
    add_partitions: bool,
    as_json: bool,
    max_in_flight_bytes: int,
    connections_per_broker: int,
    parallelism: int,
    engine: str,
    spark_master: str | None,
    retries: int,
    max_bytes_per_sec: int | None,
    deadline: float | None,
    metrics_file: str | None,
    follow: bool,
    group: str | None,
    no_group: bool,
    session_timeout: float,
    group_protocol: str,
    follow_wait_ms: int,
    memory_budget: int,
    sync_groups: str | None,
    groups_from: str | None,
    sync_groups_interval: float,
    topic_check: float,
    metrics_port: int | None,
    metrics_host: str,
    replication_wait: float,
    filler_records: int,
    compaction_holes: str,
    hole_key: str,
    transactions: str | None,
    transaction_timeout: float,
    fencing_renew: float,
    fencing: bool,
) -> None:
    """Copy what the local cluster lacks, at exactly the sources' offsets.

    One-shot (default, the cron mode): catch up with the source bounds read at start and exit;
    running it again is a no-op. The local log end is the checkpoint, so an interrupted run is
    resumed by running it again. Partitions that cannot be copied without shifting offsets are
    refused and left untouched (exit 3).

    Runs of one job share the work through a group on the LOCAL cluster (--group): overlapping
    cron runs split the partitions, and --follow processes on several hosts divide them and
    take over those of a process that dies. A partition has one writer at a time: group
    ownership, producer-epoch fencing, and the check that every append lands at the source's
    offset. A run with nothing to copy does not join the group.
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.planner import apply_topic_changes, plan_topics, resolve_topics
    from partsync.run.runner import RunOptions
    from partsync.run.sync import default_group, run_job
    from partsync.ui.progress import CopyProgress
    from partsync.ui.render import (
        print_table,
        report_notes,
        report_table,
        summary_line,
    )

    if engine == "spark" and (follow or group):
        raise UsageError(
            "--follow and --group run on the local engine (Spark tasks cannot hold "
            "group membership); use --engine local"
        )
    if follow and deadline is not None:
        raise UsageError("--deadline is for one-shot runs; follow mode runs until stopped")
    if follow and metrics_file:
        raise UsageError("--metrics-file is for one-shot runs; follow mode serves --metrics-port")
    if metrics_port is not None and not follow:
        raise UsageError("--metrics-port is for --follow; one-shot runs write --metrics-file")
    if (sync_groups or groups_from) and not follow:
        raise UsageError(
            "--sync-groups is for --follow; a one-shot run copies commits with `partsync offsets`"
        )
    if group is not None and no_group:
        raise UsageError("--group and --no-group contradict each other")
    if metrics_file:
        _check_writable(metrics_file)
    if not hole_key:
        raise UsageError("--hole-key: the key of hole records cannot be empty")
    transactions = _transactions(transactions, fencing)
    opts = CopyOptions(
        max_in_flight_bytes=max_in_flight_bytes,
        memory_budget=memory_budget,
        connections_per_broker=connections_per_broker,
        max_bytes_per_sec=max_bytes_per_sec,
        hw_wait_s=replication_wait,
        fencing=fencing,
        fencing_renew_s=fencing_renew,
        filler_records=filler_records,
        compaction_holes=compaction_holes,
        hole_key=hole_key.encode(),
        transactions=transactions,
        transaction_timeout_ms=int(transaction_timeout * 1000),
    )
    req = build_request(
        ctx,
        TopicArgs(topics, topic_patterns, excludes),
        sources,
        local,
        partitions,
        chunk_offsets,
        create_missing,
        opts,
        on_retention_gap,
        add_partitions,
    )
    to_sync = None
    if sync_groups:
        from partsync.run.sync import GroupsToSync

        names = tuple(dict.fromkeys(g.strip() for g in sync_groups.split(",") if g.strip()))
        if not names:
            raise UsageError("--sync-groups: no group named")
        src = ctx.config.resolve(groups_from) if groups_from else req.sources[0]
        if src.bootstrap == req.local.bootstrap:
            raise UsageError(f"--groups-from {src.name} is the local cluster")
        check_files(src)
        to_sync = GroupsToSync(names, src, sync_groups_interval)
    run_opts = RunOptions(
        follow=follow,
        group=group,
        session_timeout_ms=int(session_timeout * 1000),
        group_protocol=group_protocol,
        follow_wait_ms=follow_wait_ms,
        topic_check_s=topic_check,
        parallelism=parallelism,
    )
    stop = threading.Event()
    why: list[str] = []
    _install_stop_handler(stop, why)
    timer = _deadline_timer(deadline, stop, why)
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        plans = apply_topic_changes(req, pool, plan_topics(req, pool))
        total = sum(
            p.missing for tp in plans for p in tp.partitions if p.condition.value == "behind"
        )
        progress = None
        if not as_json and total and stderr.is_terminal:
            # Before the first bytes: a one-shot run joins its group (Kafka may hold a new
            # group's first join for seconds), and every run fences before it writes.
            phase = "joining group" if not no_group and engine == "local" else "fencing"
            progress = CopyProgress(stderr.console, total, phase)
            progress.start(
                {(p.topic, p.partition): p.local.end for tp in plans for p in tp.partitions},
                {
                    (p.topic, p.partition): p.target_end
                    for tp in plans
                    for p in tp.partitions
                    if p.condition.value == "behind"
                },
            )
        try:
            with _live_metrics(follow, metrics_port, metrics_host) as live:
                if follow:
                    mode = (
                        " (no group: all partitions)"
                        if no_group
                        else f" in group {group or default_group(req.job_topics)!r}"
                    )
                    stderr.print(
                        f"following {', '.join(req.topics)}{mode}; SIGTERM or Ctrl-C stops",
                        highlight=False,
                        markup=False,  # a group name is the user's text
                    )
                eng = None
                if engine != "local":
                    from partsync.engines import make_engine

                    eng = make_engine(
                        engine,
                        parallelism=parallelism,
                        progress=progress,
                        stop=stop,
                        spark_master=spark_master,
                    )
                outcome = run_job(
                    req,
                    pool,
                    plans,
                    run_opts,
                    engine=eng,
                    retries=retries,
                    use_group=not no_group,
                    stop=stop,
                    progress=progress,
                    observer=live,
                    stopped_reason=lambda: why[0] if why else None,
                    sync_groups=to_sync,
                )
        finally:
            if timer is not None:
                timer.cancel()
            if progress:
                progress.stop()
    report, code = outcome.report, outcome.exit_status
    if as_json:
        doc = report.to_dict()
        if outcome.fatal is not None:
            doc["error"] = error_doc("group", str(outcome.fatal), code, **outcome.fatal.to_dict())
        emit_json(doc)
    else:
        print_table(report_table(report))
        # The warnings first: they explain the refusals and errors below them.
        for tr in report.topics:
            for w in tr.warnings:
                stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
        for note in report_notes(report):
            stderr.print(note, highlight=False, markup=False)
        stderr.print(summary_line(report), highlight=False)
    if outcome.fatal is not None:
        stderr.print(f"[red]error:[/] {outcome.fatal}", highlight=False)
    if report.stopped == "deadline" and code == ExitStatus.DEADLINE:
        stderr.print(f"[yellow]deadline of {deadline:g}s reached before catching up[/]")
    if metrics_file:
        from partsync.ui.metrics import write_textfile

        try:
            write_textfile(metrics_file, report, int(code))
        except OSError as e:
            raise UsageError(
                f"cannot write metrics file {metrics_file}: {e.strerror or e}"
            ) from None
    raise Exit(code)


def _transactions(asked: str | None, fencing: bool) -> str:
    """--transactions: replay unless asked otherwise, or without fencing, which a replay needs
    (its transaction slots are fenced with the partition): that keeps refusing as before."""
    if asked == "replay" and not fencing:
        raise UsageError(
            "--transactions replay needs fencing: its transaction slots are fenced "
            "with the partition"
        )
    if asked is None:
        return "replay" if fencing else "refuse"
    return asked


def _check_writable(path: str) -> None:
    """A metrics file that cannot be written is a usage error before anything is copied, not
    after: a temporary file is created beside it (where ``write_textfile`` creates its own
    before the rename) and removed again. ``os.access`` is not enough: root passes it for
    /proc, where nothing can be created."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"--metrics-file {path}: is a directory")
    if not folder.is_dir():
        raise UsageError(f"--metrics-file {path}: directory {folder} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".check", dir=folder)
    except OSError as e:
        raise UsageError(
            f"--metrics-file {path}: cannot create a file in {folder}: {e.strerror or e}"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _deadline_timer(
    deadline: float | None, stop: threading.Event, why: list[str]
) -> threading.Timer | None:
    if deadline is None:
        return None

    def expire() -> None:
        why.append("deadline")
        stop.set()

    timer = threading.Timer(deadline, expire)
    timer.daemon = True
    timer.start()
    return timer


@contextmanager
def _live_metrics(follow: bool, port: int | None, host: str) -> Iterator[Any]:
    """Live metrics for follow mode (served when --metrics-port is given)."""
    if not follow:
        yield None
        return
    from partsync.ui.metrics import LiveMetrics, serve_metrics

    live = LiveMetrics()
    server = None
    if port is not None:
        try:
            server = serve_metrics(live, port, host)
        except OSError as e:
            raise UsageError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
        stderr.print(
            f"metrics at http://{host}:{server.server_address[1]}/metrics", highlight=False
        )
    try:
        yield live
    finally:
        if server is not None:
            server.shutdown()


def _install_stop_handler(stop: threading.Event, why: list[str]) -> None:
    """First SIGTERM/Ctrl-C: stop after in-flight appends are confirmed. Second: exit now."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        why.append("signal")
        stop.set()
        stderr.print("[yellow]stopping after in-flight appends are confirmed...[/]")

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
