"""The test-broker launchers and data helpers against real Tansu / noida-db processes."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from partsync.demo import brokers
from partsync.demo.brokers import Broker, BrokerStartError, kafka_ping
from partsync.demo.data import (
    assert_partitions_identical,
    consume_all,
    create_topic,
    make_records,
    produce,
)
from tests.support.brokers import start_broker, start_kafka_container
from tests.support.data import produce_kafka_python

pytestmark = pytest.mark.integration

LOCAL_KINDS = ["tansu", "noida"]


@pytest.fixture(scope="module", params=LOCAL_KINDS)
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with start_broker(request.param) as b:
        yield b


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ping_reports_the_advertised_listener(broker: Broker) -> None:
    assert kafka_ping(broker.host, broker.port) == [("127.0.0.1", broker.port)]
    assert broker.bootstrap == f"127.0.0.1:{broker.port}"


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_both_clients_round_trip(broker: Broker, codec: str) -> None:
    topic = _topic()
    create_topic(broker.bootstrap, topic, 2)
    recs = make_records(30, seed=7, null_keys_every=5, null_values_every=7)
    produce(broker.bootstrap, topic, recs, compression=codec, partition=0)
    produce_kafka_python(broker.bootstrap, topic, recs, compression=codec, partition=1)
    for p in (0, 1):
        got = consume_all(broker.bootstrap, topic, p)
        assert [g.offset for g in got] == list(range(30))
        assert [(g.key, g.value, g.headers, g.timestamp, g.timestamp_type) for g in got] == [
            (r.key, r.value, r.headers, r.timestamp_ms, 1) for r in recs
        ]
    assert assert_partitions_identical(broker.bootstrap, broker.bootstrap, topic, 2) == 60


def test_null_header_values(broker: Broker) -> None:
    topic = _topic()
    create_topic(broker.bootstrap, topic, 1)
    recs = make_records(4, seed=1, null_header_values_every=2)
    produce(broker.bootstrap, topic, recs, partition=0)
    assert [g.headers for g in consume_all(broker.bootstrap, topic, 0)] == [r.headers for r in recs]
    with pytest.raises(ValueError, match="null header"):
        produce_kafka_python(broker.bootstrap, topic, recs, partition=0)


def test_consume_ranges_stop_at_the_real_end(broker: Broker) -> None:
    # Several batches: on Tansu, ListOffsets(latest) is the last batch's base + 1, below the end.
    topic = _topic()
    create_topic(broker.bootstrap, topic, 1)
    for i in range(3):
        produce(broker.bootstrap, topic, make_records(5, seed=i), partition=0)
    assert len(consume_all(broker.bootstrap, topic, 0)) == 15
    assert [r.offset for r in consume_all(broker.bootstrap, topic, 0, start=12)] == [12, 13, 14]
    assert [r.offset for r in consume_all(broker.bootstrap, topic, 0, 3, 6)] == [3, 4, 5]
    assert consume_all(broker.bootstrap, topic, 0, start=15) == []
    empty = _topic()
    create_topic(broker.bootstrap, empty, 1)
    assert consume_all(broker.bootstrap, empty, 0) == []


def test_identity_check_names_the_first_differing_offset(broker: Broker) -> None:
    a, b, c = _topic(), _topic(), _topic()
    for t in (a, b, c):
        create_topic(broker.bootstrap, t, 1)
    recs = make_records(10, seed=3)
    produce(broker.bootstrap, a, recs, partition=0)
    changed = recs[:6] + [make_records(7, seed=99)[6]] + recs[7:]
    produce(broker.bootstrap, b, changed, partition=0)
    with pytest.raises(AssertionError, match=r"differs at offset 6 .*key"):
        assert_partitions_identical(broker.bootstrap, broker.bootstrap, a, [0], dst_topic=b)
    produce(broker.bootstrap, c, recs + recs[:1], partition=0)
    with pytest.raises(AssertionError, match="first offset only on one side: 10"):
        assert_partitions_identical(broker.bootstrap, broker.bootstrap, a, [0], dst_topic=c)


@pytest.mark.parametrize("kind", LOCAL_KINDS)
def test_stop_takes_the_whole_process_group_down(kind: str) -> None:
    b = start_broker(kind)
    assert b.process is not None
    pgid = b.process.pid
    assert _group_alive(pgid)
    b.stop()
    assert not _group_alive(pgid)
    assert b.process.returncode is not None
    ps = subprocess.run(
        ["ps", "-o", "pid=", "-g", str(pgid)], check=False, capture_output=True, text=True
    )
    assert ps.stdout.strip() == ""


def test_noida_restart_keeps_data_and_port(tmp_path: Path) -> None:
    with brokers.start_noida(tmp_path / "data") as b:
        port = b.port
        topic = _topic()
        create_topic(b.bootstrap, topic, 1)
        recs = make_records(20, seed=5)
        produce(b.bootstrap, topic, recs, compression="zstd", partition=0)
        before = consume_all(b.bootstrap, topic, 0)
        b.restart()
        assert b.port == port
        assert consume_all(b.bootstrap, topic, 0) == before
        produce(b.bootstrap, topic, recs[:3], partition=0)
        assert len(consume_all(b.bootstrap, topic, 0)) == 23
    assert (tmp_path / "data").is_dir()  # a caller's data dir is left in place


def test_tansu_restart_is_refused() -> None:
    with brokers.start_tansu() as b, pytest.raises(NotImplementedError):
        b.restart()


def test_a_broker_that_never_answers_raises_with_the_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(brokers, "_noida_binary", lambda: "/bin/false")
    with pytest.raises(BrokerStartError, match="exited with code 1"):
        brokers.start_noida(timeout=2)


def _docker_available() -> bool:
    return bool(os.environ.get("DOCKER_HOST")) or Path("/var/run/docker.sock").exists()


@pytest.mark.docker
@pytest.mark.skipif(not _docker_available(), reason="no Docker daemon")
def test_apache_kafka_container() -> None:
    with start_kafka_container() as b:
        topic = _topic()
        create_topic(b.bootstrap, topic, 1)
        recs = make_records(10, seed=2)
        produce(b.bootstrap, topic, recs, compression="lz4", partition=0)
        assert [r.value for r in consume_all(b.bootstrap, topic, 0)] == [r.value for r in recs]
