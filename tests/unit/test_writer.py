"""The shared writer's packing rules, over the scripted stand-in for one broker connection.

The stand-in (``tests/support/scripted_broker.py``) answers Produce like a broker (base offsets
per partition); the real wire path is covered by the integration tests and the strict Produce
proxy.
"""

from __future__ import annotations

import threading
import time

import pytest

from partsync._kafka import ProducedPartition
from partsync.errors import ClusterError
from partsync.io.writer import Cancelled, SharedWriter
from tests.support.scripted_broker import ScriptedBroker


def never() -> bool:
    return False


def test_partitions_share_requests_with_one_batch_each_and_order_kept() -> None:
    hold = threading.Event()
    broker = ScriptedBroker(hold=hold)
    w = SharedWriter(broker, max_in_flight=1)  # type: ignore[arg-type]
    futs = []
    for i in range(3):  # three batches for each of four partitions, queued while the writer waits
        for p in range(4):
            futs.append((p, i, w.submit("t", p, bytes([i]) * 10, never)))
    hold.set()
    results = [(p, i, f.result(5)) for p, i, f in futs]
    w.close()
    for req in broker.produce_requests:
        # At most one batch per partition per request (a dict cannot hold two), never empty.
        assert req["t"]
    assert sum(len(r["t"]) for r in broker.produce_requests) == 12
    assert any(len(r["t"]) > 1 for r in broker.produce_requests)  # partitions did share requests
    for p in range(4):
        sent = [r["t"][p][0] for r in broker.produce_requests if p in r["t"]]
        assert sent == [0, 1, 2]  # each partition's batches in submission order
        bases = [res.base_offset for q, _, res in results if q == p]
        assert bases == [0, 10, 20]


def _wait_for_requests(broker: ScriptedBroker, n: int) -> None:
    deadline = time.monotonic() + 5
    while len(broker.produce_requests) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(broker.produce_requests) == n


def test_batches_arriving_while_a_request_is_in_flight_go_together_with_its_answer() -> None:
    gate = threading.Event()
    broker = ScriptedBroker(gate=gate)
    w = SharedWriter(broker, max_in_flight=5)  # type: ignore[arg-type]
    try:
        first = w.submit("t", 0, b"a", never)
        _wait_for_requests(broker, 1)  # nothing was in flight: it went at once
        later = [w.submit("t", p, b"b", never) for p in (1, 2, 3)]
        time.sleep(0.3)
        assert (
            len(broker.produce_requests) == 1
        )  # held for the answer in flight, not sent one by one
        gate.set()
        assert first.result(5).base_offset == 0
        assert [f.result(5).base_offset for f in later] == [0, 0, 0]
        assert [sorted(r["t"]) for r in broker.produce_requests] == [[0], [1, 2, 3]]
    finally:
        gate.set()
        w.close()


def test_enough_waiting_partitions_go_without_waiting_for_the_answer() -> None:
    from partsync.io.writer import PACK_PARTITIONS

    gate = threading.Event()
    broker = ScriptedBroker(gate=gate)
    w = SharedWriter(broker, max_in_flight=5)  # type: ignore[arg-type]
    try:
        w.submit("t", 0, b"a", never)
        _wait_for_requests(broker, 1)
        many = [w.submit("t", p, b"b", never) for p in range(1, 1 + PACK_PARTITIONS)]
        _wait_for_requests(broker, 2)  # sent while the first answer is still held back
        assert sorted(broker.produce_requests[1]["t"]) == list(range(1, 1 + PACK_PARTITIONS))
        gate.set()
        assert all(f.result(5).base_offset == 0 for f in many)
    finally:
        gate.set()
        w.close()


def test_cancelled_batches_are_dropped_unsent() -> None:
    hold = threading.Event()
    broker = ScriptedBroker(hold=hold)
    w = SharedWriter(broker, max_in_flight=1)  # type: ignore[arg-type]
    stopped = threading.Event()
    first = w.submit("t", 0, b"a" * 5, stopped.is_set)
    time.sleep(0.2)  # the writer has taken the first batch and waits in send
    second = w.submit("t", 0, b"b" * 5, stopped.is_set)
    stopped.set()
    hold.set()
    assert first.result(5).base_offset == 0
    with pytest.raises(Cancelled):
        second.result(5)
    w.close()
    assert [r["t"][0] for r in broker.produce_requests] == [b"a" * 5]


