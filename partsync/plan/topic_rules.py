"""Topic configs that decide whether a broker stores appended batches byte-for-byte. Pure.

A local topic that recompresses (``compression.type``) or restamps (``LogAppendTime``) would
change every copied batch, so such topics are refused; ``--create-missing`` creates topics with
the configs that keep batches identical.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch

__all__ = [
    "IDENTITY_CONFIGS",
    "KAFKA_TOPIC_DEFAULTS",
    "RETENTION_CONFIGS",
    "TIMESTAMP_CONFIGS",
    "UNLIMITED_MS",
    "LocalTopicRules",
    "rules_from",
]

# Topic configs that decide whether a broker stores appended batches byte-for-byte.
IDENTITY_CONFIGS = (
    "cleanup.policy",
    "compression.type",
    "message.timestamp.type",
    "max.message.bytes",
)
# Copied to a topic created with --create-missing when the source reports them: a mirror that
# keeps less history than its source would soon fall behind its log start.
RETENTION_CONFIGS = ("retention.ms", "retention.bytes")
# How far a record's timestamp may be behind or ahead of the broker's clock (KIP-937, Kafka
# 3.6+; Kafka 4.0 defaults after.max.ms to 1 hour). The broker rejects a batch outside them
# with INVALID_TIMESTAMP, which no retry fixes: historical data is often older than a limit.
# difference.max.ms is the deprecated single limit both fall back to while left at default.
TIMESTAMP_BEFORE = "message.timestamp.before.max.ms"
TIMESTAMP_AFTER = "message.timestamp.after.max.ms"
TIMESTAMP_DIFFERENCE = "message.timestamp.difference.max.ms"
TIMESTAMP_CONFIGS = (TIMESTAMP_BEFORE, TIMESTAMP_AFTER, TIMESTAMP_DIFFERENCE)
UNLIMITED_MS = 9223372036854775807  # Long.MAX_VALUE, Kafka's "no limit"
# Apache Kafka's topic defaults, assumed when a broker's DescribeConfigs leaves a key out (Tansu
# returns only explicitly set keys).
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "max.message.bytes": "1048588",
}


@dataclass(frozen=True)
class LocalTopicRules:
    """What the local topic's configs allow to be stored byte-for-byte."""

    compression_type: str = "producer"
    max_message_bytes: int | None = None
    # None = no limit. Checked against this machine's clock: a batch right at a limit may
    # still be refused by the broker, whose INVALID_TIMESTAMP answer is then reported as unsafe.
    timestamp_before_max_ms: int | None = None
    timestamp_after_max_ms: int | None = None
    # A compacted topic rejects records without a key (INVALID_RECORD), so a compacted local
    # topic needs the records looked at (the only check that decompresses).
    compacted: bool = False
    # The local topic's time retention (None = unlimited or not reported). Not a refusal:
    # copied batches keep their source timestamps, so the local broker deletes those older than
    # this at its next retention check, and the run says so (``expires``).
    retention_ms: int | None = None

    def expires(self, batch: Batch, now_ms: int | None = None) -> bool:
        """Whether the local topic's time retention already covers ``batch`` (its newest
        record is older than retention.ms): Kafka deletes a segment once its newest timestamp
        is that old, so such a batch is gone from the local log at the next retention check
        unless newer records share its segment."""
        if self.retention_ms is None or batch.max_timestamp < 0:
            return False
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return now - batch.max_timestamp > self.retention_ms

    def filler_stamp(self, first: Batch, now_ms: int) -> int:
        """The CreateTime of the filler records that bring an empty mirror to the sources' log
        start (``first``: the first batch copied after them).

        Kafka answers a time lookup (ListOffsets by timestamp, ``UnifiedLog
        .fetchOffsetByTimestamp``) from the FIRST segment whose largest timestamp is at or
        after the time asked, searched from the log start: a segment of fillers stamped now
        (deleted below the log start, but kept until retention drops the whole segment)
        captured every earlier time and answered nothing, and held time retention back. So
        fillers are stamped as old as the local topic accepts: 0 where
        message.timestamp.before.max.ms is unlimited (Kafka's default), else a minute inside
        that limit, and never after ``first``'s first record."""
        before = self.timestamp_before_max_ms
        if before is None:
            return 0
        oldest = max(0, now_ms - before + 60_000)
        return min(oldest, first.base_timestamp) if first.base_timestamp >= 0 else oldest

    def check(
        self, batch: Batch, now_ms: int | None = None, reserved_key: bytes | None = None
    ) -> None:
        """Refuse a batch the local topic would not store byte-for-byte or would reject.

        ``now_ms`` is the clock for the timestamp limits (this machine's, by default).
        ``reserved_key``: the hole records' key (``--compaction-holes fill``), which no other
        record may use in a compacted local topic (their tombstones would delete it there)."""
        if self.compression_type not in ("producer", batch.codec) and not (
            self.compression_type == "uncompressed" and batch.codec == "none"
        ):
            raise UnsafeError(
                f"local topic has compression.type={self.compression_type}, so the broker would "
                f"recompress {batch.describe()} and change it; set compression.type=producer",
                offset=batch.base_offset,
            )
        if self.max_message_bytes is not None and batch.size > self.max_message_bytes:
            raise UnsafeError(
                f"{batch.describe()} is larger than the local topic's max.message.bytes="
                f"{self.max_message_bytes}; raise it to at least the source's",
                offset=batch.base_offset,
            )
        if self.timestamp_before_max_ms is not None or self.timestamp_after_max_ms is not None:
            self._check_timestamps(batch, int(time.time() * 1000) if now_ms is None else now_ms)
        if self.compacted:
            _check_keys(batch, reserved_key)

    def _check_timestamps(self, batch: Batch, now_ms: int) -> None:
        # The header gives the newest record's timestamp (maxTimestamp) and the first record's
        # (baseTimestamp); records are in practice in time order, and a batch that is not is
        # refused by the broker instead, which is reported the same way.
        oldest, newest = batch.base_timestamp, batch.max_timestamp
        before, after = self.timestamp_before_max_ms, self.timestamp_after_max_ms
        if before is not None and oldest >= 0 and now_ms - oldest > before:
            raise UnsafeError(
                f"{batch.describe()} has a record timestamp {oldest} ms, {now_ms - oldest} ms "
                f"before now, beyond the local topic's {TIMESTAMP_BEFORE}={before}: Kafka would "
                "reject it (INVALID_TIMESTAMP); set the local topic's limit to "
                f"{UNLIMITED_MS} (unlimited), as --create-missing does",
                offset=batch.base_offset,
            )
        if after is not None and newest - now_ms > after:
            raise UnsafeError(
                f"{batch.describe()} has a record timestamp {newest} ms, {newest - now_ms} ms "
                f"after now, beyond the local topic's {TIMESTAMP_AFTER}={after}: Kafka would "
                "reject it (INVALID_TIMESTAMP); set the local topic's limit to "
                f"{UNLIMITED_MS} (unlimited), as --create-missing does",
                offset=batch.base_offset,
            )


