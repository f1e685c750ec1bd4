"""Consumer group failover (``partsync offsets``): a group that committed on a source resumes
on the local cluster at exactly the next record, checked with an independent client
(confluent-kafka) on both sides."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.data import create_topic, produce
from tests.conftest import CliResult
from tests.integration.sync_support import Clusters, records

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.kafka_versions]

Run = Callable[..., CliResult]


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for ``group`` as its consumer would (with a metadata string)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "log_level": 3,
            "enable.auto.commit": False,
        }
    )
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o, metadata=f"m{p}") for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()


@contextmanager
def _consumer(bootstrap: str, group: str, topic: str, protocol: str = "classic") -> Iterator[Any]:
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "log_level": 3,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "consumer":  # KIP-848: the session timeout is the broker's
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = 6000
    c = Consumer(conf)
    c.subscribe([topic])
    try:
        yield c
    finally:
        c.close()


def _first_records(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, Any]:
    """The first record a consumer of ``group`` reads on each partition."""
    first: dict[int, Any] = {}
    with _consumer(bootstrap, group, topic) as c:
        deadline = time.monotonic() + 60
        while len(first) < partitions and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            first.setdefault(m.partition(), (m.offset(), m.key(), m.value()))
    return first


def _record_at(bootstrap: str, topic: str, partition: int, offset: int) -> Any:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "partsync-check",
            "log_level": 3,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                return (m.offset(), m.key(), m.value())
    finally:
        c.close()
    raise AssertionError(f"no record at {topic}[{partition}]@{offset}")


@pytest.fixture
def mirrored(clusters: Clusters, psync: Run, topic: str) -> str:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 3)
    create_topic(local, topic, 3)
    for p in range(3):
        produce(a, topic, records(200, seed=p), partition=p)
    assert psync("sync", "--topic", topic, "--sources", "a").code == 0
    return topic


def test_a_group_resumes_on_the_local_cluster_at_the_exact_next_record(
    clusters: Clusters, psync: Run, mirrored: str
) -> None:
    topic, group = mirrored, f"{mirrored}-app"
    committed = {0: 70, 1: 0, 2: 200}
    _commit(clusters.bootstrap("a"), group, topic, committed)

    r = psync("offsets", "--topic", topic, "--from", "a", "--group", group, "--json")

    assert r.code == 0, r.stdout + r.stderr
    [g] = r.json["groups"]
    assert g["group"] == group and g["status"] == "copied", g
    got = {p["partition"]: p for p in g["partitions"]}
    for p, o in committed.items():
        assert got[p] == {
            "topic": topic,
            "partition": p,
            "source_offset": o,
            "local_offset": o,
            "status": "copied",
        }
    produce(clusters.bootstrap("a"), topic, records(5, seed=9), partition=2)
    assert psync("sync", "--topic", topic, "--sources", "a").code == 0
    first = _first_records(clusters.bootstrap("local"), group, topic, 3)
    for p, o in committed.items():
        assert first[p][0] == o, (p, first[p])  # resumed, not reset to the earliest offset
        assert first[p] == _record_at(clusters.bootstrap("a"), topic, p, o)


def test_a_commit_beyond_the_local_end_is_clamped_and_reported(
    clusters: Clusters, psync: Run, mirrored: str
) -> None:
    topic, group = mirrored, f"{mirrored}-ahead"
    produce(clusters.bootstrap("a"), topic, records(50, seed=7), partition=1)  # not synced yet
    _commit(clusters.bootstrap("a"), group, topic, {1: 240})

    r = psync("offsets", "--topic", topic, "--from", "a", "--group", group, "--json")

    assert r.code == 0, r.stdout + r.stderr
    got = {p["partition"]: p for p in r.json["groups"][0]["partitions"]}
    assert got[1]["status"] == "clamped" and got[1]["local_offset"] == 200, got
    assert got[0]["status"] == got[2]["status"] == "no-commit", got


def test_a_coordinator_not_ready_yet_is_asked_again(
    clusters: Clusters, psync: Run, mirrored: str
) -> None:
    """A fresh DR cluster on which no group ever ran creates __consumer_offsets at the first
    group lookup, and its coordinator answers NOT_COORDINATOR until it has loaded (injected at
    the proxy in front of the local cluster): the command asks again, within a bound (it
    failed with NOT_COORDINATOR (16), exit 1)."""
    topic, group = mirrored, f"{mirrored}-app"
    _commit(clusters.bootstrap("a"), group, topic, {0: 5})
    clusters.proxy.coordinator_not_ready(3)

    r = psync("offsets", "--topic", topic, "--from", "a", "--group", group, "--json")

    assert r.code == 0, r.stdout + r.stderr
    assert clusters.proxy.group_faults_left() == 0
    [g] = r.json["groups"]
    assert g["status"] == "copied" and g["partitions"][0]["local_offset"] == 5, g


def test_a_group_the_source_does_not_know_is_an_error_not_a_copy(
    clusters: Clusters, psync: Run, mirrored: str
) -> None:
    """A mistyped group (nothing committed, no members on --from) is `not-found`, exit 1,
    naming the cluster and the group; it was reported `copied`, exit 0. A group the source
    knows with nothing committed for these topics is `no-commits`, exit 0, saying so."""
    topic, group = mirrored, f"{mirrored}-app"
    other = f"{topic}-other"
    create_topic(clusters.bootstrap("a"), other, 1)
    _commit(clusters.bootstrap("a"), group, other, {0: 0})

    r = psync("offsets", "--topic", topic, "--from", "a", "--group", f"{group}-typo", "--json")

    assert r.code == 1, r.stdout + r.stderr
    [g] = r.json["groups"]
    assert g["status"] == "not-found", g
    assert "cluster a has no group" in g["reason"] and f"{group}-typo" in g["reason"], g
    assert {p["status"] for p in g["partitions"]} == {"no-commit"}

    r = psync("offsets", "--topic", topic, "--from", "a", "--group", group)

    assert r.code == 0, r.stdout + r.stderr
    assert "no-commits: group" in r.stderr and "nothing copied" in r.stderr, r.stderr


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_with_live_members_on_the_local_cluster_is_refused(
    clusters: Clusters, psync: Run, mirrored: str, protocol: str, broker_mode: str
) -> None:
    """Live consumers of either group protocol: a KIP-848 group, which DescribeGroups reports
    as Dead without members, is asked with ConsumerGroupDescribe."""
    if protocol == "consumer" and broker_mode != "kafka-4.1.1":
        pytest.skip("only Kafka 4 here runs the consumer group protocol")
    topic, group = mirrored, f"{mirrored}-live-{protocol}"
    _commit(clusters.bootstrap("a"), group, topic, {0: 10})
    with _consumer(clusters.bootstrap("local"), group, topic, protocol) as c:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        r = psync("offsets", "--topic", topic, "--from", "a", "--group", group, "--json")

    assert r.code == 3, r.stdout + r.stderr
    [g] = r.json["groups"]
    assert g["status"] == "refused" and "live member" in g["reason"], g


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "log_level": 3,
            "enable.auto.commit": False,
        }
    )
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def test_a_follower_keeps_a_groups_commits_current_on_the_local_cluster(
    clusters: Clusters, mirrored: str, tmp_path: Path
) -> None:
    """``sync --follow --sync-groups G``: commits made on the source while the follower runs
    reach the local cluster within seconds, and a consumer failing over resumes exactly there."""
    topic, group = mirrored, f"{mirrored}-app"
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    out = (tmp_path / "follow.json").open("w")
    log = (tmp_path / "follow.log").open("w")
    argv = [
        sys.executable,
        "-m",
        "partsync",
        "--config",
        str(clusters.config),
        "sync",
        "--topic",
        topic,
        "--sources",
        "a",
        "--follow",
        "--no-group",
        "--json",
        "--follow-wait-ms",
        "200",
        "--sync-groups",
        group,
        "--sync-groups-interval",
        "0.5",
    ]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    proc = subprocess.Popen(argv, stdout=out, stderr=log, env=env)
    try:
        for committed in ({0: 50, 1: 0, 2: 150}, {0: 60, 1: 210, 2: 190}):
            produce(a, topic, records(10, seed=7), partition=1)
            _commit(a, group, topic, committed)
            deadline = time.monotonic() + 60
            while _committed(local, group, topic, 3) != committed:
                assert proc.poll() is None, (tmp_path / "follow.log").read_text()
                assert time.monotonic() < deadline, (tmp_path / "follow.log").read_text()
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "follow.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
        log.close()
    doc = json.loads((tmp_path / "follow.json").read_text())
    [g] = doc["group_offsets"]
    assert g["group"] == group and g["status"] == "copied" and g["copied_at"] > 0, g
    first = _first_records(local, group, topic, 3)
    for p, o in committed.items():
        assert first[p] == _record_at(a, topic, p, o)
