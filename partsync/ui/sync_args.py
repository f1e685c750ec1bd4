"""``plan``'s and ``sync``'s options parsed into one checked, frozen dataclass per command.

``from_click`` takes what click parsed (``sync_options``) and does every check between options
that needs no config file, in the order the messages have always come in; what needs the config
(the clusters) is resolved after it, by the command (``SelectionArgs.request``,
``groups_to_sync``). The core never sees click: it gets the ``CopyOptions`` and ``RunOptions``
built here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partsync.config import Config, check_files
from partsync.copy.options import CopyOptions
from partsync.errors import UsageError
from partsync.ui.cli_common import SelectionArgs

if TYPE_CHECKING:
    from partsync.run.planner import SyncRequest
    from partsync.run.runner import RunOptions
    from partsync.run.sync import GroupsToSync

__all__ = ["PlanArgs", "SyncArgs", "group_names", "groups_to_sync", "resolve_groups"]


@dataclass(frozen=True)
class PlanArgs:
    """``partsync plan``'s options."""

    selection: SelectionArgs
    copy: CopyOptions
    scan: bool

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> PlanArgs:
        return cls(
            selection=SelectionArgs.from_click(kw),
            copy=CopyOptions(
                compaction_holes=kw["compaction_holes"],
                transactions=_transactions(kw["transactions"], fencing=True),
                max_in_flight_bytes=kw["max_in_flight_bytes"],
            ),
            scan=kw["scan"],
        )


@dataclass(frozen=True)
class SyncArgs:
    """``partsync sync``'s options: what to copy (``selection``), how (``copy``), and how the
    run goes (engine, group, follow mode, deadline, metrics, consumer groups to keep current)."""

    selection: SelectionArgs
    copy: CopyOptions
    engine: str
    spark_master: str | None
    parallelism: int
    retries: int
    deadline: float | None
    metrics_file: str | None
    follow: bool
    group: str | None
    no_group: bool
    session_timeout: float
    group_protocol: str
    follow_wait_ms: int
    topic_check: float
    metrics_port: int | None
    metrics_host: str
    # --sync-groups: None when not given, else the names given (empty when only commas were;
    # refused by ``groups_to_sync``, after the config is read, where it always was).
    sync_groups: tuple[str, ...] | None
    groups_from: str | None
    sync_groups_interval: float

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> SyncArgs:
        """Check ``kw`` (click's parsed options) and hold them; a ``UsageError`` for options
        that contradict each other, a --metrics-file that cannot be written, an empty
        --hole-key, or --transactions replay without fencing."""
        engine, follow, group = kw["engine"], kw["follow"], kw["group"]
        deadline, metrics_file = kw["deadline"], kw["metrics_file"] or None
        groups_from = kw["groups_from"] or None
        if engine == "spark" and (follow or group):
            raise UsageError(
                "--follow and --group run on the local engine (Spark tasks cannot hold "
                "group membership); use --engine local"
            )
        if follow and deadline is not None:
            raise UsageError("--deadline is for one-shot runs; follow mode runs until stopped")
        if follow and metrics_file:
            raise UsageError(
                "--metrics-file is for one-shot runs; follow mode serves --metrics-port"
            )
        if kw["metrics_port"] is not None and not follow:
            raise UsageError("--metrics-port is for --follow; one-shot runs write --metrics-file")
        if (kw["sync_groups"] or groups_from) and not follow:
            raise UsageError(
                "--sync-groups is for --follow; a one-shot run copies commits with "
                "`partsync offsets`"
            )
        if group is not None and kw["no_group"]:
            raise UsageError("--group and --no-group contradict each other")
        if metrics_file:
            _check_writable(metrics_file)
        if not kw["hole_key"]:
            raise UsageError("--hole-key: the key of hole records cannot be empty")
        return cls(
            selection=SelectionArgs.from_click(kw),
            copy=_copy_options(kw),
            engine=engine,
            spark_master=kw["spark_master"],
            parallelism=kw["parallelism"],
            retries=kw["retries"],
            deadline=deadline,
            metrics_file=metrics_file,
            follow=follow,
            group=group,
            no_group=kw["no_group"],
            session_timeout=kw["session_timeout"],
            group_protocol=kw["group_protocol"],
            follow_wait_ms=kw["follow_wait_ms"],
            topic_check=kw["topic_check"],
            metrics_port=kw["metrics_port"],
            metrics_host=kw["metrics_host"],
            sync_groups=group_names(kw["sync_groups"]),
            groups_from=groups_from,
            sync_groups_interval=kw["sync_groups_interval"],
        )

    def run_options(self) -> RunOptions:
        from partsync.run.runner import RunOptions

        return RunOptions(
            follow=self.follow,
            group=self.group,
            session_timeout_ms=int(self.session_timeout * 1000),
            group_protocol=self.group_protocol,
            follow_wait_ms=self.follow_wait_ms,
            topic_check_s=self.topic_check,
            parallelism=self.parallelism,
        )


