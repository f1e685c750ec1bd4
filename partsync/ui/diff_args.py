"""``diff``'s options parsed into one checked, frozen dataclass.

``from_click`` takes what click parsed (``cli_diff``) and does the check that has always come
before the config file is read (an empty topic name); ``request`` does the rest after the
clusters are resolved in the config, in the order the messages have always come in: the
clusters (each known, its TLS files present, at least two), then --hole-key, then --partitions.
The core never sees click: it gets the ``DiffRequest`` built here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from partsync.config import Config, check_files
from partsync.errors import UsageError
from partsync.plan.diff_model import DiffOptions, DiffRequest, Level
from partsync.plan.selection import parse_partitions

__all__ = ["DiffArgs"]


@dataclass(frozen=True)
class DiffArgs:
    """``partsync diff``'s options: what to compare (topics, clusters, partitions), how (level,
    chunk size, holes), where (engine) and what is written (--json, --html).

    --clusters, --partitions and --hole-key are held as given: ``request`` checks them after
    the config is read, so a bad config or cluster is reported first, as always."""

    topics: tuple[str, ...]  # each once, in the order given
    clusters: str
    partitions: str | None
    level: Level
    chunk_offsets: int
    compaction_holes: bool  # --compaction-holes fill
    hole_key: str
    parallelism: int
    as_json: bool
    html_path: str | None
    engine: str
    spark_master: str | None
    slice_offsets: int | None

    @classmethod
    def from_click(cls, kw: Mapping[str, Any]) -> DiffArgs:
        """Check click's parsed options and hold them; a ``UsageError`` for an empty (or
        blank) topic name."""
        for t in kw["topics"]:
            if not t.strip():
                raise UsageError("empty topic name")
        return cls(
            topics=tuple(dict.fromkeys(kw["topics"])),
            clusters=kw["clusters"],
            partitions=kw["partitions"],
            level=Level(kw["level"]),
            chunk_offsets=kw["chunk_offsets"],
            compaction_holes=kw["compaction_holes"] == "fill",
            hole_key=kw["hole_key"],
            parallelism=kw["parallelism"],
            as_json=kw["as_json"],
            html_path=kw["html_path"],
            engine=kw["engine"],
            spark_master=kw["spark_master"],
            slice_offsets=kw["slice_offsets"],
        )

    def request(self, config: Config) -> DiffRequest:
        """The diff's ``DiffRequest``, its clusters resolved in ``config``: a ``ConfigError``
        for an unknown, repeated or missing cluster or a missing TLS file; a ``UsageError`` for
        fewer than two clusters, an empty --hole-key or a bad --partitions spec."""
        refs = config.resolve_list(self.clusters)
        for ref in refs:
            check_files(ref)
        if len(refs) < 2:
            raise UsageError("diff needs at least two clusters")
        if not self.hole_key:
            raise UsageError("--hole-key: the key of hole records cannot be empty")
        return DiffRequest(
            topics=self.topics,
            clusters=tuple(refs),
            partitions=parse_partitions(self.partitions),
            options=DiffOptions(
                level=self.level,
                chunk_offsets=self.chunk_offsets,
                compaction_holes=self.compaction_holes,
                hole_key=self.hole_key.encode(),
            ),
        )
