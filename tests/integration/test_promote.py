"""``partsync promote`` (failover) against real brokers, through the strict proxy: a last
catch-up, the failover point recorded, every later run refusing the promoted topic, groups
copied a last time; refused while the job's group has a member; a source gone dark promoted
as the mirror holds it, with what that source held beyond it when a follower last saw it; a
replayed transaction left open aborted and counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from partsync.demo.data import create_topic, produce
from partsync.errors import TopicError
from partsync.io.cluster import Cluster
from partsync.io.link_records import read_promotions, write_source_ends
from partsync.plan.comparator import Bounds
from tests.conftest import CliResult, run_cli
from tests.integration.sync_support import (
    Clusters,
    bounds,
    cluster_ref,
    ends,
    produce_raw,
    records,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

Run = Callable[..., CliResult]


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        parts = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        c.commit(offsets=parts, asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_promote_catches_up_records_the_failover_point_and_every_later_run_refuses(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 2)
    produce(a, topic, records(40, seed=1), partition=0)
    produce(a, topic, records(25, seed=2), partition=1)
    base = ("--topic", topic, "--sources", "a")
    assert psync("sync", *base, "--create-missing").code == 0
    produce(a, topic, records(9, seed=3), partition=0)  # not mirrored yet
    _commit(a, "billing", topic, {0: 45, 1: 20})

    r = psync("promote", *base, "--sync-groups", "billing", "--json")
    assert r.code == 0, r.stdout + r.stderr
    (p,) = r.json["promoted"]
    assert p["topic"] == topic and p["cluster"] == "local" and p["at_risk"] == 0
    assert [
        (x["partition"], x["local_end"], x["sources"], x["at_risk"]) for x in p["partitions"]
    ] == [
        (0, 49, {"a": 49}, 0),
        (1, 25, {"a": 25}, 0),
    ]
    assert ends(clusters["local"], topic, 2) == {0: 49, 1: 25}
    assert [g["status"] for g in r.json["groups"]] == ["copied"], r.json["groups"]
    assert _committed(local, "billing", topic, 2) == {0: 45, 1: 20}

    # Durable for every later writer: a one-shot sync, a plan, a follower's start.
    produce(a, topic, records(5, seed=4), partition=1)
    r = psync("sync", *base, "--json")
    assert r.code == 3, r.stdout + r.stderr
    refused = r.json["topics"][0]["partitions"][0]["reason"]
    assert f"topic {topic} was promoted on local at " in refused, refused
    assert ends(clusters["local"], topic, 2) == {0: 49, 1: 25}  # nothing written
    assert psync("plan", *base).code == 3
    r = psync("status", *base, "--json")
    assert r.code == 0, r.stdout + r.stderr
    assert [t["state"] for t in r.json["topics"]] == ["promoted"]

    # Again: reported, not touched.
    r = psync("promote", *base, "--json")
    assert r.code == 0, r.stdout + r.stderr
    assert r.json["promoted"] == [] and [x["topic"] for x in r.json["already_promoted"]] == [topic]


def test_promote_is_refused_while_the_jobs_group_has_a_member(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    from confluent_kafka import Consumer

    a, local = clusters.bootstrap("a"), clusters.bootstrap("local")
    create_topic(a, topic, 1)
    produce(a, topic, records(5, seed=1))
    base = ("--topic", topic, "--sources", "a")
    assert psync("sync", *base, "--create-missing").code == 0
    # A member of the job's group, as a running follower would be (a group of its own: the
    # sync above used the default one, whose protocol noida-db then keeps).
    job = f"job-{topic}"
    conf = {"bootstrap.servers": local, "group.id": job, "log_level": 3}
    c = Consumer({**conf, "session.timeout.ms": 6000})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment(), "the consumer did not join"
        r = psync("promote", *base, "--group", job, "--json")
    finally:
        c.close()
    assert r.code == 1, r.stdout + r.stderr
    assert "has 1 member(s): the job's followers still run" in r.stdout, r.stdout
    with Cluster(cluster_ref(local, "local")) as cl:
        assert topic not in (read_promotions(cl) or {})


@pytest.fixture
def dark_config(clusters: Clusters, tmp_path: Path) -> Iterator[Path]:
    """The session's clusters and a source ``dark`` that no longer answers (a closed port)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "dark.toml"
    path.write_text(
        clusters.config.read_text()
        + f'\n[clusters.dark]\nbootstrap_servers = ["127.0.0.1:{port}"]\n'
        + "request_timeout_ms = 3000\nconnect_timeout_ms = 1000\n"
    )
    yield path


def _promote_dark(config: Path, topic: str) -> CliResult:
    args = ("promote", "--topic", topic, "--sources", "dark", "--no-group", "--json")
    return run_cli("--config", str(config), *args)


