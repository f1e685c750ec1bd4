"""client_rack (KIP-392) on Apache Kafka itself: a three-broker source in three racks with the
rack-aware replica selector. With a client rack, the leader points partsync at the replica in
that rack and the copy is fetched from there; without one, from the leader; either way the
copy is identical. A replica that cannot serve (killed) sends the copy to the leader."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from partsync.demo.brokers import Broker
from partsync.demo.data import UNLIMITED_RETENTION, assert_partitions_identical, produce
from partsync.io.cluster import Cluster
from tests.conftest import run_cli
from tests.integration.sync_support import cluster_ref, records
from tests.support.kafka_jvm import KAFKA_4, KafkaCluster, start_kafka_cluster

pytestmark = [pytest.mark.integration, pytest.mark.kafka_only]

RACKS = ("rack-a", "rack-b", "rack-c")


@pytest.fixture(scope="module")
def racked_source(
    broker_mode: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    version = broker_mode.removeprefix("kafka-")
    if version != KAFKA_4:
        pytest.skip("the replica selector is the broker's (Kafka 2.4+): one version suffices")
    cluster = start_kafka_cluster(
        version,
        3,
        data_dir=tmp_path_factory.mktemp("kafka-racks"),
        racks=RACKS,
        overrides={
            "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        },
    )
    yield cluster
    cluster.stop()


def _replicated_topic(source: KafkaCluster, topic: str, records_: int, seed: int) -> str:
    """A one-partition topic on all three brokers with ``records_`` records: the rack of one
    of its followers."""
    with Cluster(cluster_ref(source.bootstrap, "src")) as src:
        src.create_topic(
            topic, 1, {**UNLIMITED_RETENTION, "min.insync.replicas": "1"}, replication=3
        )
        info = src.topic(topic, refresh=True)
        assert info is not None
        leader = info.leaders[0]
    produce(source.bootstrap, topic, records(records_, seed=seed), partition=0, compression="lz4")
    follower = next(n for n in source.brokers if n.node_id != leader)
    return RACKS[follower.node_id - 1]


def _config(tmp_path: Path, source: KafkaCluster, local: Broker, rack: str | None) -> Path:
    servers = ", ".join(f'"{s}"' for s in source.bootstrap.split(","))
    path = tmp_path / f"partsync-{rack}.toml"
    path.write_text(
        'local = "local"\n'
        f"[clusters.src]\nbootstrap_servers = [{servers}]\n"
        + (f'client_rack = "{rack}"\n' if rack else "")
        + f'[clusters.local]\nbootstrap_servers = ["{local.bootstrap}"]\n'
    )
    return path


def test_a_client_rack_fetches_from_the_replica_in_that_rack(
    racked_source: KafkaCluster, local_broker: Broker, tmp_path: Path, topic: str
) -> None:
    rack = _replicated_topic(racked_source, topic, 300, 31)  # a follower's rack
    follower = racked_source.node(RACKS.index(rack) + 1)

    cfg = _config(tmp_path, racked_source, local_broker, rack)
    r = run_cli(
        "--config",
        str(cfg),
        "-vv",
        "sync",
        "--topic",
        topic,
        "--sources",
        "src",
        "--create-missing",
        "--no-group",
    )
    assert r.code == 0, r.stdout + r.stderr
    moved = re.findall(
        rf"src: fetching {re.escape(topic)}-0 from replica (\d+) \(client_rack "
        rf"{rack}\)",
        r.stderr,
    )
    assert moved == [str(follower.node_id)], r.stderr[-3000:]
    assert "back to its leader" not in r.stderr  # the follower served the copy
    assert_partitions_identical(racked_source.bootstrap, local_broker.bootstrap, topic, 1)

    # Without a rack the leader serves: no replica is chosen.
    produce(racked_source.bootstrap, topic, records(50, seed=32), partition=0)
    cfg = _config(tmp_path, racked_source, local_broker, None)
    r = run_cli(
        "--config", str(cfg), "-vv", "sync", "--topic", topic, "--sources", "src", "--no-group"
    )
    assert r.code == 0, r.stdout + r.stderr
    assert "from replica" not in r.stderr
    assert_partitions_identical(racked_source.bootstrap, local_broker.bootstrap, topic, 1)


def test_a_rack_replica_that_cannot_serve_sends_the_copy_to_the_leader(
    racked_source: KafkaCluster, local_broker: Broker, tmp_path: Path, topic: str
) -> None:
    rack = _replicated_topic(racked_source, topic, 200, 33)
    follower = racked_source.node(RACKS.index(rack) + 1)
    # Killed, not stopped: it stays in the metadata and in the ISR for a while (until its
    # broker session times out), so the leader still points this rack at it.
    racked_source.kill(follower.node_id)
    try:
        cfg = _config(tmp_path, racked_source, local_broker, rack)
        r = run_cli(
            "--config",
            str(cfg),
            "-vv",
            "sync",
            "--topic",
            topic,
            "--sources",
            "src",
            "--create-missing",
            "--no-group",
        )
        assert r.code == 0, r.stdout + r.stderr
        assert f"replica {follower.node_id} could not serve {topic}-0: its leader serves it" in (
            r.stderr
        ), r.stderr[-3000:]
        assert_partitions_identical(racked_source.bootstrap_live, local_broker.bootstrap, topic, 1)
    finally:
        racked_source.start(follower.node_id)
