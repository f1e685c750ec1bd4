"""The ownership lease of a group member (``io.group_lease``): what a heartbeat reports as
owned shrinks only after the writers were stopped and waited for, and an answer that arrives
after the lease it would give ran out grants nothing."""

from __future__ import annotations

import threading
import time

import pytest

from partsync.io.group_lease import Lease, LeasedStop, TopicPartition

PARTS: list[TopicPartition] = [("t", 0), ("t", 1)]


class _Listener:
    def __init__(self) -> None:
        self.lease: Lease | None = None
        self.revokes: list[tuple[list[TopicPartition], bool, list[TopicPartition]]] = []
        self.assigned_parts: list[TopicPartition] = []

    def assigned(self, parts: list[TopicPartition], generation: int) -> None:
        self.assigned_parts = parts

    def revoke(self, parts: list[TopicPartition], wait: bool) -> None:
        assert self.lease is not None
        # What the member would report as owned while the writers are being stopped.
        self.revokes.append((list(parts), wait, self.lease.owned))


def _lease(session_ms: int = 10_000) -> tuple[Lease, _Listener, threading.Event]:
    listener = _Listener()
    stopping = threading.Event()
    lease = Lease("g", listener, session_ms, stopping, on_lost=lambda: None)
    listener.lease = lease
    return lease, listener, stopping


def test_an_answer_that_comes_after_its_lease_ran_out_grants_nothing() -> None:
    lease, _listener, _stopping = _lease(10_000)  # 8 s lease
    assert lease.grant(PARTS, sent=time.monotonic())
    assert not lease.grant([("t", 2)], sent=time.monotonic() - 9.0)
    assert lease.owned == PARTS


def test_partitions_leave_the_owned_set_only_after_their_writers_were_stopped() -> None:
    lease, listener, _stopping = _lease()
    lease.grant(PARTS, sent=time.monotonic())
    lease.revoke([("t", 1)], wait=True)
    assert listener.revokes == [([("t", 1)], True, PARTS)]  # still reported while stopping
    assert lease.owned == [("t", 0)]


def test_a_lease_that_runs_out_stops_the_writers_but_keeps_reporting_them() -> None:
    lease, listener, stopping = _lease(250)  # a 0.2 s lease, never renewed
    lease.start()
    try:
        lease.grant(PARTS, sent=time.monotonic())
        assert lease.lost.wait(10), "the watchdog never noticed the lease ran out"
        assert listener.revokes[0][:2] == (PARTS, False)  # writers told to stop, not waited for
        assert lease.owned == PARTS  # nothing reported released while appends may be in flight
        lease.revoke_all(wait=True)  # the member's thread: wait for the writers, then let go
        assert listener.revokes[-1][:2] == (PARTS, True)
        assert lease.owned == []
    finally:
        stopping.set()
        lease.join(5)


def test_the_lease_is_never_longer_than_what_the_broker_allows() -> None:
    lease, _listener, _stopping = _lease(10_000)
    assert lease.span == pytest.approx(8.0)
    lease.shorten(6_000)
    assert lease.span == pytest.approx(4.8)
    lease.shorten(45_000)  # a longer limit never lengthens it
    assert lease.span == pytest.approx(4.8)


def test_a_leased_stop_reads_as_set_once_the_lease_ran_out_without_the_watchdog() -> None:
    """A paused process resumes every thread at once: the check made right before a Produce
    request is built must see the lease's end itself, not wait for the watchdog (not started
    here) to stop the writers."""
    lease, listener, _stopping = _lease(10_000)  # 8 s lease
    stop = LeasedStop(lease)
    assert lease.grant(PARTS, sent=time.monotonic())
    assert not stop.is_set()
    lease.renew(sent=time.monotonic() - 8.5)  # the last heartbeat that succeeded: 8.5 s ago
    assert stop.is_set() and listener.revokes == []
    lease.renew(sent=time.monotonic())
    assert not stop.is_set()
    stop.set()  # a revoke or a stop request
    assert stop.is_set() and stop.wait(0)
