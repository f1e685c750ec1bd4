"""``partsync offsets``: copy consumer groups' committed offsets for failover. Parse, call the
core (``partsync.run.offsets``), render."""

from __future__ import annotations

import click

from partsync.config import check_files
from partsync.errors import UsageError
from partsync.ui.cli_common import (
    CLUSTER_HELP,
    EXIT_CODES_HELP,
    Ctx,
    Exit,
    config_option,
    emit_json,
    stderr,
)

__all__ = ["offsets"]


@click.command(epilog=EXIT_CODES_HELP)
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC",
              help="Topic whose offsets are copied; repeat for several.")  # fmt: skip
@click.option("--from", "source", required=True, metavar="CLUSTER",
              help="The cluster the consumers ran on. " + CLUSTER_HELP)  # fmt: skip
@click.option("--local", "local", default=None, metavar="CLUSTER",
              help="The cluster they fail over to; default: `local` in the config file.")  # fmt: skip
@click.option("--group", "groups", multiple=True, required=True, metavar="GROUP",
              help="Consumer group; repeat for several.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@config_option
@click.pass_obj
def offsets(
    ctx: Ctx,
    topics: tuple[str, ...],
    source: str,
    local: str | None,
    groups: tuple[str, ...],
    as_json: bool,
) -> None:
    """Copy consumer groups' committed offsets from one cluster to the local one, verbatim.

    partsync keeps offsets identical, so a group's committed offsets mean the same records on
    every cluster it mirrors: no translation. Stop the group's consumers on --from, run a last
    sync, run this, then start the consumers on the local cluster. A group with live members on
    the local cluster is refused (exit 3). A commit beyond the local log end is clamped to it
    (reported as clamped). The committed leader epoch is left unknown.
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.offsets import copy_group_offsets

    cfg = ctx.config
    src, loc = cfg.resolve(source), cfg.local_ref(local)
    if src.bootstrap == loc.bootstrap:
        raise UsageError(f"cluster {loc.name} is both --from and the local cluster")
    for ref in (src, loc):
        check_files(ref)
    with ClusterPool() as pool:
        report = copy_group_offsets(pool.get(src), pool.get(loc), groups,
                                    tuple(dict.fromkeys(topics)))  # fmt: skip
    if as_json:
        emit_json(report.to_dict())
    else:
        from rich.markup import escape

        from partsync.ui.render import WordTable, print_table

        table = WordTable("group", "topic", "partition", "source offset", "local offset", "status")
        for g in report.groups:
            for p in g.partitions:
                table.add_row(escape(g.group), p.topic, str(p.partition), _num(p.source_offset),
                              _num(p.local_offset), p.status)  # fmt: skip
        print_table(table)
        for g in report.groups:
            if g.reason:
                stderr.print(f"{g.status}: group {g.group}: {g.reason}", markup=False,
                             highlight=False)  # fmt: skip
    raise Exit(report.exit_status)


def _num(n: int | None) -> str:
    return "-" if n is None else str(n)
