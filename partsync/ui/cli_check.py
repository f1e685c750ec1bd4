"""``partsync check``: what a sync needs from each cluster, and whether it has it. Parse, call
the core (``partsync.run.check``), render."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from partsync.copy.options import CopyOptions
from partsync.errors import UsageError
from partsync.ui.cli_common import (
    CLUSTER_HELP,
    Ctx,
    Exit,
    SelectionArgs,
    config_option,
    emit_json,
    selection_options_any_sources,
    stderr,
)

__all__ = ["CheckArgs", "check"]

CHECK_EXIT_HELP = """\b
Exit codes:
  0  every cluster answered and has what the run needs (some rights may be unknown: a broker
     that does not report them, or ACLs this client may not read)
  1  a cluster is unreachable, or something the run needs is missing
  2  usage or configuration error
"""


@click.command(epilog=CHECK_EXIT_HELP)
@selection_options_any_sources
@click.option(
    "--clusters",
    default=None,
    metavar="A,B",
    help="Clusters to check, as the run would use them: the local cluster (--local, or `local` "
    "in the config file) if listed, the others as sources. " + CLUSTER_HELP,
)
@click.option(
    "--group",
    default=None,
    metavar="NAME",
    help="The group sync would join (default: partsync.<topics>).",
)
@click.option("--no-group", is_flag=True, help="The run uses --no-group: no group checks.")
@click.option(
    "--fencing/--no-fencing",
    default=True,
    show_default=True,
    help="Whether the run fences (transactional ids 'partsync:<topic>:<partition>').",
)
@click.option(
    "--compaction-holes",
    type=click.Choice(["refuse", "fill"]),
    default="refuse",
    show_default=True,
    help="The run's --compaction-holes: fill needs compacted local topics.",
)
@click.option(
    "--hole-key",
    default=None,
    metavar="KEY",
    help="The run's --hole-key (accepted so a sync command line checks as is).",
)
@config_option
@click.pass_obj
def check(ctx: Ctx, /, **options: Any) -> None:
    """Check that a sync can run: connect and authenticate to every cluster, and report what
    the run needs and whether it has it. Writes nothing and fences nothing.

    Give the same options as the sync you mean to run (`partsync sync ...` becomes `partsync
    check ...`). For each cluster: the broker's protocol version (from ApiVersions) and number
    of brokers; on sources, the topics and DESCRIBE/READ on them; on the local cluster, the
    plan (what sync would copy or refuse, e.g. a local topic setting that breaks identity),
    DESCRIBE/WRITE/DESCRIBE_CONFIGS on the topics (ALTER, DELETE or CREATE where the run would
    grow, start or create one), the transaction coordinator and WRITE on the 'partsync:'
    transactional ids (fencing), and the group coordinator and READ on the group. Rights come
    from the brokers' authorized operations (Kafka 2.3+) and, for transactional ids, from the
    ACLs where this client may read them; what cannot be known is reported as unknown.
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.check import CheckOptions, check_clusters
    from partsync.run.planner import resolve_topics
    from partsync.run.sync import default_group

    args = CheckArgs.from_click(options)
    sel = args.selection
    req = sel.request(ctx, args.copy, sources=_sources(ctx, sel.sources, args.clusters, sel.local))
    with ClusterPool() as pool:
        req = resolve_topics(req, pool)
        group = None if args.no_group else args.group or default_group(req.job_topics)
        report = check_clusters(req, pool, CheckOptions(group, args.fencing))
    if sel.as_json:
        emit_json(report.to_dict())
    else:
        _render(report)
    raise Exit(report.exit_status)


@dataclass(frozen=True)
class CheckArgs:
    """``partsync check``'s options: the run's selection and what of it needs checking."""

    selection: SelectionArgs
    clusters: str | None
    group: str | None
    no_group: bool
    fencing: bool
    copy: CopyOptions

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> CheckArgs:
        """Check click's parsed options and hold them (--hole-key is only checked: it is
        accepted so that a sync command line checks as is)."""
        if kw["group"] is not None and kw["no_group"]:
            raise UsageError("--group and --no-group contradict each other")
        if kw["hole_key"] == "":
            raise UsageError("--hole-key: the key of hole records cannot be empty")
        return cls(
            selection=SelectionArgs.from_click(kw),
            clusters=kw["clusters"],
            group=kw["group"],
            no_group=kw["no_group"],
            fencing=kw["fencing"],
            copy=CopyOptions(compaction_holes=kw["compaction_holes"]),
        )


def _sources(ctx: Ctx, sources: str | None, clusters: str | None, local: str | None) -> str:
    """The run's sources: --sources, and --clusters less the local cluster."""
    if not sources and not clusters:
        raise UsageError("no clusters: give --sources (or --clusters)")
    names = [n.strip() for n in (sources or "").split(",") if n.strip()]
    if clusters:
        loc = ctx.config.local_ref(local) if local or ctx.config.local else None
        for n in (c.strip() for c in clusters.split(",") if c.strip()):
            ref = ctx.config.resolve(n)
            is_local = loc is not None and (ref.name == loc.name or ref.bootstrap == loc.bootstrap)
            if not is_local and n not in names:
                names.append(n)
    if not names:
        raise UsageError("no source cluster: --clusters names only the local cluster")
    return ",".join(names)


def _render(report: object) -> None:
    from rich.markup import escape

    from partsync.plan.preflight import CheckReport, Verdict
    from partsync.ui.render import WordTable, print_table

    assert isinstance(report, CheckReport)
    marks = {
        Verdict.OK: "[green]ok[/]",
        Verdict.MISSING: "[bold red]MISSING[/]",
        Verdict.UNKNOWN: "[yellow]unknown[/]",
        Verdict.WARNING: "[yellow]warning[/]",
    }
    table = WordTable("cluster", "role", "checked", "needs", "result", "why / seen")
    for c in report.clusters:
        if c.error is not None:
            table.add_row(
                escape(c.name), c.role, "connection", "-", marks[Verdict.MISSING], escape(c.error)
            )
            continue
        brokers = f"{c.brokers} broker{'s' if c.brokers != 1 else ''}"
        table.add_row(
            escape(c.name),
            c.role,
            "connection",
            "-",
            marks[Verdict.OK],
            escape(f"{c.bootstrap}: Kafka {c.broker_version} protocol, {brokers}"),
        )
        for f in c.findings:
            table.add_row(
                escape(c.name),
                c.role,
                escape(f.subject),
                f.need,
                marks[f.verdict],
                escape(f.detail),
            )
    print_table(table)
    problems = [(c.name, f) for c in report.clusters for f in c.problems]
    unreachable = [c.name for c in report.clusters if c.error is not None]
    if report.ok:
        stderr.line("ok: every cluster has what the run needs")
        return
    what = []
    if unreachable:
        what.append(f"unreachable: {', '.join(unreachable)}")
    if problems:
        what.append(f"{len(problems)} missing")
    stderr.line(f"not ready: {'; '.join(what)}")
