"""Epoch fencing and producer-state expiry on Apache Kafka (issue 36, item 3).

The leader compares a producer's epoch only with its producer-state entry, which expires
``producer.id.expiration.ms`` after the entry's last timestamp: the appended batch's max
timestamp, so copied historical data expires at the next sweep. Then an older epoch is
accepted again: a fenced writer's append can land. A local broker with a 2 s expiry, swept
every 0.5 s, shows both the rule and that partsync's ownership lease (checked right before
each Produce request is built, ``io.group_lease.LeasedStop``) keeps a follower whose lease ran
out from writing after another took its partitions over, even when its copy threads run and
the threads that would tell it (lease watchdog, group heartbeat) do not: those two are held
stopped from outside with ptrace (``tests.support.freeze``), so the test fails without the
check.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

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
from tests.integration.kafka_proxy import StrictProxy
from tests.integration.sync_support import (
    cluster_ref,
    ends,
    fetch_batches,
    records,
    write_config,
)
from tests.support.freeze import Freezer, thread_names

if TYPE_CHECKING:
    from tests.integration.test_follow import Follower

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


def _stop(follower: Follower) -> None:
    """Stop a follower; one that does not stop in time is killed (no process outlives the test)."""
    try:
        follower.stop()
    except subprocess.TimeoutExpired:
        follower.proc.kill()
        follower.proc.wait()
        raise


def _append(conn: Connection, topic: str, batch: bytes | bytearray) -> int:
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


def test_a_follower_past_its_lease_writes_nothing_after_another_took_over(
    broker_factory: Callable[[str], Broker], expiring_local: Broker, topic: str, tmp_path: Path
) -> None:
    """Follower A copies historical data and is then stopped whole, B takes the partition over
    and copies on, and the producer state of those old batches expires. A's data path then runs
    again while its lease watchdog and group heartbeat stay stopped, as after a pause where the
    copy threads happen to run first: nothing but the lease check before each Produce stops A
    (the broker's epoch fencing is void by now). A sends nothing, and the mirror is the
    source's, record for record."""
    from tests.integration.test_follow import Follower, _wait

    source = broker_factory("a")
    create_topic(source.bootstrap, topic, 1, UNLIMITED_RETENTION)
    create_topic(expiring_local.bootstrap, topic, 1, UNLIMITED_RETENTION)
    clusters = {"a": source, "local": expiring_local}
    config = write_config(tmp_path / "partsync.toml", clusters)
    produce(source.bootstrap, topic, records(200, seed=1), partition=0)
    group = f"g-{topic}"
    # A reaches the local cluster through the proxy, which counts the Produce requests it sends.
    config_a = tmp_path / "a.toml"
    with contextlib.ExitStack() as cleanup:  # every step runs, last in first out
        proxy = StrictProxy(expiring_local.bootstrap)
        cleanup.callback(proxy.close)
        write_config(config_a, clusters, addresses={"local": proxy.bootstrap})
        a = Follower(
            config_a, topic, group, tmp_path / "a.log", module="tests.support.named_threads"
        )
        cleanup.callback(_stop, a)
        freezer = Freezer(a.proc.pid)
        cleanup.callback(freezer.close)  # before A is stopped: a traced process cannot exit
        _wait("A's copy", lambda: ends(expiring_local, topic, 1)[0] == 200, 60, a.stderr)
        threads = thread_names(a.proc.pid)
        # The two threads that learn of a lost lease: the watchdog and the group's heartbeat.
        guards = [t for t, name in threads.items() if name.startswith(("lease-g-", "group-g-"))]
        assert len(guards) == 2, threads
        freezer.stop(guards, blocked=True)
        # Every other thread too, also one started while they were being stopped: A whole.
        others: set[int] = set()
        while new := set(thread_names(a.proc.pid)) - others - set(guards):
            freezer.stop(new)
            others |= new
        b = Follower(config, topic, group, tmp_path / "b.log")
        cleanup.callback(_stop, b)

        def grow(seed: int, to: int, what: str, within: float) -> None:
            """100 more source records, and wait until the mirror holds ``to`` (B's copy)."""
            produce(source.bootstrap, topic, records(100, seed=seed), partition=0)
            _wait(what, lambda: ends(expiring_local, topic, 1)[0] == to, within, b.stderr)

        grow(2, 300, "B's copy after A's session ran out", 90)
        time.sleep(3.0)  # the copied batches' producer state has expired
        sent_by_a = proxy.produce_requests_seen
        freezer.thaw(others)
        # A's interpreter runs (its metrics server answers): stopped guards hold no GIL.
        a.scrape()
        grow(3, 400, "B's copy of what came while A's copy threads ran", 60)
        time.sleep(3.0)  # A's appends, had it sent any, would have been answered by now
        # Whether a stray append lands (a duplicate) or is fenced depends on which of A and B
        # sends first; that A sends none does not.
        assert proxy.produce_requests_seen == sent_by_a, a.stderr()
    assert ends(expiring_local, topic, 1)[0] == 400
    assert_partitions_identical(source.bootstrap, expiring_local.bootstrap, topic, 1)
