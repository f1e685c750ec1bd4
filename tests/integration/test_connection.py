"""The adapter's Connection shared by many threads, against a real broker."""

from __future__ import annotations

import threading
import time

import pytest

from partsync._kafka import LATEST, Connection
from partsync.config import Config
from partsync.demo import data
from partsync.errors import ClusterError
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


def _wait_for(cond, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_one_off_calls_of_several_threads_are_in_flight_together(source_a, topic) -> None:
    """A call does not hold the connection for its whole round trip: while one caller is
    reading (here the test holds the reading side), the others' requests are sent behind it,
    and each caller then gets its own answer."""
    parts = 3
    data.create_topic(source_a.bootstrap, topic, parts)
    for p in range(parts):
        data.produce(source_a.bootstrap, topic, data.make_records(p + 2, seed=p, partition=p))
    with Connection(source_a.host, source_a.port, cluster="a") as conn:
        got: dict[int, int] = {}

        def ask(p: int) -> None:
            answer = conn.fetch(topic, [(p, 0, 1 << 16)], max_wait_ms=100, min_bytes=1)
            got.update((q, f.high_watermark) for q, f in answer.items())

        with conn._recv_lock:  # a caller reading a slow answer
            threads = [threading.Thread(target=ask, args=(p,)) for p in range(parts)]
            for t in threads:
                t.start()
            _wait_for(lambda: conn.in_flight == parts, f"{parts} requests in flight")
        for t in threads:
            t.join(10)
    assert got == {p: p + 2 for p in range(parts)}


def test_hundreds_of_callers_on_one_connection_each_get_their_own_answer(source_a, topic) -> None:
    """Many threads' calls in flight on one connection at once (as a thousand partitions'
    fences share their coordinator's): every caller returns, each with its own answer."""
    parts = 4
    data.create_topic(source_a.bootstrap, topic, parts)
    for p in range(parts):
        data.produce(source_a.bootstrap, topic, data.make_records(p + 1, seed=p, partition=p))
    wrong: list[object] = []
    with Connection(source_a.host, source_a.port, cluster="a") as conn:

        def ask(i: int) -> None:
            p = i % parts
            for _ in range(5):
                got = conn.fetch(topic, [(p, 0, 1 << 16)], max_wait_ms=100, min_bytes=1)
                if set(got) != {p} or got[p].high_watermark != p + 1:
                    wrong.append((p, sorted(got)))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
    assert wrong == []


def test_calls_in_flight_on_a_connection_that_drops_all_fail_and_none_hangs(
    source_a, topic
) -> None:
    data.create_topic(source_a.bootstrap, topic, 1)
    with Connection(source_a.host, source_a.port, cluster="a") as conn:
        errors: list[BaseException] = []

        def ask() -> None:
            try:
                conn.list_offsets(topic, [0], LATEST)
            except ClusterError as e:
                errors.append(e)

        with conn._recv_lock:
            threads = [threading.Thread(target=ask) for _ in range(3)]
            for t in threads:
                t.start()
            _wait_for(lambda: conn.in_flight == 3, "3 requests in flight")
            conn.close()  # as a broker dropping it, or a stop interrupting the calls
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
    assert len(errors) == 3


def test_a_copy_connection_given_back_clean_serves_the_next_copy_and_a_busy_one_is_closed(
    source_a, topic
) -> None:
    data.create_topic(source_a.bootstrap, topic, 2)
    with Cluster(Config(clusters={}).resolve(source_a.bootstrap)) as c:
        first = c.connect_leader(topic, 0)
        c.release(first)
        again = c.connect_leader(topic, 1)  # same leader: the idle connection is taken
        assert again is first and not again.closed
        again.send_fetch(topic, [(1, 0, 1024)], max_wait_ms=100)
        c.release(again)  # an answer still to read: out of step for anyone else
        assert again.closed
        fresh = c.connect_leader(topic, 0)
        assert fresh is not again and not fresh.closed
        c.release(fresh)
    assert fresh.closed  # closing the cluster closes the idle connections too


def test_shared_fetch_lanes_are_kept_per_broker_and_lane_and_replaced_when_idle(
    source_a, topic, monkeypatch
) -> None:
    """A fetch lane is shared (same leader, same lane number) until it is broken or idle for
    longer than a broker keeps an idle connection open; then the next copy gets a fresh one."""
    from partsync.io import shared_pipelines

    data.create_topic(source_a.bootstrap, topic, 2)
    with Cluster(Config(clusters={}).resolve(source_a.bootstrap)) as c:
        lane = c.fetch_lane(topic, 0)
        assert c.fetch_lane(topic, 1) is lane  # one broker: the partitions share it
        other = c.fetch_lane(topic, 0, 1)
        assert other is not lane
        monkeypatch.setattr(shared_pipelines, "_PIPELINE_IDLE_S", 0.0)
        fresh = c.fetch_lane(topic, 0)
        assert fresh is not lane and lane.broken and not fresh.broken
        reply = fresh.submit(topic, 0, 0, 1 << 16).result(10)
        assert reply is not None and reply.partition is not None
        assert reply.partition.error_code == 0 and reply.partition.high_watermark == 0


def test_request_timeout_ms_bounds_a_broker_that_accepts_and_never_answers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A hung broker must not hold a run for the default 30 s per request when the config says
    # less: the run ends, with an error naming the cluster, well inside this test's limit.
    import socket
    import subprocess
    import sys

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # accepted by the kernel, never read
    port = silent.getsockname()[1]
    cfg = tmp_path / "partsync.toml"
    cfg.write_text(
        f'[clusters.hung]\nbootstrap_servers = ["127.0.0.1:{port}"]\nrequest_timeout_ms = 300\n'
    )
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "partsync",
                "--config",
                str(cfg),
                "plan",
                "--topic",
                "t",
                "--sources",
                "hung",
                "--local",
                "127.0.0.1:1",
            ],
            capture_output=True,
            text=True,
            timeout=25,
            check=False,
        )
    finally:
        silent.close()
    assert done.returncode == 1, done.stderr
    assert "hung" in done.stderr