def _check_keys(batch: Batch, reserved_key: bytes | None) -> None:
    # Imported here: the records layer (decompression) is needed only for compacted topics.
    from partsync.wire.holes import is_hole
    from partsync.wire.records import iter_records

    if batch.is_control:
        return
    for r in iter_records(batch):
        if r.key is None:
            raise UnsafeError(
                f"{batch.describe()} holds a record without a key at offset {r.offset}; the "
                "local topic is compacted (cleanup.policy has compact) and Kafka rejects "
                "keyless records there (INVALID_RECORD)",
                offset=r.offset,
            )
        if r.key == reserved_key and not is_hole(r.key, r.value, r.headers, reserved_key):
            raise UnsafeError(
                f"{batch.describe()} holds a record at offset {r.offset} whose key is the hole "
                f"records' key {reserved_key!r}: after the compacted local topic is cleaned, "
                "a hole record's tombstone would delete it; choose a --hole-key no record uses",
                offset=r.offset,
            )


def _retention(configs: Mapping[str, str], policy: set[str]) -> int | None:
    """retention.ms as Kafka applies it to a topic whose ``cleanup.policy`` set has delete
    (-1: unlimited)."""
    try:
        value = int(configs.get("retention.ms", -1))
    except ValueError:
        return None
    return value if value >= 0 and "delete" in policy else None


def _limit(configs: Mapping[str, str], key: str) -> int | None:
    """A timestamp limit in ms as Kafka applies it: the key's value unless left at Long.MAX,
    then the deprecated difference.max.ms; None when neither sets one."""
    for k in (key, TIMESTAMP_DIFFERENCE):
        try:
            value = int(configs.get(k, UNLIMITED_MS))
        except ValueError:
            continue
        if 0 <= value < UNLIMITED_MS:
            return value
    return None


def rules_from(configs: Mapping[str, str]) -> tuple[LocalTopicRules, str | None]:
    """The local topic's rules, and a refusal reason if no batch can be stored as sent."""
    if configs.get("message.timestamp.type", "CreateTime") == "LogAppendTime":
        return LocalTopicRules(), (
            "local topic has message.timestamp.type=LogAppendTime: the broker would restamp every "
            "batch; set it to CreateTime"
        )
    compression = configs.get("compression.type", "producer")
    try:
        max_bytes = int(configs.get("max.message.bytes", "0")) or None
    except ValueError:
        max_bytes = None
    policy = {p.strip() for p in configs.get("cleanup.policy", "delete").lower().split(",")}
    rules = LocalTopicRules(
        compression_type=compression,
        max_message_bytes=max_bytes,
        timestamp_before_max_ms=_limit(configs, TIMESTAMP_BEFORE),
        timestamp_after_max_ms=_limit(configs, TIMESTAMP_AFTER),
        compacted="compact" in policy,
        retention_ms=_retention(configs, policy),
    )
    return rules, None
