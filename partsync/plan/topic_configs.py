"""Which topic configs a mirror takes from its source, and which it owns (pure).

A mirror must answer consumers as its source does: how long it keeps data, how it compacts and
where its segments roll (a time lookup finds the first segment whose largest timestamp reaches
the target, so segments of another size can answer differently). Those settings follow the
source (``FOLLOWED``, extended or narrowed by the config file's ``[topic_configs]``). Others
the mirror owns whatever the source says, because offset identity depends on them:
``compression.type=producer`` (anything else recompresses batches), ``CreateTime`` (a
LogAppendTime topic restamps every batch), and unlimited timestamp limits (they are checked
against the local clock when a batch is appended: a source's limit of one hour would refuse any
copy an hour behind). The local cluster keeps the rest: replication, ``min.insync.replicas``,
tiered storage, throttles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from partsync.errors import ConfigError
from partsync.plan.topic_rules import TIMESTAMP_AFTER, TIMESTAMP_BEFORE, UNLIMITED_MS

__all__ = [
    "FOLLOWED",
    "MIRROR_OWNED",
    "ConfigPolicy",
    "config_changes",
    "identity_breaking",
    "mirror_configs",
]

# What the mirror copies from its source, on creation and (--sync-configs) as it changes.
FOLLOWED = frozenset(
    {
        "cleanup.policy",
        "retention.ms",
        "retention.bytes",
        "segment.bytes",
        "segment.ms",
        "segment.jitter.ms",
        "segment.index.bytes",
        "index.interval.bytes",
        "max.message.bytes",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "file.delete.delay.ms",
    }
)
# What the mirror holds whatever its source says: offset identity depends on these.
MIRROR_OWNED: Mapping[str, str] = {
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    TIMESTAMP_BEFORE: str(UNLIMITED_MS),
    TIMESTAMP_AFTER: str(UNLIMITED_MS),
}
# The local cluster's own: never copied (durability, tiered storage, throttles, placement).
LOCAL_OWNED = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "preallocate",
        "message.timestamp.difference.max.ms",
        "message.downconversion.enable",
    }
)


@dataclass(frozen=True)
class ConfigPolicy:
    """The configs a mirror follows: ``FOLLOWED`` plus ``add`` less ``remove`` (the config
    file's ``[topic_configs]``)."""

    followed: frozenset[str] = FOLLOWED

    @classmethod
    def of(cls, add: Iterable[str] = (), remove: Iterable[str] = ()) -> ConfigPolicy:
        """Raises ``ConfigError`` naming a key the mirror or the local cluster owns."""
        add, remove = frozenset(add), frozenset(remove)
        for key in sorted(add):
            if key in MIRROR_OWNED:
                raise ConfigError(
                    f"[topic_configs] add: {key} cannot follow the source: the mirror holds "
                    f"{key}={MIRROR_OWNED[key]}, which offset identity needs"
                )
            if key in LOCAL_OWNED:
                raise ConfigError(
                    f"[topic_configs] add: {key} is the local cluster's own setting "
                    "(durability, tiered storage, throttles), never copied from a source"
                )
        return cls((FOLLOWED | add) - remove)


def mirror_configs(policy: ConfigPolicy, source: Mapping[str, str | None]) -> dict[str, str]:
    """The configs a mirror topic is created with: the followed ones the source reports, the
    mirror's own, and unlimited retention where the source reports none (the broker's default,
    7 days, would delete copied data older than that as soon as a segment rolls)."""
    cfg = {k: v for k, v in source.items() if k in policy.followed and v is not None}
    for key in ("retention.ms", "retention.bytes"):
        if key in policy.followed:
            cfg.setdefault(key, "-1")
    cfg.update(MIRROR_OWNED)
    return dict(sorted(cfg.items()))


def config_changes(
    policy: ConfigPolicy, source: Mapping[str, str | None], local: Mapping[str, str | None]
) -> dict[str, str]:
    """What the local topic must be set to (IncrementalAlterConfigs SET) to follow ``source``
    and hold the mirror's own values: key -> value, empty when nothing drifted. A key the
    source does not report is left alone."""
    out = {}
    for key in sorted(policy.followed):
        want = source.get(key)
        if want is not None and local.get(key) != want:
            out[key] = want
    for key, want in MIRROR_OWNED.items():
        have = local.get(key)
        # A broker that does not report a timestamp limit (before Kafka 3.6) has none.
        if have is not None and have != want:
            out[key] = want
    return out


def identity_breaking(topic: str, source_name: str, source: Mapping[str, str | None]) -> str | None:
    """Why ``source``'s configs make an offset-identical mirror impossible from here on, or
    None: a LogAppendTime source stamps each batch with its broker's time, and the mirror,
    which must stay CreateTime, would restamp nothing the same way."""
    if source.get("message.timestamp.type") == "LogAppendTime":
        return (
            f"source {source_name}'s topic {topic} now has message.timestamp.type="
            "LogAppendTime: its new batches carry broker-assigned timestamps that a CreateTime "
            "mirror does not keep as they are; stopped mirroring the topic (set it back to "
            "CreateTime on the source, or mirror it into a new topic)"
        )
    return None
