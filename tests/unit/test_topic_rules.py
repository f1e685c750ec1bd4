"""The local topic's rules (``partsync.plan.topic_rules``): what a local Kafka topic would refuse
or change is refused before anything is written, and ``--create-missing`` creates topics that
refuse nothing a source holds."""

from __future__ import annotations

import pytest

from partsync.errors import UnsafeError
from partsync.plan.topic_rules import (
    UNLIMITED_MS,
    LocalTopicRules,
    rules_from,
)
from tests.unit.test_batch import TS, build, parse

HOUR = 3_600_000
DAY = 24 * HOUR


def test_kafka_defaults_set_no_timestamp_limit_and_no_key_check() -> None:
    rules, refusal = rules_from({"cleanup.policy": "delete", "compression.type": "producer"})
    assert refusal is None
    assert rules.timestamp_before_max_ms is None
    assert rules.timestamp_after_max_ms is None
    assert not rules.compacted
    rules.check(parse(build(3)), now_ms=TS + 100 * DAY)


def test_timestamp_limits_are_read_as_kafka_applies_them() -> None:
    explicit, _ = rules_from(
        {
            "message.timestamp.before.max.ms": str(DAY),
            "message.timestamp.after.max.ms": str(HOUR),
        }
    )
    assert (explicit.timestamp_before_max_ms, explicit.timestamp_after_max_ms) == (DAY, HOUR)
    # Kafka 3.x: the deprecated difference.max.ms applies while before/after are at Long.MAX.
    legacy, _ = rules_from(
        {
            "message.timestamp.before.max.ms": str(UNLIMITED_MS),
            "message.timestamp.difference.max.ms": str(2 * DAY),
        }
    )
    assert (legacy.timestamp_before_max_ms, legacy.timestamp_after_max_ms) == (2 * DAY, 2 * DAY)
    unlimited, _ = rules_from(
        {
            "message.timestamp.before.max.ms": str(UNLIMITED_MS),
            "message.timestamp.after.max.ms": str(UNLIMITED_MS),
            "message.timestamp.difference.max.ms": str(UNLIMITED_MS),
        }
    )
    assert unlimited.timestamp_before_max_ms is None
    assert unlimited.timestamp_after_max_ms is None


def test_a_batch_older_than_before_max_ms_is_refused_with_its_offset() -> None:
    rules = LocalTopicRules(timestamp_before_max_ms=DAY)
    batch = parse(build(3, base_offset=500))
    rules.check(batch, now_ms=TS + DAY - 1)  # within the limit
    with pytest.raises(UnsafeError) as e:
        rules.check(batch, now_ms=TS + 2 * DAY)
    assert e.value.offset == 500
    assert "message.timestamp.before.max.ms=86400000" in e.value.reason
    assert not e.value.retriable


def test_a_batch_from_the_future_beyond_after_max_ms_is_refused() -> None:
    # Kafka 4.0's default after.max.ms is one hour: a source clock ahead by more is refused.
    rules = LocalTopicRules(timestamp_after_max_ms=HOUR)
    batch = parse(build(3, base_offset=7))
    rules.check(batch, now_ms=TS)
    with pytest.raises(UnsafeError, match=r"message\.timestamp\.after\.max\.ms=3600000") as e:
        rules.check(batch, now_ms=TS - 2 * HOUR)
    assert e.value.offset == 7


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete, compact"])
def test_a_compacted_local_topic_refuses_keyless_records(policy: str) -> None:
    rules, _ = rules_from({"cleanup.policy": policy})
    assert rules.compacted
    # build() leaves every third record's key out (offset delta 2).
    with pytest.raises(UnsafeError, match="without a key at offset 102") as e:
        rules.check(parse(build(3, base_offset=100, codec="lz4")))
    assert e.value.offset == 102
    rules.check(parse(build(2, base_offset=100, codec="lz4")))  # both keyed


def test_a_delete_topic_takes_keyless_records() -> None:
    rules, _ = rules_from({"cleanup.policy": "delete"})
    rules.check(parse(build(3)))


