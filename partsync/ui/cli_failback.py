"""``partsync failback``: make an old primary a mirror of the promoted new one. Parse, call the
core (``partsync.run.failback``), render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from partsync.ui.cli_common import (
    Ctx,
    Exit,
    SelectionArgs,
    config_option,
    emit_json,
    selection_options,
    stderr,
)

__all__ = ["failback"]

FAILBACK_EXIT_HELP = """\b
Exit codes:
  0  the old primary mirrors the new one (or, --dry-run, nothing in the way)
  1  the old primary is still in use, a topic could not be failed back, or a cluster failed
  2  usage or configuration error (e.g. records to export and nowhere to put them)
  3  stopped to lose nothing: the old primary was written after the export, or a topic
     created again is not as it was
  4  the re-seed did not finish (run failback, or the reversed link's sync, again)
"""


@click.command(epilog=FAILBACK_EXIT_HELP)
@selection_options
@click.option(
    "--export-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    metavar="DIR",
    help="Export the old primary's records past the divergence point to DIR/<topic>/: "
    "<partition>.jsonl (one JSON line per record, with its offset, timestamp, key, value, "
    "headers and transaction state; markers too), <partition>.batches (the batches byte for "
    "byte) and <partition>.json (what they hold).",
)
@click.option(
    "--export-topic",
    default=None,
    metavar="NAME",
    help="Export those records to topic NAME on the new primary (created with the topic's "
    "partitions and retention.ms=-1 where missing; {topic} in NAME stands for the topic's "
    "name, needed when several are failed back): keys, values, headers and timestamps as they "
    "were, each with a header partsync.failback naming its origin.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Show per partition what would be exported and discarded, and the bytes to copy "
    "again; write nothing.",
)
@click.option(
    "--watch-seconds",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Watch the old primary's log ends this long: one that moves means a producer still "
    "writes there, and failback refuses.",
)
@click.option(
    "--settle-timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Wait this long for transactions still open on the old primary to end (a dead "
    "producer's is aborted when its transaction.timeout.ms passes); refuse after.",
)
@click.option(
    "--ignore-groups",
    default=None,
    metavar="G1,G2",
    help="Consumer groups with members on the old primary that do not read these topics "
    "(they do not count as use).",
)
@config_option
@click.pass_obj
def failback(ctx: Ctx, /, **options: Any) -> None:
    """Make an old primary a mirror of the new one, losing nothing.

    Run it with the reversed link's options: --sources is the new primary (where the
    topics were promoted), --local the old primary. Refused while the old primary is in use
    (groups with members, log ends that move, open transactions). Per partition, the first
    offset where the old copy differs from the new primary's: a prefix is simply mirrored on;
    a diverged partition's records past that point are exported first (--export-dir,
    --export-topic), then its topic is deleted, created again with its partitions and
    settings, and mirrored from the new primary. A kill at any step is resumed by running it
    again. Then follow the link: partsync sync --follow with the same --sources and --local.
    """
    from partsync.copy.options import CopyOptions
    from partsync.io.pool import ClusterPool
    from partsync.run.failback import FailbackOptions
    from partsync.run.failback import failback as run_failback
    from partsync.run.failback_export import ExportTarget
    from partsync.run.planner import resolve_topics
    from partsync.ui.sync_args import group_names

    sel = SelectionArgs.from_click(options)
    req = sel.request(ctx, CopyOptions(transactions="replay"))
    fopts = FailbackOptions(
        export=ExportTarget(options["export_dir"], options["export_topic"]),
        dry_run=options["dry_run"],
        watch_s=options["watch_seconds"],
        settle_s=options["settle_timeout"],
        ignore_groups=tuple(group_names(options["ignore_groups"]) or ()),
    )
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        report = run_failback(req, pool, fopts)
    if sel.as_json:
        emit_json(report.to_dict())
    else:
        _render(report)
    raise Exit(report.exit_status)


def _render(report: Any) -> None:
    from rich.markup import escape

    from partsync.ui.render import WordTable, print_table

    if report.in_use is not None and report.in_use.in_use:
        stderr.line(report.in_use.refusal(report.old))
        for what in report.in_use.to_dict()["not_visible"]:
            stderr.line(f"not visible to any API: {what}")
        for topic, why in report.failed.items():
            stderr.line(f"topic {topic}: not failed back: {why}")
        return
    table = WordTable(
        "topic", "partition", "action", "diverged at", "exported", "discarded", "copy again"
    )
    for t in report.topics:
        for p in t.partitions:
            count = t.exported.get(p.partition)
            again = t.copy_again_bytes.get(p.partition)
            table.add_row(
                escape(t.topic),
                str(p.partition),
                p.action.value,
                "-" if p.diverged_at is None else str(p.diverged_at),
                "-" if count is None else f"{count.records} records, {count.bytes} B",
                str(p.discarded),
                "-" if again is None else f"{again} B",
            )
    print_table(table)
    for topic, why in report.failed.items():
        stderr.line(f"topic {topic}: not failed back: {why}")
    for topic in report.promotions_cleared:
        stderr.line(f"topic {topic}: promotion record on {report.old} cleared (a mirror again)")
    for line in report.warnings:
        stderr.line(line)
    if report.dry_run:
        stderr.line("dry run: nothing was exported, deleted or copied")