def test_a_source_gone_dark_is_promoted_from_with_what_it_held_beyond_the_mirror(
    clusters: Clusters, dark_config: Path, topic: str
) -> None:
    local = clusters.bootstrap("local")
    create_topic(clusters.bootstrap("a"), topic, 2)
    produce(clusters.bootstrap("a"), topic, records(30, seed=1), partition=0)
    assert (
        run_cli(
            "--config",
            str(dark_config),
            "sync",
            "--topic",
            topic,
            "--sources",
            "a",
            "--create-missing",
        ).code
        == 0
    )
    # What a follower of `dark` recorded before it went dark: partition 0 30 records ahead of
    # the mirror's 30; nothing recorded of partition 1.
    with Cluster(cluster_ref(local, "local")) as cl:
        write_source_ends(cl, {topic: {0: {"dark": 60}}})

    r = _promote_dark(dark_config, topic)
    assert r.code == 0, r.stdout + r.stderr
    (p,) = r.json["promoted"]
    got = [(x["local_end"], x["sources"], x["last_seen"], x["at_risk"]) for x in p["partitions"]]
    assert got == [(30, {"dark": None}, {"dark": 60}, 30), (0, {"dark": None}, {}, None)]
    assert p["at_risk"] is None  # partition 1's is unknown
    assert any("not caught up" in w for w in r.json["warnings"]), r.json["warnings"]


@pytest.mark.kafka_only
def test_a_replayed_transaction_left_open_is_aborted_and_counted(
    clusters: Clusters, psync: Run, topic: str
) -> None:
    from confluent_kafka import Producer

    a = clusters.bootstrap("a")
    create_topic(a, topic, 1)
    produce(a, topic, records(10, seed=1))
    producer: Any = Producer(
        {"bootstrap.servers": a, "transactional.id": f"t-{topic}", "log_level": 3}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, key=b"k%d" % i, value=b"open", partition=0)
    producer.flush(15)
    try:
        r = psync("promote", "--topic", topic, "--sources", "a", "--create-missing", "--json")
    finally:
        producer.abort_transaction(15)
    assert r.code == 0, r.stdout + r.stderr
    (x,) = r.json["promoted"][0]["partitions"]
    assert (x["local_end"], x["aborted"]) == (15, 4), (x, r.json["warnings"])  # 10 + 4 + marker


def test_a_start_that_could_not_finish_leaves_no_filler_records_to_read(
    clusters: Clusters, dark_config: Path, topic: str
) -> None:
    """A mirror start filling up to its source's log start when the source went dark: the
    promoted log starts past the fillers, so the new primary's consumers never read them."""
    from partsync.wire.filler import filler_batch

    local = clusters["local"]
    create_topic(local.bootstrap, topic, 1)
    for _ in range(2):
        produce_raw(local, topic, 0, filler_batch(100, 0))
    r = _promote_dark(dark_config, topic)
    assert r.code == 0, r.stdout + r.stderr
    assert bounds(local, topic, 1)[0] == Bounds(200, 200)


def _mirrored(clusters: Clusters, topic: str, n: int) -> bool:
    try:
        return ends(clusters["local"], topic, 1) == {0: n}
    except TopicError:  # not created yet
        return False


def test_a_follower_left_running_stops_mirroring_a_topic_once_it_is_promoted(
    clusters: Clusters, psync: Run, topic: str, tmp_path: Path
) -> None:
    """A follower without a group cannot be seen by promote: its next topic check reads the
    promotion and stops the topic (exit 3 when stopped), so nothing more is mirrored in."""
    import os
    import signal
    import subprocess
    import sys

    a = clusters.bootstrap("a")
    create_topic(a, topic, 1)
    produce(a, topic, records(10, seed=1))
    log = tmp_path / "follower.log"
    argv = [sys.executable, "-m", "partsync", "--config", str(clusters.config), "sync"]
    argv += ["--topic", topic, "--sources", "a", "--create-missing", "--follow", "--no-group"]
    argv += ["--topic-check-interval", "1", "--follow-wait-ms", "200"]
    env = {k: v for k, v in os.environ.items() if k != "PARTSYNC_CONFIG"}
    with log.open("w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env)
        try:
            deadline = time.monotonic() + 60
            while not _mirrored(clusters, topic, 10):
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
            r = psync("promote", "--topic", topic, "--sources", "a", "--no-group", "--json")
            assert r.code == 0, r.stdout + r.stderr
            deadline = time.monotonic() + 30
            while "was promoted on local" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
            produce(a, topic, records(5, seed=2))
            time.sleep(2)  # a follower still mirroring would copy them within this
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
    assert code == 3, log.read_text()
    assert ends(clusters["local"], topic, 1) == {0: 10}