def test_time_retention_is_read_where_the_local_topic_deletes() -> None:
    def retention(**cfg: str) -> int | None:
        return rules_from({k.replace("_", "."): v for k, v in cfg.items()})[0].retention_ms

    assert retention(retention_ms=str(7 * DAY)) == 7 * DAY
    assert retention(retention_ms="-1") is None
    assert retention() is None  # not reported (Tansu reports only what was set)
    assert retention(retention_ms="soon") is None
    # A compact-only topic ignores retention.ms; compact,delete applies it.
    assert retention(retention_ms=str(DAY), cleanup_policy="compact") is None
    assert retention(retention_ms=str(DAY), cleanup_policy="compact,delete") == DAY


def test_a_batch_older_than_the_local_retention_expires_and_is_still_appendable() -> None:
    batch = parse(build(3, base_offset=40))
    rules = LocalTopicRules(retention_ms=DAY)
    newest = batch.max_timestamp
    assert newest >= TS
    assert not rules.expires(batch, now_ms=newest + DAY)  # Kafka deletes only past the limit
    assert rules.expires(batch, now_ms=newest + DAY + 1)
    rules.check(batch, now_ms=newest + 30 * DAY)  # a note, not a refusal
    assert not LocalTopicRules().expires(batch, now_ms=newest + 3650 * DAY)


def test_the_result_tells_which_copied_offsets_the_local_retention_deletes() -> None:
    from types import SimpleNamespace
    from typing import Any

    from partsync.copy.appender import check_next
    from partsync.copy.context import CopyContext
    from partsync.copy.options import CopyOptions
    from partsync.copy.partition import copy_result
    from partsync.plan.comparator import Bounds, Chunk, Condition, PartitionPlan

    plan = PartitionPlan(
        "t", 0, Bounds(0, 0), {"a": Bounds(0, 9)}, Condition.BEHIND, 9, (Chunk(0, 9, "a"),)
    )
    local: Any = SimpleNamespace(name="dc-local")
    ctx = CopyContext(plan, {}, local, CopyOptions(), LocalTopicRules(retention_ms=DAY), None, None)
    for base in (0, 3, 6):  # build()'s timestamps are from 2023: all past one day
        check_next(ctx, parse(build(3, base_offset=base)), base, "a")
    ctx.confirmed_end = 6  # the last batch was checked but never landed
    notes = copy_result(ctx, 0.0).notes
    assert len(notes) == 1
    assert "offsets 0 and 5" in notes[0] and "retention.ms=86400000" in notes[0]
    assert "dc-local deletes them" in notes[0]
    # Nothing past the retention: nothing said.
    fresh = CopyContext(plan, {}, local, CopyOptions(), LocalTopicRules(), None, None)
    check_next(fresh, parse(build(3)), 0, "a")
    fresh.confirmed_end = 3
    assert copy_result(fresh, 0.0).notes == ()


def test_no_record_may_use_the_hole_records_key_in_a_compacted_local_topic() -> None:
    from partsync.wire.holes import fill_inner_holes

    rules = LocalTopicRules(compacted=True)
    keyed = parse(build(2, offsets=[0, 1]))  # keys key-0, key-1
    rules.check(keyed, reserved_key=b"gap")
    with pytest.raises(UnsafeError, match="whose key is the hole records' key") as e:
        rules.check(keyed, reserved_key=b"key-1")
    assert e.value.offset == 1
    # The hole records themselves (and a mirror's, copied on) use it.
    filled = fill_inner_holes(parse(build(2, offsets=[0, 3])), b"gap")
    assert filled is not None
    from partsync.wire.batch import Batch

    rules.check(Batch.parse(memoryview(filled)), reserved_key=b"gap")


@pytest.mark.parametrize(
    ("before_max_ms", "first_ts", "stamp"),
    [
        (None, 5_000_000, 0),  # unlimited (Kafka's default): as old as a timestamp can be
        (1_000_000, 9_500_000, 9_060_000),  # a minute inside the limit
        (1_000_000, 9_010_000, 9_010_000),  # never after the first copied record
        (100_000_000, 5_000_000, 0),  # a limit reaching before 1970
        (1_000_000, -1, 9_060_000),  # a first batch without timestamps
    ],
)
def test_fillers_are_stamped_as_old_as_the_local_topic_accepts(
    before_max_ms: int | None, first_ts: int, stamp: int
) -> None:
    first = parse(build(2, base_offset=100, timestamp=first_ts))
    rules = LocalTopicRules(timestamp_before_max_ms=before_max_ms)
    assert rules.filler_stamp(first, now_ms=10_000_000) == stamp
