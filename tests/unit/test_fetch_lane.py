"""The fetch lane's packing rules, over the scripted stand-in for one broker connection.

The stand-in (``tests/support/scripted_broker.py``) answers every partition of a Fetch with a
record naming the offset asked for; the real wire path is covered by the
integration tests (every sync fetches through lanes) and the strict proxy.
"""

from __future__ import annotations

import threading
import time

import pytest

from partsync.errors import ClusterError
from partsync.io.fetch_lane import FAR_IN_FLIGHT_FACTOR, PACK_PARTITIONS, FetchAnswer, FetchLane
from tests.support.scripted_broker import ScriptedBroker


def records(fut: FetchAnswer) -> bytes:
    reply = fut.result(5)
    assert reply is not None and reply.partition is not None
    return bytes(reply.partition.records)


def until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_partitions_share_a_request_and_each_gets_its_own_part() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        first = lane.submit("t", 0, 5, 100)  # nothing in flight: goes alone, at once
        until(lambda: conn.sent() == 1)
        rest = [lane.submit("t", p, 10 * p, 100) for p in range(1, 5)]
        gate.set()
        assert records(first) == b"t/0@5"
        assert [records(f) for f in rest] == [b"t/1@10", b"t/2@20", b"t/3@30", b"t/4@40"]
        # The four asks that waited for the first answer went together, sized by their sum.
        assert conn.fetch_requests[1] == (
            {"t": [(1, 10, 100), (2, 20, 100), (3, 30, 100), (4, 40, 100)]},
            400,
        )
    finally:
        lane.close()


def test_a_partitions_second_ask_waits_for_the_next_request_in_order() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        until_first = lane.submit("t", 9, 0, 10)
        until(lambda: conn.sent() == 1)
        a = lane.submit("t", 0, 100, 10)
        b = lane.submit("t", 0, 200, 10)
        c = lane.submit("u", 0, 300, 10)
        gate.set()
        assert records(until_first) == b"t/9@0"
        assert (records(a), records(b), records(c)) == (b"t/0@100", b"t/0@200", b"u/0@300")
        assert conn.fetch_requests[1][0] == {"t": [(0, 100, 10)], "u": [(0, 300, 10)]}
        assert conn.fetch_requests[2][0] == {"t": [(0, 200, 10)]}
    finally:
        lane.close()


def test_enough_waiting_partitions_go_without_waiting_for_the_answer() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        lane.submit("t", 999, 0, 10)
        until(lambda: conn.sent() == 1)
        futs = [lane.submit("t", p, 0, 10) for p in range(PACK_PARTITIONS - 1)]
        time.sleep(0.2)
        assert conn.sent() == 1  # a few waiting asks wait for the answer in flight ...
        futs.append(lane.submit("t", PACK_PARTITIONS, 0, 10))
        until(lambda: conn.sent() == 2)  # ... but a request's worth goes at once
        assert len(conn.fetch_requests[1][0]["t"]) == PACK_PARTITIONS
        gate.set()
        for f in futs:
            records(f)
    finally:
        lane.close()


def test_on_a_far_broker_asks_go_as_soon_as_a_request_slot_is_free() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(rtt=0.05, gate=gate)
    lane = FetchLane(conn, max_in_flight=3)  # type: ignore[arg-type]
    try:
        assert lane.far
        cap = 3 * FAR_IN_FLIGHT_FACTOR  # the partitions sharing a far lane each keep theirs
        futs = [lane.submit("t", 0, o, 10) for o in range(cap + 2)]
        until(lambda: conn.sent() == cap)  # one partition, a request each, all on the wire
        time.sleep(0.1)
        assert conn.sent() == cap  # no more than that
        gate.set()
        assert [records(f) for f in futs] == [f"t/0@{o}".encode() for o in range(cap + 2)]
    finally:
        lane.close()


def test_request_bytes_cap_splits_requests_but_a_big_ask_still_goes() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn, max_request_bytes=250)  # type: ignore[arg-type]
    try:
        lane.submit("t", 99, 0, 1000)  # bigger than the cap on its own: sent alone
        until(lambda: conn.sent() == 1)
        futs = [lane.submit("t", p, 0, 100) for p in range(3)]
        gate.set()
        for f in futs:
            records(f)
        assert [m for _w, m in conn.fetch_requests] == [1000, 200, 100]
    finally:
        lane.close()


def test_cancelled_asks_are_dropped_unsent() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        lane.submit("t", 9, 0, 10)
        until(lambda: conn.sent() == 1)
        stopped = lane.submit("t", 0, 0, 10, cancelled=lambda: True)
        kept = lane.submit("t", 1, 0, 10)
        gate.set()
        assert records(kept) == b"t/1@0"
        with pytest.raises(ClusterError, match="copy stopped"):
            stopped.result(5)
        assert all(
            ("t", 0) not in {("t", p) for p, _o, _m in w.get("t", [])}
            for w, _m in conn.fetch_requests
        )
    finally:
        lane.close()


def test_a_cut_connection_fails_every_unanswered_ask_and_the_lane() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate, cut_at=0)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        first = lane.submit("t", 0, 0, 10)
        until(lambda: conn.sent() == 1)
        waiting = lane.submit("t", 1, 0, 10)
        gate.set()
        for f in (first, waiting):
            with pytest.raises(ClusterError, match="closed"):
                f.result(5)
        until(lambda: lane.broken)
        late = lane.submit("t", 2, 0, 10)
        with pytest.raises(ClusterError):
            late.result(0)  # answered at once: a broken lane takes nothing
    finally:
        lane.close()


def test_a_throttled_answer_holds_the_next_request_and_reaches_its_partitions() -> None:
    conn = ScriptedBroker(throttle_ms=30_000)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        reply = lane.submit("t", 0, 0, 10).result(5)
        assert reply is not None and reply.throttle_ms == 30_000
        lane.submit("t", 0, 0, 10)
        time.sleep(0.3)
        assert conn.sent() == 1  # the broker asked for nothing more within 30 s
    finally:
        lane.close()


def test_idle_time_counts_only_with_nothing_pending() -> None:
    gate = threading.Event()
    conn = ScriptedBroker(gate=gate)
    lane = FetchLane(conn)  # type: ignore[arg-type]
    try:
        fut = lane.submit("t", 0, 0, 10)
        until(lambda: conn.sent() == 1)
        assert lane.idle_for() == 0.0  # a request in flight
        gate.set()
        records(fut)
        until(lambda: lane.idle_for() > 0.0)
    finally:
        lane.close()


def test_closing_an_idle_lane_ends_both_of_its_threads() -> None:
    for _ in range(5):  # the sender and close() race for the receiver's end-of-work marker
        conn = ScriptedBroker()
        lane = FetchLane(conn)  # type: ignore[arg-type]
        records(lane.submit("t", 0, 0, 10))
        t0 = time.monotonic()
        lane.close()
        assert not lane._receiver.is_alive() and not lane._sender.is_alive()
        assert time.monotonic() - t0 < 4  # not the join's 5 s timeout
