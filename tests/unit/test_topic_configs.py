"""Which configs a mirror takes from its source and which it owns (``plan.topic_configs``)."""

from __future__ import annotations

import pytest

from partsync.errors import ConfigError
from partsync.plan.topic_configs import (
    FOLLOWED,
    ConfigPolicy,
    config_changes,
    identity_breaking,
    mirror_configs,
)
from partsync.plan.topic_rules import UNLIMITED_MS, rules_from

UNLIMITED = str(UNLIMITED_MS)
KAFKA_SOURCE = {
    # As Kafka's DescribeConfigs reports a topic: every key, defaults included.
    "cleanup.policy": "compact,delete",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "segment.bytes": "1048576",
    "segment.ms": "604800000",
    "max.message.bytes": "1048588",
    "min.compaction.lag.ms": "0",
    "compression.type": "zstd",
    "message.timestamp.type": "CreateTime",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": UNLIMITED,
    "min.insync.replicas": "2",
    "remote.storage.enable": "true",
    "local.retention.ms": "-2",
    "sasl.secret.thing": None,  # a sensitive value Kafka does not return
}


def test_a_mirror_is_created_with_the_followed_configs_and_its_own() -> None:
    cfg = mirror_configs(ConfigPolicy(), KAFKA_SOURCE)
    assert cfg["segment.bytes"] == "1048576" and cfg["cleanup.policy"] == "compact,delete"
    assert cfg["retention.ms"] == "604800000" and cfg["min.compaction.lag.ms"] == "0"
    # The mirror's own, whatever the source says: recompressing, restamping or checking
    # copied timestamps against the local clock would break offset identity.
    assert cfg["compression.type"] == "producer"
    assert cfg["message.timestamp.type"] == "CreateTime"
    assert cfg["message.timestamp.after.max.ms"] == UNLIMITED
    assert cfg["message.timestamp.before.max.ms"] == UNLIMITED
    # The local cluster's own: durability and tiered storage are never copied.
    assert not {"min.insync.replicas", "remote.storage.enable", "local.retention.ms"} & set(cfg)
    assert "sasl.secret.thing" not in cfg


def test_a_source_that_reports_no_retention_gets_an_unlimited_mirror() -> None:
    """Tansu reports only the keys set on a topic: the broker's default retention (7 days)
    would delete old copied data as soon as a segment rolls."""
    cfg = mirror_configs(ConfigPolicy(), {})
    assert cfg["retention.ms"] == "-1" and cfg["retention.bytes"] == "-1"
    rules, refusal = rules_from(cfg)
    assert refusal is None
    assert rules.timestamp_before_max_ms is None and rules.timestamp_after_max_ms is None


def test_the_config_file_adds_and_removes_followed_keys() -> None:
    policy = ConfigPolicy.of(add=["flush.messages"], remove=["segment.ms"])
    assert "flush.messages" in policy.followed
    assert "segment.ms" not in policy.followed and "segment.bytes" in policy.followed
    cfg = mirror_configs(policy, KAFKA_SOURCE)
    assert "segment.ms" not in cfg


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("compression.type", "compression.type=producer, which offset identity needs"),
        ("message.timestamp.type", "message.timestamp.type=CreateTime"),
        ("message.timestamp.after.max.ms", "offset identity"),
        ("min.insync.replicas", "the local cluster's own setting"),
        ("remote.storage.enable", "the local cluster's own setting"),
    ],
)
def test_keys_the_mirror_or_the_local_cluster_owns_cannot_be_followed(key: str, why: str) -> None:
    with pytest.raises(ConfigError, match="topic_configs") as e:
        ConfigPolicy.of(add=[key])
    assert key in str(e.value) and why in str(e.value)


@pytest.mark.parametrize(
    ("source", "local", "want"),
    [
        # In step: nothing to set.
        ({"retention.ms": "100"}, {"retention.ms": "100"}, {}),
        # The source changed a followed key.
        (
            {"retention.ms": "100", "segment.bytes": "2048"},
            {"retention.ms": "5"},
            {"retention.ms": "100", "segment.bytes": "2048"},
        ),
        # A key the source does not report (Tansu) is left as it is.
        ({}, {"retention.ms": "5"}, {}),
        # Keys not followed are not touched, whatever the source has.
        (
            {"min.insync.replicas": "2", "compression.type": "zstd"},
            {"min.insync.replicas": "1", "compression.type": "producer"},
            {},
        ),
        # The mirror's own values are held: a local topic that drifted from them is set back.
        (
            {},
            {"compression.type": "gzip", "message.timestamp.after.max.ms": "3600000"},
            {"compression.type": "producer", "message.timestamp.after.max.ms": UNLIMITED},
        ),
        # A local broker that does not report a timestamp limit (before Kafka 3.6) has none.
        ({}, {"compression.type": "producer"}, {}),
    ],
)
def test_config_changes_set_what_drifted(
    source: dict[str, str], local: dict[str, str], want: dict[str, str]
) -> None:
    assert config_changes(ConfigPolicy(), source, local) == want


def test_the_default_followed_keys_shape_what_consumers_see() -> None:
    assert {
        "retention.ms",
        "retention.bytes",
        "cleanup.policy",
        "segment.bytes",
        "segment.ms",
        "max.message.bytes",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
    } <= FOLLOWED


def test_a_log_append_time_source_cannot_be_mirrored_offset_identically() -> None:
    why = identity_breaking("orders", "dc1", {"message.timestamp.type": "LogAppendTime"})
    assert why is not None and "source dc1's topic orders" in why and "LogAppendTime" in why
    assert identity_breaking("orders", "dc1", {"message.timestamp.type": "CreateTime"}) is None
    assert identity_breaking("orders", "dc1", {}) is None
