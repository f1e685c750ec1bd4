"""``partsync promote``: fail a link's topics over to the local cluster. Parse, call the core
(``partsync.run.promote``), render."""

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

__all__ = ["promote"]

PROMOTE_EXIT_HELP = """\b
Exit codes:
  0  every topic is promoted (or was already)
  1  a topic could not be promoted, the job's followers still run, or a cluster failed
  2  usage or configuration error
  3  a consumer group was not copied: it has live members on the local cluster
  4  --planned: the mirror did not reach lag 0 with its sources in time (nothing promoted)
"""


@click.command(epilog=PROMOTE_EXIT_HELP)
@selection_options
@click.option(
    "--group",
    default=None,
    metavar="NAME",
    help="The job's group (sync's --group; default: partsync.<topics>): promote refuses while "
    "it has members (the job's followers would go on mirroring).",
)
@click.option(
    "--no-group", is_flag=True, help="The job runs without a group: no follower to look for."
)
@click.option(
    "--sync-groups",
    default=None,
    metavar="G1,G2",
    help="Copy these consumer groups' committed offsets a last time, after the catch-up.",
)
@click.option(
    "--groups-from",
    default=None,
    metavar="CLUSTER",
    help="The cluster --sync-groups copies commits from; default: the first of --sources.",
)
@click.option(
    "--planned",
    is_flag=True,
    help="A planned switch (both clusters up, e.g. back to the original primary after a "
    "failback): refuse while the --sync-groups groups have members on the source, catch up "
    "until every source partition ends where the mirror does with no transaction open and "
    "stays put for --watch-seconds, and only then promote (exit 4 and nothing promoted if "
    "that takes longer than --planned-timeout).",
)
@click.option(
    "--watch-seconds",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="--planned: how long the sources' ends must stay put (producers stopped).",
)
@click.option(
    "--planned-timeout",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="--planned: how long to catch up before refusing.",
)
@config_option
@click.pass_obj
def promote(ctx: Ctx, /, **options: Any) -> None:
    """Fail a link's topics over: make the local mirrors primaries.

    Refused while the job's followers run (its group has members). Then a last catch-up from
    every source that answers; replayed source transactions still open are aborted and
    counted; the consumer groups' commits are copied a last time (--sync-groups); the failover
    point of every partition (the local end, each source's end, what a source that no longer
    answers held beyond it when a follower last saw it) is recorded in the local topic
    partsync.promotions, after which every partsync run refuses to mirror into the topics; and
    the writes --read-only withheld are granted. Running it again reports what was promoted.
    """
    from partsync.copy.options import CopyOptions
    from partsync.io.pool import ClusterPool
    from partsync.run.planned_switch import PlannedSwitch
    from partsync.run.planner import resolve_topics
    from partsync.run.promote import promote as run_promote
    from partsync.run.sync import default_group
    from partsync.ui.sync_args import group_names, resolve_groups

    if options["group"] is not None and options["no_group"]:
        raise UsageError("--group and --no-group contradict each other")
    sel = SelectionArgs.from_click(options)
    # The catch-up copies as sync does by default: fenced, source transactions replayed.
    req = sel.request(ctx, CopyOptions(transactions="replay"))
    names = group_names(options["sync_groups"])
    if options["sync_groups"] is not None and names is None:
        raise UsageError("--sync-groups: no group named")
    groups = resolve_groups(names, options["groups_from"], ctx.config, req)
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        group = None if options["no_group"] else options["group"] or default_group(req.job_topics)
        planned = None
        if options["planned"]:
            planned = PlannedSwitch(options["watch_seconds"], options["planned_timeout"])
        report = run_promote(req, pool, group=group, groups=groups, planned=planned)
    if sel.as_json:
        emit_json(report.to_dict())
    else:
        _render(report)
    raise Exit(report.exit_status)


def _render(report: Any) -> None:
    from rich.markup import escape

    from partsync.ui.render import WordTable, print_table

    table = WordTable("topic", "partition", "failover point", "sources", "at risk", "aborted")
    for p in report.promoted:
        for fp in p.partitions:
            srcs = ", ".join(f"{s} {'-' if e is None else e}" for s, e in fp.sources.items())
            risk = "unknown" if fp.at_risk is None else str(fp.at_risk)
            table.add_row(
                escape(p.topic),
                str(fp.partition),
                str(fp.local_end),
                escape(srcs),
                risk,
                str(fp.aborted),
            )
    print_table(table)
    for p in report.already:
        stderr.line(f"topic {p.topic}: promoted already")
    for topic, why in report.failed.items():
        stderr.line(f"topic {topic}: not promoted: {why}")
    for why in report.not_in_sync:
        stderr.line(f"not at lag 0, nothing promoted: {why}")
    for line in (*report.warnings, *(f"granted ACL {a}" for a in report.granted)):
        stderr.line(line)
    if report.groups is not None:
        for g in report.groups.groups:
            stderr.line(f"group {g.group}: {g.status}")
