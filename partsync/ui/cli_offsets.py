"""``partsync offsets``: copy consumer groups' committed offsets for failover. Parse, call the
core (``partsync.run.offsets``), render."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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

__all__ = ["OffsetsArgs", "offsets"]


@dataclass(frozen=True)
class OffsetsArgs:
    """``partsync offsets``'s options. --to-datetime is held as given: it is parsed
    (``_parse_time``) after the config is read, so a bad config is reported first, as always."""

    topics: tuple[str, ...]  # each once, in the order given
    source: str | None
    local: str | None
    groups: tuple[str, ...]
    to_datetime: str | None
    as_json: bool

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> OffsetsArgs:
        """Check click's parsed options and hold them: exactly one of --from and
        --to-datetime."""
        if (kw["source"] is None) == (kw["to_datetime"] is None):
            raise UsageError(
                "give either --from CLUSTER (copy the groups' committed offsets) or "
                "--to-datetime TIME (set them by time on the local cluster)"
            )
        return cls(
            topics=tuple(dict.fromkeys(kw["topics"])),
            source=kw["source"],
            local=kw["local"],
            groups=kw["groups"],
            to_datetime=kw["to_datetime"],
            as_json=kw["as_json"],
        )


@click.command(epilog=EXIT_CODES_HELP)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    required=True,
    metavar="TOPIC",
    help="Topic whose offsets are copied; repeat for several.",
)
@click.option(
    "--from",
    "source",
    default=None,
    metavar="CLUSTER",
    help="The cluster the consumers ran on (required unless --to-datetime). " + CLUSTER_HELP,
)
@click.option(
    "--local",
    "local",
    default=None,
    metavar="CLUSTER",
    help="The cluster they fail over to; default: `local` in the config file.",
)
@click.option(
    "--group",
    "groups",
    multiple=True,
    required=True,
    metavar="GROUP",
    help="Consumer group; repeat for several.",
)
@click.option(
    "--to-datetime",
    "to_datetime",
    default=None,
    metavar="TIME",
    help="Instead of copying from --from: set the groups' offsets on the local "
    "cluster to the first data record at or after TIME (ISO 8601, e.g. "
    "2026-11-20T08:00:00Z; without a zone, UTC), read from the local "
    "partitions' own data batches with transaction markers skipped (Kafka's "
    "own time lookup can stop at a replayed marker, which carries the local "
    "leader's time); the log end where no record is that new.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@config_option
@click.pass_obj
def offsets(ctx: Ctx, /, **options: Any) -> None:
    """Copy consumer groups' committed offsets from one cluster to the local one, verbatim.

    partsync keeps offsets identical, so a group's committed offsets mean the same records on
    every cluster it mirrors: no translation. Stop the group's consumers on --from, run a last
    sync, run this, then start the consumers on the local cluster. A group with live members on
    the local cluster is refused (exit 3). A commit beyond the local log end is clamped to it
    (reported as clamped). The committed leader epoch is left unknown.

    With --to-datetime instead of --from, the groups' offsets on the local cluster are set by
    time (reported as reset), as `kafka-consumer-groups --reset-offsets --to-datetime` would,
    but from data records only: the right answer on a mirror whose replayed transaction
    markers carry the local leader's time.
    """
    from partsync.io.pool import ClusterPool
    from partsync.run.offsets import copy_group_offsets, reset_group_offsets_to_time

    args = OffsetsArgs.from_click(options)
    cfg = ctx.config
    loc = cfg.local_ref(args.local)
    if args.to_datetime is not None:
        when = _parse_time(args.to_datetime)
        check_files(loc)
        with ClusterPool() as pool:
            report = reset_group_offsets_to_time(pool.get(loc), args.groups, args.topics, when)
    else:
        assert args.source is not None
        src = cfg.resolve(args.source)
        if src.bootstrap == loc.bootstrap:
            raise UsageError(f"cluster {loc.name} is both --from and the local cluster")
        for ref in (src, loc):
            check_files(ref)
        with ClusterPool() as pool:
            report = copy_group_offsets(pool.get(src), pool.get(loc), args.groups, args.topics)
    if args.as_json:
        emit_json(report.to_dict())
    else:
        from rich.markup import escape

        from partsync.ui.render import WordTable, print_table

        table = WordTable("group", "topic", "partition", "source offset", "local offset", "status")
        for g in report.groups:
            for p in g.partitions:
                table.add_row(
                    escape(g.group),
                    p.topic,
                    str(p.partition),
                    _num(p.source_offset),
                    _num(p.local_offset),
                    p.status,
                )
        print_table(table)
        for g in report.groups:
            if g.reason:
                stderr.line(f"{g.status}: group {g.group}: {g.reason}")
    raise Exit(report.exit_status)


def _parse_time(text: str) -> int:
    """Unix milliseconds of an ISO 8601 time (UTC where it names no zone)."""
    from datetime import UTC, datetime

    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--to-datetime {text!r} is not an ISO 8601 time (e.g. 2026-11-20T08:00:00Z)"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def _num(n: int | None) -> str:
    return "-" if n is None else str(n)
