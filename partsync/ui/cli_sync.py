"""``partsync plan`` and ``partsync sync``: options into ``PlanArgs``/``SyncArgs``, then the
planner and the sync driver, then the rendering. The options are declared in ``sync_options``
and checked in ``sync_args``."""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from partsync.copy.options import PARALLELISM
from partsync.errors import ExitStatus, UsageError
from partsync.ui.cli_common import (
    EXIT_CODES_HELP,
    Ctx,
    Exit,
    config_option,
    emit_json,
    error_doc,
    stderr,
)
from partsync.ui.sync_args import PlanArgs, SyncArgs, groups_to_sync
from partsync.ui.sync_options import plan_options, sync_options

if TYPE_CHECKING:
    from partsync.run.planner import SyncRequest
    from partsync.run.sync import GroupsToSync, JobOutcome

__all__ = ["plan", "sync"]


@click.command(epilog=EXIT_CODES_HELP)
@plan_options
@config_option
@click.pass_obj
def plan(ctx: Ctx, /, **options: Any) -> None:
    """Show what `sync` would copy, per partition. Writes nothing.

    For each partition: the local log start/end, each source's log start and high watermark,
    the offset ranges to copy and which source serves each, and the condition (in-sync, behind,
    or unsafe with the reason).
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.planner import plan_topics, resolve_topics
    from partsync.run.sync import plan_exit_status
    from partsync.ui.render import plan_notes, plan_table, print_table

    args = PlanArgs.from_click(options)
    req = args.selection.request(ctx, args.copy)
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        plans = plan_topics(req, pool)
        if req.sync_configs:
            from partsync.run.topic_configs import with_config_drift

            plans = with_config_drift(req, pool, plans)
        if req.acls.active:
            from partsync.run.acl_sync import with_acls

            plans = with_acls(req.acls, req.sources, req.local, pool, plans, apply=False)
        if args.scan:
            from partsync.run.scan import scan_topics

            plans = scan_topics(plans, req, pool, parallelism=PARALLELISM)
    as_json = args.selection.as_json
    if req.selection is not None and not as_json:
        stderr.line(f"topics: {', '.join(req.topics)} (selected by --topic-pattern/--exclude)")
    if as_json:
        emit_json({"topics": [tp.to_dict() for tp in plans]})
    else:
        print_table(plan_table(plans))
        for note in plan_notes(plans):
            stderr.line(note)
        for tp in plans:
            for w in tp.warnings:
                stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
    raise Exit(plan_exit_status(plans))


@click.command(epilog=EXIT_CODES_HELP)
@sync_options
@config_option
@click.pass_obj
def sync(ctx: Ctx, /, **options: Any) -> None:
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
    args = SyncArgs.from_click(options)
    req = args.selection.request(ctx, args.copy)
    to_sync = groups_to_sync(args, ctx.config, req)
    if to_sync is not None and req.acls.sync:  # the copied groups' ACLs follow too
        acls = dataclasses.replace(req.acls, groups=to_sync.groups)
        req = dataclasses.replace(req, acls=acls)
    outcome = _run(args, req, to_sync)
    _render(args, outcome)
    code = outcome.exit_status
    if args.metrics_file:
        from partsync.ui.metrics import write_textfile

        try:
            write_textfile(args.metrics_file, outcome.report, int(code))
        except OSError as e:
            raise UsageError(
                f"cannot write metrics file {args.metrics_file}: {e.strerror or e}"
            ) from None
    raise Exit(code)


def _run(args: SyncArgs, req: SyncRequest, to_sync: GroupsToSync | None) -> JobOutcome:
    """Plan, then copy (or follow) until done, stopped, or past --deadline."""
    from partsync.io.pool import ClusterPool
    from partsync.run.planner import apply_topic_changes, plan_topics, resolve_topics
    from partsync.run.sync import default_group, run_job

    run_opts = args.run_options()
    stop = threading.Event()
    why: list[str] = []
    _install_stop_handler(stop, why)
    timer = _deadline_timer(args.deadline, stop, why)
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        plans = apply_topic_changes(req, pool, plan_topics(req, pool), follow=run_opts.follow)
        total = sum(
            p.missing for tp in plans for p in tp.partitions if p.condition.value == "behind"
        )
        progress = None
        if not args.selection.as_json and total and stderr.is_terminal:
            # Before the first bytes: a one-shot run joins its group (Kafka may hold a new
            # group's first join for seconds), and every run fences before it writes.
            phase = "joining group" if not args.no_group and args.engine == "local" else "fencing"
            from partsync.ui.progress import CopyProgress  # rich: not for --json or a pipe

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
            with _live_metrics(args.follow, args.metrics_port, args.metrics_host) as live:
                if args.follow:
                    mode = (
                        " (no group: all partitions)"
                        if args.no_group
                        else f" in group {args.group or default_group(req.job_topics)!r}"
                    )
                    # (a group name is the user's text)
                    stderr.line(f"following {', '.join(req.topics)}{mode}; SIGTERM or Ctrl-C stops")
                eng = None
                if args.engine != "local":
                    from partsync.engines import make_engine

                    eng = make_engine(
                        args.engine,
                        parallelism=args.parallelism,
                        progress=progress,
                        stop=stop,
                        spark_master=args.spark_master,
                    )
                return run_job(
                    req,
                    pool,
                    plans,
                    run_opts,
                    engine=eng,
                    retries=args.retries,
                    use_group=not args.no_group,
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


def _render(args: SyncArgs, outcome: JobOutcome) -> None:
    """The report: one JSON document, or a table with its warnings, notes and summary; then
    a fatal error and a missed deadline on stderr."""
    report, code = outcome.report, outcome.exit_status
    if args.selection.as_json:
        doc = report.to_dict()
        if outcome.fatal is not None:
            doc["error"] = error_doc("group", str(outcome.fatal), code, **outcome.fatal.to_dict())
        emit_json(doc)
    else:
        from partsync.ui.render import print_table, report_notes, report_table, summary_line

        print_table(report_table(report))
        # The warnings first: they explain the refusals and errors below them.
        for tr in report.topics:
            for w in tr.warnings:
                stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
        for note in report_notes(report):
            stderr.line(note)
        stderr.print(summary_line(report), highlight=False)
    if outcome.fatal is not None:
        stderr.print(f"[red]error:[/] {outcome.fatal}", highlight=False)
    if report.stopped == "deadline" and code == ExitStatus.DEADLINE:
        stderr.print(f"[yellow]deadline of {args.deadline:g}s reached before catching up[/]")


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
