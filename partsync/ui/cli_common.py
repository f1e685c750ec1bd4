"""What the CLI's commands share: help texts, the config context, option sets, the request
builder, JSON output and the exit-status hand-off."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from partsync.config import Config, check_files, load_config
from partsync.copy.options import CopyOptions
from partsync.errors import ExitStatus, UsageError
from partsync.plan.comparator import PlanPolicy
from partsync.plan.selection import parse_partitions

__all__ = [
    "CLUSTER_HELP",
    "EXIT_CODES_HELP",
    "Ctx",
    "Exit",
    "SelectionArgs",
    "TopicArgs",
    "build_request",
    "config_option",
    "emit_json",
    "selection_options",
    "selection_options_any_sources",
    "stderr",
]


EXIT_CODES_HELP = """\b
Exit codes:
  0  every selected partition is in sync with the target it planned (or handed over to
     another process of the job); --follow: stopped by SIGTERM/Ctrl-C
  1  any other failure (unreachable cluster, broker error, group not joined); safe to rerun
  2  usage or configuration error
  3  at least one partition was refused as unsafe (others were still synced)
  4  not caught up: sync --deadline stopped the run first, or a partition is behind (a source
     transaction held back until its marker); run again later
  5  --follow: a followed topic was deleted on every source that had it (its mirror is kept)
"""

CLUSTER_HELP = (
    "A cluster is a name from the config file ([clusters.NAME]) or a host:port bootstrap "
    "address; one broker of a cluster suffices (the others come from its metadata)."
)

if TYPE_CHECKING:
    from rich.console import Console


class StderrConsole:
    """rich's console on stderr, made on first use: importing rich costs about 25 ms, which a
    run that prints nothing but its ``--json`` document (a crontab's, a script's) never needs.
    Messages are never hard-wrapped: a log line or a piped error stays one line, whole."""

    def __init__(self) -> None:
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, soft_wrap=True)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        self.console.print(*objects, **kwargs)

    def line(self, text: str) -> None:
        """``text`` as it is: no rich markup read in it, nothing highlighted (a topic name or a
        broker's message may hold brackets)."""
        self.console.print(text, highlight=False, markup=False)

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal


stderr = StderrConsole()


# Set once a command printed its --json document: an error after that must not add a second.
_json_emitted = False


def emit_json(doc: dict[str, Any]) -> None:
    global _json_emitted
    _json_emitted = True
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


def reset_json_output() -> None:
    """A new command line: no document printed yet (``raw_main`` runs once per process, but
    tests call it many times)."""
    global _json_emitted
    _json_emitted = False


def emit_json_error(kind: str, message: str, status: ExitStatus, **fields: Any) -> None:
    """``--json``'s document for a run that ended in an error before its report: one object
    ``{"error": {...}}``, so a cron job appending ``--json`` output to a log never records
    silence. Nothing if a document was printed already."""
    if not _json_emitted:
        emit_json({"error": error_doc(kind, message, status, **fields)})


def error_doc(kind: str, message: str, status: ExitStatus, **fields: Any) -> dict[str, Any]:
    """The ``error`` object of --json output: what failed, where (when known), the exit code."""
    doc: dict[str, Any] = {"kind": kind, "message": message, "exit_code": int(status)}
    for key in ("cluster", "topic", "partition", "offset", "retriable"):
        doc[key] = fields.get(key)
    return doc


class Exit(Exception):
    """How a command body hands its exit status to ``program`` (never leaves this module)."""

    def __init__(self, status: ExitStatus) -> None:
        super().__init__(int(status))
        self.status = status


class Ctx:
    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path
        self._config: Config | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--config`` after the subcommand as well as before it (the later one wins)."""

    def remember(click_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            obj = click_ctx.find_object(Ctx)
            if obj is not None:
                obj.config_path = value
                obj._config = None

    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        default=None,
        expose_value=False,
        is_eager=True,
        callback=remember,
        metavar="FILE",
        help="Config file (TOML); same as the option before the command.",
    )(f)


@dataclass(frozen=True)
class TopicArgs:
    """``--topic``, ``--topic-pattern`` and ``--exclude`` as given."""

    named: tuple[str, ...]
    patterns: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()

    def selection(self) -> Any:
        """A ``TopicSelection``, or None with only named topics (nothing to resolve)."""
        from partsync.plan.topic_select import TopicSelection, compile_patterns

        if not self.named and not self.patterns:  # --exclude alone selects nothing either
            raise UsageError("no topic: give --topic or --topic-pattern")
        for t in self.named:
            if not t.strip():
                raise UsageError("empty topic name")
        if not self.patterns and not self.excludes:
            return None
        return TopicSelection(
            tuple(dict.fromkeys(self.named)),
            compile_patterns(self.patterns, "--topic-pattern"),
            compile_patterns(self.excludes, "--exclude"),
        )


@dataclass(frozen=True)
class SelectionArgs:
    """What ``selection_options`` parsed: the topics, clusters and plan policy of a run."""

    topics: TopicArgs
    sources: str | None
    local: str | None
    partitions: str | None
    chunk_offsets: int
    on_retention_gap: str
    create_missing: bool
    add_partitions: bool
    as_json: bool
    sync_configs: bool = False
    sync_acls: bool = False
    read_only: bool = False

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> SelectionArgs:
        return cls(
            topics=TopicArgs(kw["topics"], kw["topic_patterns"], kw["excludes"]),
            sources=kw["sources"],
            local=kw["local"],
            partitions=kw["partitions"],
            chunk_offsets=kw["chunk_offsets"],
            on_retention_gap=kw["on_retention_gap"],
            create_missing=kw["create_missing"],
            add_partitions=kw["add_partitions"],
            as_json=kw["as_json"],
            sync_configs=kw["sync_configs"],
            sync_acls=kw["sync_acls"],
            read_only=kw["read_only"],
        )

    def request(self, ctx: Ctx, options: CopyOptions, sources: str | None = None) -> Any:
        """The run's ``SyncRequest``, its clusters resolved in the config (``sources`` in
        place of --sources when a command names them another way)."""
        return build_request(
            ctx,
            self.topics,
            self.sources if sources is None else sources,
            self.local,
            self.partitions,
            self.chunk_offsets,
            self.create_missing,
            options,
            on_retention_gap=self.on_retention_gap,
            add_partitions=self.add_partitions,
            sync_configs=self.sync_configs,
            sync_acls=self.sync_acls,
            read_only=self.read_only,
        )


def selection_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say what a run syncs (plan, sync)."""
    return _with_selection_options(f, sources_required=True)