def test_a_broken_connection_fails_every_unanswered_batch_and_the_writer() -> None:
    broker = ScriptedBroker(fail_after=1)
    w = SharedWriter(broker, max_in_flight=1)  # type: ignore[arg-type]
    ok = w.submit("t", 0, b"x", never)
    assert ok.result(5).base_offset == 0
    bad = [w.submit("t", p, b"y", never) for p in range(3)]
    for f in bad:
        with pytest.raises(ClusterError):
            f.result(5)
    assert w.broken
    with pytest.raises(ClusterError):
        w.submit("t", 9, b"z", never).result(1)
    t0 = time.monotonic()
    w.close()
    assert not w._sender.is_alive() and not w._receiver.is_alive()
    assert time.monotonic() - t0 < 4  # ended, not left to the join's timeout


def test_a_cut_connection_fails_the_appends_it_carried_at_once() -> None:
    """The connection dies while an answer is awaited (the request was sent, its fate unknown):
    that request's partitions, those sent behind it and those still waiting all fail at once,
    not after a Produce timeout, whichever writer thread notices first."""
    for in_flight in (1, 3):
        broker = ScriptedBroker(cut_at=1)
        w = SharedWriter(broker, max_in_flight=in_flight, timeout_ms=60_000)  # type: ignore[arg-type]
        assert w.submit("t", 0, b"x", never).result(5).base_offset == 0
        futs = [w.submit("t", p, b"y", never) for p in range(4) for _ in range(3)]
        started = time.monotonic()
        for f in futs:
            with pytest.raises(ClusterError):
                f.result(8)  # the writer's own answer timeout would be 60 s
        assert time.monotonic() - started < 5, "pending appends waited for a timeout"
        assert w.broken
        w.close()


def test_request_size_cap_splits_requests() -> None:
    hold = threading.Event()
    broker = ScriptedBroker(hold=hold)
    w = SharedWriter(broker, max_in_flight=1, max_request_bytes=25)  # type: ignore[arg-type]
    blocker = w.submit("t", 99, b"-", never)
    time.sleep(0.2)
    futs = [w.submit("t", p, b"x" * 10, never) for p in range(5)]
    hold.set()
    blocker.result(5)
    for f in futs:
        f.result(5)
    w.close()
    sizes = [sum(len(d) for d in r["t"].values()) for r in broker.produce_requests[1:]]
    assert all(s <= 25 for s in sizes) and sum(sizes) == 50


def test_each_partition_gets_its_own_error_to_locate() -> None:
    """One lost connection fails many partitions' appends: locating the error at one partition
    must not relabel the others'."""
    broker = ScriptedBroker(cut_at=0)
    w = SharedWriter(broker, max_in_flight=1)  # type: ignore[arg-type]
    futs = [w.submit("t", p, b"y", never) for p in range(3)]
    errors = []
    for f in futs:
        with pytest.raises(ClusterError) as e:
            f.result(8)
        errors.append(e.value)
    errors[0].partition = 0
    assert [e.partition for e in errors[1:]] == [None, None]
    w.close()


def test_future_callback_runs_once_in_the_answering_thread_before_done() -> None:
    from partsync.io.writer import ProduceFuture

    fut = ProduceFuture()
    seen: list[tuple[str, bool, int | None]] = []
    fut.on_done(
        lambda f: seen.append((threading.current_thread().name, f.done(), f.outcome().base_offset))
    )
    answer = ProducedPartition(0, 0, 7, 0, None)
    t = threading.Thread(target=fut.set, args=(answer,), name="answering")
    t.start()
    t.join()
    # The callback ran in the answering thread, before the future counted as done.
    assert seen == [("answering", False, 7)]
    assert fut.done()
    fut.set(error=ClusterError("late failure"))  # a second answer is ignored
    assert fut.result(0).base_offset == 7 and len(seen) == 1


def test_future_callback_added_after_the_answer_runs_at_once() -> None:
    from partsync.io.writer import ProduceFuture

    fut = ProduceFuture()
    fut.set(error=ClusterError("cut"))
    seen: list[str] = []

    def check(f: ProduceFuture) -> None:
        with pytest.raises(ClusterError):
            f.outcome()
        seen.append(threading.current_thread().name)

    fut.on_done(check)
    assert seen == [threading.current_thread().name]


def test_a_failing_callback_does_not_break_the_writer() -> None:
    w = SharedWriter(ScriptedBroker())  # type: ignore[arg-type]
    try:
        first = w.submit("t", 0, b"x", never)

        def boom(_f: object) -> None:
            raise RuntimeError("bug in a partition's check")

        first.on_done(boom)
        first.result(5)  # answered in time (raises otherwise)
        assert w.submit("t", 0, b"y", never).result(5).base_offset == 1
    finally:
        w.close()
