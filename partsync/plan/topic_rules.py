"""Topic configs that decide whether a broker stores appended batches byte-for-byte. Pure.

A local topic that recompresses (``compression.type``) or restamps (``LogAppendTime``) would
change every copied batch, so such topics are refused; ``--create-missing`` creates topics with
the configs that keep batches identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from partsync.errors import UnsafeError
from partsync.wire.batch import Batch

__all__ = [
    "IDENTITY_CONFIGS",
    "KAFKA_TOPIC_DEFAULTS",
    "RETENTION_CONFIGS",
    "LocalTopicRules",
    "create_configs",
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

    def check(self, batch: Batch) -> None:
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


def create_configs(source_configs: Mapping[str, str]) -> dict[str, str]:
    """Configs for a topic created with --create-missing: what keeps batches byte-identical."""
    cfg = {
        "compression.type": "producer",
        "message.timestamp.type": "CreateTime",
        "cleanup.policy": source_configs.get("cleanup.policy", "delete"),
        "max.message.bytes": source_configs.get("max.message.bytes", "1048588"),
    }
    # Same retention as the source where it reports one (a shorter local retention only moves
    # the local log start, never offsets, but a mirror is expected to keep what its source keeps).
    for key in RETENTION_CONFIGS:
        if key in source_configs:
            cfg[key] = source_configs[key]
    return cfg


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
    return LocalTopicRules(compression_type=compression, max_message_bytes=max_bytes), None
