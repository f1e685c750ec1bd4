"""Epoch fencing and producer-state expiry on Apache Kafka (issue 36, item 3).

The leader compares a producer's epoch only with its producer-state entry, which expires
``producer.id.expiration.ms`` after the entry's last timestamp: the appended batch's max
timestamp, so copied historical data expires at the next sweep. Then an older epoch is
accepted again: a fenced writer's append can land. A local broker with a 2 s expiry, swept
every 0.5 s, shows both the rule and that partsync's ownership lease (checked right before
each Produce request is built, ``io.group_lease.LeasedStop``) keeps a paused follower from
writing after another took its partitions over.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partsync._kafka import Connection
from partsync.demo.brokers import Broker
from partsync.demo.data import (
    UNLIMITED_RETENTION,
    assert_partitions_identical,
    create_topic,
    produce,
)
from partsync.io.cluster import Cluster
from partsync.wire.batch import rewrite_for_append
from tests.integration.sync_support import (
    cluster_ref,
    ends,
    fetch_batches,
    records,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.kafka_versions]

EXPIRY = {"producer.id.expiration.ms": "2000", "producer.id.expiration.check.interval.ms": "500"}


@pytest.fixture
def expiring_local(broker_mode: str, tmp_path: Path) -> Iterator[Broker]:
    """A local Kafka broker that forgets a producer's epoch 2 s after its batches' time."""
    from tests.support.brokers import start_kafka_jvm

    broker = start_kafka_jvm(broker_mode.removeprefix("kafka-"), tmp_path / "local", EXPIRY)
    try:
        yield broker
    finally:
        broker.stop()


def _append(conn: Connection, topic: str, batch: bytes) -> int:
    conn.send_produce(topic, {0: batch}, acks=-1)
    return conn.receive_produce()[0].error_code


def test_an_old_epoch_is_accepted_once_its_state_expired(
    broker_factory: Callable[[str], Broker], expiring_local: Broker, topic: str
) -> None:
    """The rule partsync cannot lean on for historical data: writer A, fenced by B's newer
    epoch, gets INVALID_PRODUCER_EPOCH, and once B's last batch is historical A's next append
    is accepted at the log end after one sweep."""
    source = broker_factory("a")
    create_topic(source.bootstrap, topic, 1, UNLIMITED_RETENTION)
    create_topic(expiring_local.bootstrap, topic, 1, UNLIMITED_RETENTION)
    # Batches stamped ten minutes ahead keep the entry alive while the fencing is shown: with
    # historical ones a sweep (every 0.5 s) may fall between B's append and A's, and then A's
    # is accepted, which is the second half of the rule, not the first.
    ahead = int(time.time() * 1000) + 600_000
    produce(
        source.bootstrap,
        topic,
        records(8, seed=1, base_timestamp_ms=ahead),
        partition=0,
        batch_size=512,
    )
    produce(source.bootstrap, topic, records(30, seed=2), partition=0, batch_size=1024)
    batches = fetch_batches(source, topic, 0)
    fresh = [b for b in batches if b.max_timestamp >= ahead]
    old = [b for b in batches if b.max_timestamp < ahead]  # record times far older than 2 s
    assert len(fresh) >= 2 and len(old) >= 2
    tid = f"{topic}-writer"
    with (
        Cluster(cluster_ref(expiring_local, "local")) as local,
        Connection(expiring_local.host, expiring_local.port, cluster="local") as conn,
    ):
        pid, epoch_a = local.init_producer_id(tid)  # retried while the coordinator loads
        assert _append(conn, topic, rewrite_for_append(fresh[0], pid, epoch_a, 0)) == 0
        _pid, epoch_b = local.init_producer_id(tid)  # B fences A
        assert _append(conn, topic, rewrite_for_append(fresh[1], pid, epoch_b, 0)) == 0
        seq_a = fresh[0].record_count
        assert _append(conn, topic, rewrite_for_append(old[0], pid, epoch_a, seq_a)) == 47
        # B copies a historical batch: the entry's last timestamp becomes that batch's, so the
        # entry expires at the next sweep, after which the old epoch's append is accepted. A
        # refused append writes nothing, so it is tried again until then, within a bound.
        seq_b = fresh[1].record_count
        assert _append(conn, topic, rewrite_for_append(old[0], pid, epoch_b, seq_b)) == 0
        deadline = time.monotonic() + 15
        while (code := _append(conn, topic, rewrite_for_append(old[1], pid, epoch_a, seq_a))) == 47:
            assert time.monotonic() < deadline, "the producer entry was never swept"
            time.sleep(0.2)
        assert code == 0


def test_a_paused_follower_writes_nothing_after_another_took_over(
    broker_factory: Callable[[str], Broker], expiring_local: Broker, topic: str, tmp_path: Path
) -> None:
    """Follower A copies historical data, is paused (SIGSTOP) past its group session, B takes
    the partition over and copies on, the producer state of those old batches expires, and A
    resumes while the source grows: A sends nothing (its lease ran out), and the mirror is the
    source's, record for record."""
    from tests.integration.test_follow import Follower, _wait

    source = broker_factory("a")
    create_topic(source.bootstrap, topic, 1, UNLIMITED_RETENTION)
    create_topic(expiring_local.bootstrap, topic, 1, UNLIMITED_RETENTION)
    config = write_config(tmp_path / "partsync.toml", {"a": source, "local": expiring_local})
    produce(source.bootstrap, topic, records(200, seed=1), partition=0)
    group = f"g-{topic}"
    a = Follower(config, topic, group, tmp_path / "a.log")
    b: Follower | None = None
    try:
        _wait("A's copy", lambda: ends(expiring_local, topic, 1)[0] == 200, 60, a.stderr)
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            b = Follower(config, topic, group, tmp_path / "b.log")
            produce(source.bootstrap, topic, records(100, seed=2), partition=0)
            _wait(
                "B's copy after A's session ran out",
                lambda: ends(expiring_local, topic, 1)[0] == 300,
                90,
                b.stderr,
            )
            time.sleep(3.0)  # the copied batches' producer state has expired
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        produce(source.bootstrap, topic, records(100, seed=3), partition=0)
        _wait(
            "B's copy of what came while A resumed",
            lambda: ends(expiring_local, topic, 1)[0] == 400,
            60,
            b.stderr,
        )
        time.sleep(3.0)  # A's rounds, had it written, would have landed by now
    finally:
        for f in (a, b):
            if f is not None:
                f.stop()
    assert ends(expiring_local, topic, 1)[0] == 400
    assert_partitions_identical(source.bootstrap, expiring_local.bootstrap, topic, 1)
