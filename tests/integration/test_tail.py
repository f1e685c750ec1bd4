"""The follow-mode doorbell (``io.tail.Tail``) against real brokers, through the strict proxy:
a record produced to one waiting partition wakes that partition and no other; on Apache Kafka
the long polls run in an incremental fetch session (KIP-227), so an idle poll names no
partition; a broker that declines sessions (Tansu, noida-db) gets full requests, and one that
does not hold a Fetch for its wait (noida-db answers at once) is not polled in a busy loop."""

from __future__ import annotations

import threading
import time

import pytest

from partsync.config import Config
from partsync.demo.brokers import Broker
from partsync.demo.data import Rec, create_topic, produce
from partsync.io.pool import ClusterPool
from partsync.io.tail import Tail
from tests.conftest import is_real_kafka
from tests.integration.kafka_proxy import StrictProxy

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.kafka_versions]

_BOUND_S = 30.0
_WAIT_MS = 200
PARTITIONS = 6


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + _BOUND_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.parametrize("role", ["a", "b"])  # mixed mode: Tansu, noida-db
def test_a_record_wakes_its_partition_and_idle_polls_stay_small(
    role: str, topic: str, broker_mode: str, request: pytest.FixtureRequest
) -> None:
    source: Broker = request.getfixturevalue(f"source_{role}")
    create_topic(source.bootstrap, topic, PARTITIONS)
    rang: list[tuple[str, int]] = []
    lock = threading.Lock()

    def bell(tp: tuple[str, int]) -> None:
        with lock:
            rang.append(tp)

    with StrictProxy(source.bootstrap) as proxy, ClusterPool() as pool:
        cluster = pool.get(Config(clusters={}).resolve(proxy.bootstrap))
        cluster.watch([topic])
        tail = Tail(cluster, _WAIT_MS)
        try:
            for p in range(PARTITIONS):
                tail.watch((topic, p), 0, lambda p=p: bell((topic, p)))
            _until(lambda: tail.full_requests + tail.incremental_requests >= 6, "six idle polls")
            assert rang == [], "no data, no doorbell"
            idle_polls = tail.full_requests + tail.incremental_requests
            since = time.monotonic()
            if is_real_kafka(broker_mode):
                # One full request made the session; every idle poll after it is incremental.
                assert tail.full_requests == 1 and tail.incremental_requests >= 5
            else:  # declined sessions: full requests, but not in a busy loop
                assert tail.incremental_requests == 0

            produce(source.bootstrap, topic, [Rec(b"k", b"v")], partition=3)
            _until(lambda: rang, "the doorbell of partition 3")
            time.sleep(3 * _WAIT_MS / 1000)  # more polls: the rung partition left the session
            assert rang == [(topic, 3)]

            # It waits again further on; another record there wakes it again.
            tail.watch((topic, 3), 1, lambda: bell((topic, 3)))
            produce(source.bootstrap, topic, [Rec(b"k", b"w")], partition=3)
            _until(lambda: len(rang) == 2, "the second doorbell of partition 3")
            assert rang == [(topic, 3), (topic, 3)]
            polls = tail.full_requests + tail.incremental_requests - idle_polls
            elapsed = time.monotonic() - since
        finally:
            tail.close()
    # Not a busy loop even where the broker answers at once: at most about one poll per half
    # wait, and one more per doorbell (noida-db answered thousands a second before).
    assert polls <= 2 * elapsed * 1000 / _WAIT_MS + 10, (polls, elapsed)
