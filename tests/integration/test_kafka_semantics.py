"""What only Apache Kafka shows, tested on Apache Kafka itself (the real-Kafka tier).

The PyPI test brokers are single nodes that replicate nothing, so their high watermark is
always the log end. Kafka's is not: an append that is in the leader's log but not yet on the
in-sync followers (an acks=all append that timed out, or whose client died) sits above the
high watermark, and the next append lands after it, at the log end.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partsync._kafka import CONSUMER_REPLICA, DEBUG_REPLICA, LATEST, Connection
from partsync.config import ClusterRef
from partsync.demo.brokers import Broker
from partsync.demo.data import (
    UNLIMITED_RETENTION,
    assert_partitions_identical,
    create_topic,
    make_records,
    produce,
)
from partsync.io.cluster import Cluster
from partsync.wire.batch import rewrite_for_append
from tests.conftest import CliResult
from tests.integration.sync_support import cluster_ref, fetch_batches
from tests.support.kafka_jvm import KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.kafka_versions]


@pytest.fixture(scope="module")
def replicated_local(
    broker_mode: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    """A three-broker local cluster: partitions with a leader and two followers."""
    version = broker_mode.removeprefix("kafka-")
    cluster = start_kafka_cluster(
        version,
        3,
        data_dir=tmp_path_factory.mktemp("kafka-replicated"),
        overrides={"transaction.state.log.min.isr": "1", "replica.lag.time.max.ms": "30000"},
    )
    yield cluster
    cluster.stop()


def _ref(bootstrap: str) -> ClusterRef:
    """A cluster reference to every broker of a (multi-broker) bootstrap list."""
    return cluster_ref(bootstrap, "local")


def _config(tmp_path: Path, source: Broker, local_bootstrap: str) -> Path:
    """A config file naming the source ``a`` and the (multi-broker) local cluster."""
    servers = ", ".join(f'"{s}"' for s in local_bootstrap.split(","))
    path = tmp_path / "partsync.toml"
    path.write_text(
        'local = "local"\n'
        f'[clusters.a]\nbootstrap_servers = ["{source.bootstrap}"]\n'
        f"[clusters.local]\nbootstrap_servers = [{servers}]\n"
    )
    return path


def _offsets(cluster: Cluster, topic: str) -> tuple[int, int]:
    """(high watermark, log end) of partition 0, as Kafka's leader reports them."""
    info = cluster.topic(topic, refresh=True)
    assert info is not None
    conn = cluster.broker_conn(info.leaders[0])
    epochs = {0: info.leader_epochs.get(0, -1)}
    hw = conn.list_offsets(topic, [0], LATEST, replica_id=CONSUMER_REPLICA)[0]
    leo = conn.list_offsets(topic, [0], LATEST, replica_id=DEBUG_REPLICA, leader_epochs=epochs)[0]
    assert hw[0] == leo[0] == 0, (hw, leo)
    return hw[1], leo[1]


def test_an_unreplicated_append_is_waited_for_not_appended_over(
    broker_mode: str,
    broker_factory: Callable[[str], Broker],
    replicated_local: KafkaCluster,
    tmp_path: Path,
    topic: str,
    cli: Callable[..., CliResult],
) -> None:
    source = broker_factory("a")
    create_topic(source.bootstrap, topic, 1)
    produce(
        source.bootstrap,
        topic,
        make_records(200, seed=1, partition=0),
        compression="lz4",
        batch_size=4096,
    )
    with Cluster(_ref(replicated_local.bootstrap)) as local:
        local.create_topic(
            topic, 1, {**UNLIMITED_RETENTION, "min.insync.replicas": "1"}, replication=3
        )
        info = local.topic(topic, refresh=True)
        assert info is not None
        leader = replicated_local.node(info.leaders[0])
    # A follower that is not the lowest-numbered broker (which answers partsync's InitProducerId
    # without a transactional id): only the replication is held up, nothing partsync asks.
    follower = max(
        (n for n in replicated_local.brokers if n is not leader), key=lambda n: n.node_id
    )
    # The leader first: nothing waits on the broker that will be frozen to bootstrap.
    local_bootstrap = ",".join(
        [leader.address] + [n.address for n in replicated_local.brokers if n is not leader]
    )
    config = _config(tmp_path, source, local_bootstrap)
    first = cli(
        "--config", str(config), "sync", "--topic", topic, "--sources", "a", "--no-group", "--json"
    )
    assert first.code == 0, first.stderr
    produce(
        source.bootstrap,
        topic,
        make_records(100, seed=2, partition=0),
        compression="lz4",
        batch_size=4096,
    )

    # The source's next batch reaches the local leader, not every in-sync follower (one is
    # frozen), as an acks=all append that timed out, or a run killed mid-append, leaves it.
    nxt = next(b for b in fetch_batches(source, topic, 0, start=200) if b.base_offset == 200)
    os.kill(follower.pid, signal.SIGSTOP)  # type: ignore[arg-type]
    # Frozen long enough that partsync plans while the high watermark trails the log end.
    resume = threading.Timer(10.0, os.kill, (follower.pid, signal.SIGCONT))
    try:
        with Cluster(_ref(leader.address)) as at_leader:
            with Connection("127.0.0.1", leader.port, cluster="local") as conn:
                conn.send_produce(topic, {0: rewrite_for_append(nxt, -1, -1, -1)}, acks=1)
                answer = conn.receive_produce()[0]
            assert (answer.error_code, answer.base_offset) == (0, 200), answer
            assert _offsets(at_leader, topic) == (200, nxt.next_offset)  # HW below the log end
        resume.start()
        # No fencing: its InitProducerId could wait on the frozen broker (a transaction
        # coordinator) and so hide what this test is about.
        r = cli(
            "--config",
            str(config),
            "sync",
            "--topic",
            topic,
            "--sources",
            "a",
            "--no-group",
            "--no-fencing",
            "--json",
        )
    finally:
        resume.cancel()
        os.kill(follower.pid, signal.SIGCONT)  # type: ignore[arg-type]
    assert r.code == 0, r.stderr + r.stdout
    part = r.json["topics"][0]["partitions"][0]
    # The copy continued after the unreplicated batch (it is the source's), nothing twice.
    assert part["status"] == "synced" and part["local_end_after"] == 300, part
    assert_partitions_identical(source.bootstrap, local_bootstrap, topic, 1)