def selection_options_any_sources(f: Callable[..., Any]) -> Callable[..., Any]:
    """``selection_options`` with --sources optional, for a command that has another way to
    name its sources (check's --clusters)."""
    return _with_selection_options(f, sources_required=False)


def _with_selection_options(f: Callable[..., Any], sources_required: bool) -> Callable[..., Any]:
    options = [
        click.option(
            "--topic",
            "topics",
            multiple=True,
            metavar="TOPIC",
            help="Topic to sync; repeat for several (or give --topic-pattern).",
        ),
        click.option(
            "--topic-pattern",
            "topic_patterns",
            multiple=True,
            metavar="REGEX",
            help="Also every topic on a source whose whole name matches REGEX (Python syntax; "
            "internal __ topics only when named); repeat for several. Resolved when the run "
            "starts; a follower also adopts topics that appear later, at its next topic check "
            "(--topic-check-interval). `plan` lists the result.",
        ),
        click.option(
            "--exclude",
            "excludes",
            multiple=True,
            metavar="REGEX",
            help="Leave out topics whose whole name matches REGEX (named ones too); repeat for "
            "several.",
        ),
        click.option(
            "--sources",
            # No explicit default: click 8.3+ takes ``default=None`` for a value given, and
            # would not enforce ``required``.
            required=sources_required,
            metavar="A,B",
            help="Comma-separated source clusters. " + CLUSTER_HELP,
        ),
        click.option(
            "--local",
            "local",
            default=None,
            metavar="CLUSTER",
            help="The local (destination) cluster: a name from the config file, or its "
            "bootstrap addresses host:port[,host:port...]; default: `local` in the config file.",
        ),
        click.option(
            "--partitions",
            "partitions",
            default=None,
            metavar="SPEC",
            help="Only these partitions, e.g. 0,3-5 (default: all).",
        ),
        click.option(
            "--chunk-offsets",
            type=click.IntRange(min=1),
            default=PlanPolicy().chunk_offsets,
            show_default=True,
            help="Offsets per chunk; chunks are fetched from different sources in parallel.",
        ),
        click.option(
            "--on-retention-gap",
            type=click.Choice(["refuse", "skip"]),
            default="refuse",
            show_default=True,
            help="A local partition that fell behind every source's retention (its end below "
            "every source's log start): refuse it (exit 3, nothing written), or skip the lost "
            "offsets: start again at the sources' log start, deleting the local records below "
            "it (reported in the result's notes).",
        ),
        click.option(
            "--create-missing",
            is_flag=True,
            help="Create a missing local topic with the sources' partition count, the "
            "source's retention, cleanup, segment and compaction settings (the followed "
            "configs, see --sync-configs) and the mirror's own: compression.type=producer, "
            "CreateTime, no timestamp limits.",
        ),
        click.option(
            "--sync-configs",
            is_flag=True,
            help="Set the local topics' followed configs (retention.*, cleanup.policy, "
            "segment.*, max.message.bytes, compaction settings; the config file's "
            "[topic_configs] adds and removes keys) as the source has them, and hold the "
            "mirror's own (compression.type=producer, CreateTime, no timestamp limits): once "
            "per run, and with --follow at every topic check. A source topic turned "
            "LogAppendTime is refused (exit 3). `plan --sync-configs` shows the drift.",
        ),
        click.option(
            "--sync-acls",
            is_flag=True,
            help="Copy the source's ACLs on the mirrored topics (and, with --follow, on the "
            "--sync-groups groups) to the local cluster (DescribeAcls, CreateAcls), and "
            "remove those partsync created that the source no longer has, as its record "
            "(topic partsync.acls) says: never an ACL someone else made. The config file's "
            "[acls] filters and maps principals. Once per run, and with --follow at every "
            "topic check; `plan --sync-acls` shows the changes.",
        ),
        click.option(
            "--read-only",
            is_flag=True,
            help="Keep the mirror topics read-only: no grant that lets another principal "
            "change them (WRITE, DELETE, ALTER, ALTER_CONFIGS, ALL) is copied, and every run warns of local "
            "grants that do (partsync's own principal aside; [acls] principal names it where "
            "its login does not). Needs an authorizer and "
            "allow.everyone.if.no.acl.found=false on the local cluster (else exit 2); super "
            "users can still write.",
        ),
        click.option(
            "--add-partitions/--no-add-partitions",
            default=True,
            show_default=True,
            help="When the sources have more partitions than the local topic, grow it to their "
            "count (CreatePartitions) before copying the new ones; with --no-add-partitions the "
            "topic is refused instead (exit 3).",
        ),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def build_request(
    ctx: Ctx,
    topics: TopicArgs,
    sources: str | None,
    local: str | None,
    partitions: str | None,
    chunk_offsets: int,
    create_missing: bool,
    options: CopyOptions | None = None,
    on_retention_gap: str = "refuse",
    add_partitions: bool = True,
    sync_configs: bool = False,
    sync_acls: bool = False,
    read_only: bool = False,
) -> Any:
    from partsync.plan.acls import DEFAULT_RECORD_TOPIC, AclOptions, AclPolicy
    from partsync.plan.topic_configs import ConfigPolicy
    from partsync.run.planner import SyncRequest

    cfg = ctx.config
    if not sources:
        raise UsageError("no source cluster: pass --sources A,B")
    srcs = cfg.resolve_list(sources)
    loc = cfg.local_ref(local)
    if loc.name in {s.name for s in srcs} or loc.bootstrap in {s.bootstrap for s in srcs}:
        raise UsageError(f"cluster {loc.name} is both a source and the local cluster")
    for ref in (*srcs, loc):
        check_files(ref)
    return SyncRequest(
        selection=topics.selection(),
        topics=tuple(dict.fromkeys(topics.named)),
        sources=tuple(srcs),
        local=loc,
        partitions=parse_partitions(partitions),
        create_missing=create_missing,
        add_partitions=add_partitions,
        policy=PlanPolicy(chunk_offsets=chunk_offsets, retention_gap=on_retention_gap),
        options=options or CopyOptions(),
        sync_configs=sync_configs,
        config_policy=ConfigPolicy.of(cfg.follow_configs, cfg.unfollow_configs),
        acls=AclOptions(
            sync=sync_acls,
            read_only=read_only,
            policy=AclPolicy(
                cfg.acls.get("principals", ()), cfg.acls.get("exclude", ()), cfg.acls.get("map", ())
            ),
            record_topic=cfg.acls.get("record_topic") or DEFAULT_RECORD_TOPIC,
            principal=cfg.acls.get("principal"),
        ),
    )
