"""The adapter's Connection shared by many threads, against a real broker."""

from __future__ import annotations

import threading

import pytest

from partsync._kafka import Connection
from partsync.config import Config
from partsync.demo import data
from partsync.io.cluster import Cluster

pytestmark = pytest.mark.integration


def test_concurrent_fetches_on_one_shared_connection_get_their_own_answers(source_a, topic) -> None:
    parts = 4
    data.create_topic(source_a.bootstrap, topic, parts)
    for p in range(parts):
        data.produce(
            source_a.bootstrap, topic, data.make_records(50 * (p + 1), seed=p, partition=p)
        )
    wrong: list[tuple[int, object]] = []
    with Connection(source_a.host, source_a.port, cluster="a") as conn:

        def hammer(p: int) -> None:
            for _ in range(25):
                got = conn.fetch(topic, [(p, 0, 1 << 16)], max_wait_ms=100, min_bytes=1)
                if set(got) != {p} or got[p].high_watermark != 50 * (p + 1):
                    wrong.append((p, sorted(got)))

        threads = [threading.Thread(target=hammer, args=(i % parts,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert wrong == []


def test_a_dropped_shared_connection_is_replaced(source_a, topic) -> None:
    data.create_topic(source_a.bootstrap, topic, 1)
    with Cluster(Config(clusters={}).resolve(source_a.bootstrap)) as c:
        leader = c.leader(topic, 0)
        first = c.broker_conn(leader)
        first.close()  # as after an I/O error or a broker dropping it
        second = c.broker_conn(leader)
        assert second is not first and not second.closed
        assert c.bounds(topic, [0])[0].end == 0
