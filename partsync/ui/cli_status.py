"""``partsync status``: a link at a glance, per topic. Parse, call the core
(``partsync.run.link_status``), render."""

from __future__ import annotations

from typing import Any

import click

from partsync.errors import UsageError
from partsync.ui.cli_common import (
    Ctx,
    Exit,
    SelectionArgs,
    config_option,
    emit_json,
    selection_options,
    stderr,
)

__all__ = ["status"]

STATUS_EXIT_HELP = """\b
Exit codes:
  0  every topic is caught up, being mirrored, or promoted (failed over)
  1  a topic failed (not plannable: no source answered, a missing local topic, ...)
  2  usage or configuration error
  3  a topic or partition is refused as unsafe
  4  a topic is paused: behind, and the job's group has no member
  5  a mirror whose topic no source holds any more (source-gone)
"""


@click.command(epilog=STATUS_EXIT_HELP)
@selection_options
@click.option(
    "--group",
    default=None,
    metavar="NAME",
    help="The job's group (sync's --group; default: partsync.<topics>, as sync names it): a "
    "topic behind while it has no member is 'paused'.",
)
@click.option(
    "--no-group",
    is_flag=True,
    help="The job runs without a group: topics behind are 'mirroring', not told from paused.",
)
@click.option(
    "--metrics-file",
    type=click.Path(dir_okay=False),
    default=None,
    metavar="FILE",
    help="Also write the topics' state, lag and config drift as Prometheus metrics to FILE, "
    "atomically (node_exporter textfile collector; run it from cron).",
)
@config_option
@click.pass_obj
def status(ctx: Ctx, /, **options: Any) -> None:
    """Show a link's state per topic: caught-up, mirroring, paused, failed, source-gone or
    promoted,
    with its lag in records and in seconds and its config drift. Writes nothing.

    Give the link's own options (`partsync sync --follow ...` becomes `partsync status ...`).
    Lag in seconds is the source's newest data timestamp minus the mirror's (transaction
    markers and filler batches are skipped: they carry a cluster's clock, not the data's);
    config drift names the followed configs whose local value differs from the source's.
    A local topic the selection matches that no source holds is 'source-gone'.
    """
    from partsync.copy.options import CopyOptions
    from partsync.io.pool import ClusterPool
    from partsync.plan.link_status import status_exit
    from partsync.run.link_status import link_status
    from partsync.run.planner import resolve_topics
    from partsync.run.sync import default_group

    if options["group"] is not None and options["no_group"]:
        raise UsageError("--group and --no-group contradict each other")
    sel = SelectionArgs.from_click(options)
    req = sel.request(ctx, CopyOptions())
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        group = None if options["no_group"] else options["group"] or default_group(req.job_topics)
        topics = link_status(req, pool, group)
    code = status_exit(topics)
    if options["metrics_file"]:
        from partsync.ui.topic_metrics import write_status_textfile

        write_status_textfile(options["metrics_file"], topics)
    if sel.as_json:
        emit_json({"group": group, "topics": [t.to_dict() for t in topics]})
    else:
        _render(topics)
    raise Exit(code)


def _render(topics: list[Any]) -> None:
    from rich.markup import escape

    from partsync.ui.render import WordTable, print_table, styled

    table = WordTable("topic", "state", "partitions", "lag records", "lag s", "config drift", "why")
    for t in topics:
        seconds = "-" if t.lag_seconds is None else f"{t.lag_seconds:g}"
        table.add_row(
            escape(t.topic),
            styled(t.state.value),
            str(len(t.partitions)),
            str(t.lag_records),
            seconds,
            escape(", ".join(t.config_drift)) or "-",
            escape(t.reason or ""),
        )
    print_table(table)
    counts: dict[str, int] = {}
    for t in topics:
        counts[t.state.value] = counts.get(t.state.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    stderr.line(f"{len(topics)} topics: {summary}")