def groups_to_sync(args: SyncArgs, config: Config, req: SyncRequest) -> GroupsToSync | None:
    """--sync-groups resolved against the config (``resolve_groups``)."""
    return resolve_groups(
        args.sync_groups, args.groups_from, config, req, args.sync_groups_interval
    )


def resolve_groups(
    names: tuple[str, ...] | None,
    groups_from: str | None,
    config: Config,
    req: SyncRequest,
    interval_s: float = 5.0,
) -> GroupsToSync | None:
    """--sync-groups and --groups-from: the groups and the cluster whose commits are copied
    (--groups-from, or the first source), which must not be the local one; None when not
    asked."""
    if names is None:
        return None
    from partsync.run.sync import GroupsToSync

    if not names:
        raise UsageError("--sync-groups: no group named")
    src = config.resolve(groups_from) if groups_from else req.sources[0]
    if src.bootstrap == req.local.bootstrap:
        raise UsageError(f"--groups-from {src.name} is the local cluster")
    check_files(src)
    return GroupsToSync(names, src, interval_s)


def group_names(given: str | None) -> tuple[str, ...] | None:
    """--sync-groups G1,G2 as names, each once; None when not given (or given empty)."""
    if not given:
        return None
    return tuple(dict.fromkeys(g.strip() for g in given.split(",") if g.strip()))


def _copy_options(kw: Mapping[str, Any]) -> CopyOptions:
    """What a partition copy is told (--transactions after the checks above: its own error
    came after theirs)."""
    fencing = kw["fencing"]
    return CopyOptions(
        max_in_flight_bytes=kw["max_in_flight_bytes"],
        memory_budget=kw["memory_budget"],
        connections_per_broker=kw["connections_per_broker"],
        max_bytes_per_sec=kw["max_bytes_per_sec"],
        hw_wait_s=kw["replication_wait"],
        fencing=fencing,
        fencing_renew_s=kw["fencing_renew"],
        filler_records=kw["filler_records"],
        compaction_holes=kw["compaction_holes"],
        hole_key=kw["hole_key"].encode(),
        transactions=_transactions(kw["transactions"], fencing),
        transaction_timeout_ms=int(kw["transaction_timeout"] * 1000),
    )


def _transactions(asked: str | None, fencing: bool) -> str:
    """--transactions: replay unless asked otherwise, or without fencing, which a replay needs
    (its transaction slots are fenced with the partition): that keeps refusing as before."""
    if asked == "replay" and not fencing:
        raise UsageError(
            "--transactions replay needs fencing: its transaction slots are fenced "
            "with the partition"
        )
    if asked is None:
        return "replay" if fencing else "refuse"
    return asked


def _check_writable(path: str) -> None:
    """A metrics file that cannot be written is a usage error before anything is copied, not
    after: a temporary file is created beside it (where ``write_textfile`` creates its own
    before the rename) and removed again. ``os.access`` is not enough: root passes it for
    /proc, where nothing can be created."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"--metrics-file {path}: is a directory")
    if not folder.is_dir():
        raise UsageError(f"--metrics-file {path}: directory {folder} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".check", dir=folder)
    except OSError as e:
        raise UsageError(
            f"--metrics-file {path}: cannot create a file in {folder}: {e.strerror or e}"
        ) from None
    os.close(fd)
    os.unlink(probe)