def test_the_copy_follows_a_leader_move(
    broker_factory: Callable[[str], Broker],
    replicated_local: KafkaCluster,
    tmp_path: Path,
    topic: str,
) -> None:
    """The local partition's leader is killed mid-copy: the run reconnects to the new leader
    (metadata looked up again before the retry), re-reads the log end there and finishes with
    every record at the source's offset."""
    import subprocess
    import sys
    import time

    source = broker_factory("a")
    create_topic(source.bootstrap, topic, 1)
    produce(
        source.bootstrap,
        topic,
        make_records(3000, seed=3, partition=0),
        compression="zstd",
        batch_size=8192,
    )
    config = _config(tmp_path, source, replicated_local.bootstrap)
    with Cluster(_ref(replicated_local.bootstrap)) as local:
        local.create_topic(
            topic, 1, {**UNLIMITED_RETENTION, "min.insync.replicas": "1"}, replication=3
        )
        info = local.topic(topic, refresh=True)
        assert info is not None
        leader = info.leaders[0]
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--no-group",
        "--retries",
        "20",
        "--max-bytes-per-sec",
        "300000",
        "--json",
    ]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        with Cluster(_ref(replicated_local.bootstrap)) as local:
            while local.bounds(topic, [0])[0].end == 0 and time.monotonic() < deadline:
                assert run.poll() is None, run.communicate()
                time.sleep(0.1)
        replicated_local.kill(leader)
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
        replicated_local.start(leader)
    assert run.returncode == 0, err + out
    assert_partitions_identical(source.bootstrap, replicated_local.bootstrap, topic, 1)


def test_copied_records_older_than_the_local_retention_are_reported(
    broker_factory: Callable[[str], Broker],
    tmp_path: Path,
    topic: str,
    cli: Callable[..., CliResult],
) -> None:
    """A local topic left at Kafka's 7-day retention takes records stamped in 2023: the copy
    keeps their timestamps, so the broker deletes them at its next retention check. The run
    says which offsets, before any consumer finds them gone; every offset still lands where
    the source has it."""
    import time

    source, local = broker_factory("a"), broker_factory("local")
    create_topic(source.bootstrap, topic, 1)
    produce(source.bootstrap, topic, make_records(50, seed=4, partition=0), batch_size=1024)
    create_topic(local.bootstrap, topic, 1, {"retention.ms": str(7 * 24 * 3_600_000)})
    config = _config(tmp_path, source, local.bootstrap)
    r = cli("--config", str(config), "sync", "--topic", topic, "--sources", "a", "--json")
    assert r.code == 0, r.stderr + r.stdout
    part = r.json["topics"][0]["partitions"][0]
    assert part["status"] == "synced" and part["local_end_after"] == 50, part
    assert any("offsets 0 and 49" in n and "retention.ms=604800000" in n for n in part["notes"]), (
        part["notes"]
    )
    # As told: the test brokers check retention every second. A check may delete the first
    # segments before the rest (the active one rolls first), so wait for all of them.
    deadline = time.monotonic() + 60
    with Cluster(_ref(local.bootstrap)) as c:
        while c.bounds(topic, [0])[0].log_start < 50 and time.monotonic() < deadline:
            time.sleep(0.2)
        b = c.bounds(topic, [0])[0]
        assert (b.log_start, b.end) == (50, 50)
