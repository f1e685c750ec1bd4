"""The appender's sender over a stand-in writer: one append per partition in flight, the next
ones staged and handed to the writer one by one by the previous answer's check, the appender
held once ``STAGED_MAX`` are staged, nothing sent after a failure, and ``settle`` returning
only once the last answer was checked.

The stand-in answers only when the test says so; the real wire path is covered by the
integration tests and the strict Produce proxy.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from partsync._kafka import ProducedPartition
from partsync.copy.context import CopyContext, Stop
from partsync.copy.options import CopyOptions
from partsync.copy.producer import ProducerSession
from partsync.copy.sender import STAGED_MAX, Sender
from partsync.errors import AppendMismatchError, Cancelled, ClusterError, StoppedError
from partsync.io.writer import ProduceFuture
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch
from partsync.wire.filler import filler_batch


class HeldWriter:
    """Records submissions; answers none until told to."""

    def __init__(
        self,
        fail_at_once: ClusterError | None = None,
        hold_from: int | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self.submitted: list[tuple[Any, ProduceFuture]] = []
        self._fail_at_once = fail_at_once
        self._hold_from, self._gate = hold_from, gate  # submissions from this one wait
        self._lock = threading.Lock()

    def submit(self, topic: str, partition: int, data: Any, cancelled: Any) -> ProduceFuture:
        held = self._hold_from is not None and self.count() >= self._hold_from
        if held and self._gate is not None:
            self._gate.wait(5)
        fut = ProduceFuture()
        with self._lock:
            self.submitted.append((data, fut))
        if self._fail_at_once is not None:
            fut.set(error=self._fail_at_once)  # a broken writer answers before on_done
        return fut

    def count(self) -> int:
        with self._lock:
            return len(self.submitted)

    def answer(self, n: int, base: int) -> None:
        self.submitted[n][1].set(ProducedPartition(0, 0, base, 0, None))


def _ctx(stop: threading.Event | None = None) -> CopyContext:
    plan: Any = SimpleNamespace(topic="t", partition=0, local=SimpleNamespace(end=0))
    local: Any = SimpleNamespace(name="local")
    return CopyContext(plan, {}, local, CopyOptions(), LocalTopicRules(), None, stop)


def _sender(ctx: CopyContext, writer: HeldWriter) -> Sender:
    return Sender(ctx, writer, ProducerSession(producer_id=7, epoch=0, sequence=0))


BATCH = Batch.parse(memoryview(filler_batch(3, 0)))  # three records


def _send_in_thread(sender: Sender, at: int) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sender.send(BATCH, "a", at=at, filler=True)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


def _wait_until(cond: Any) -> None:
    deadline = time.monotonic() + 5
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cond()


def test_the_next_batch_goes_out_only_after_the_previous_answer_was_verified() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    assert writer.count() == 1  # nothing in flight: submitted at once
    sender.send(BATCH, "a", at=3, filler=True)  # staged: the appender goes on
    time.sleep(0.2)
    assert writer.count() == 1  # behind the unanswered append
    writer.answer(0, 0)  # verified: its check submits the staged batch
    assert writer.count() == 2
    settled: list[bool] = []
    s = threading.Thread(target=lambda: settled.append(sender.settle()), daemon=True)
    s.start()
    time.sleep(0.3)
    assert not settled  # the last append is unanswered
    writer.answer(1, 3)
    s.join(5)
    assert settled == [True] and ctx.error is None and ctx.confirmed_end == 6


def test_the_appender_waits_once_the_staged_batches_are_full_until_half_went() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    for i in range(1, STAGED_MAX):
        sender.send(BATCH, "a", at=3 * i, filler=True)  # staged without waiting
    t, errors = _send_in_thread(sender, 3 * STAGED_MAX)  # the one that fills them up
    time.sleep(0.3)
    assert t.is_alive() and writer.count() == 1
    for i in range(STAGED_MAX // 2 - 1):
        writer.answer(i, 3 * i)  # each check hands the next staged batch on
    time.sleep(0.3)
    assert t.is_alive()  # more than half are still staged
    writer.answer(STAGED_MAX // 2 - 1, 3 * (STAGED_MAX // 2 - 1))
    t.join(5)
    assert not t.is_alive() and not errors and writer.count() == STAGED_MAX // 2 + 1
    for i in range(STAGED_MAX // 2, STAGED_MAX + 1):
        writer.answer(i, 3 * i)
    assert sender.settle() and ctx.error is None and ctx.confirmed_end == 3 * (STAGED_MAX + 1)
    assert writer.count() == STAGED_MAX + 1


def test_nothing_more_is_sent_after_an_append_landed_elsewhere() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    sender.send(BATCH, "a", at=3, filler=True)
    sender.send(BATCH, "a", at=6, filler=True)
    writer.answer(0, 5)  # landed at 5, not 0: another writer
    assert isinstance(ctx.error, AppendMismatchError)
    assert writer.count() == 1  # the staged batches were never handed to the writer
    with pytest.raises(Stop):
        sender.send(BATCH, "a", at=9, filler=True)
    assert writer.count() == 1


def test_an_appender_waiting_for_room_stops_when_an_append_lands_elsewhere() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    for i in range(1, STAGED_MAX):
        sender.send(BATCH, "a", at=3 * i, filler=True)
    t, errors = _send_in_thread(sender, 3 * STAGED_MAX)
    time.sleep(0.2)
    writer.answer(0, 5)
    t.join(5)
    assert not t.is_alive() and errors and isinstance(errors[0], Stop)
    assert isinstance(ctx.error, AppendMismatchError) and writer.count() == 1


def test_settle_waits_through_a_batch_being_handed_to_the_writer() -> None:
    gate = threading.Event()
    ctx, writer = _ctx(), HeldWriter(hold_from=1, gate=gate)
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    t, errors = _send_in_thread(sender, 3)
    time.sleep(0.2)
    # The answer's check hands the staged batch to the writer, whose submit is slow.
    answering = threading.Thread(target=writer.answer, args=(0, 0), daemon=True)
    answering.start()
    t.join(5)
    assert not errors and not t.is_alive()  # the appender has moved on
    settled: list[bool] = []
    s = threading.Thread(target=lambda: settled.append(sender.settle()), daemon=True)
    s.start()
    time.sleep(0.3)
    assert not settled  # the handed-on batch is neither submitted nor answered yet
    gate.set()
    _wait_until(lambda: writer.count() == 2)
    time.sleep(0.2)
    assert not settled
    writer.answer(1, 3)
    s.join(5)
    assert settled == [True] and ctx.error is None and ctx.confirmed_end == 6


def test_a_broken_writer_fails_the_copy_before_settle_returns() -> None:
    ctx, writer = _ctx(), HeldWriter(fail_at_once=ClusterError("writer closed"))
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    sender.settle()
    assert isinstance(ctx.error, ClusterError) and ctx.unconfirmed_end == 3


def test_a_verified_answer_after_a_stop_request_hands_nothing_on() -> None:
    stop = threading.Event()
    ctx, writer = _ctx(stop), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    sender.send(BATCH, "a", at=3, filler=True)
    stop.set()
    writer.answer(0, 0)
    assert writer.count() == 1
    with pytest.raises(Stop):
        sender.send(BATCH, "a", at=6, filler=True)
    assert ctx.confirmed_end == 3 and isinstance(ctx.error, StoppedError)


def test_a_last_batch_dropped_unsent_fails_the_copy() -> None:
    stop = threading.Event()
    ctx, writer = _ctx(stop), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    stop.set()  # the writer drops it unsent, as it does once a stop was requested
    writer.submitted[0][1].set(error=Cancelled("partition stopped; batch not sent"))
    assert sender.settle()
    # A stop dropped it after the appender's last look: the copy did not end cleanly.
    assert isinstance(ctx.error, StoppedError) and ctx.confirmed_end == 0


def test_wait_confirmed_returns_only_once_the_append_is_verified() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    done = threading.Event()
    t = threading.Thread(target=lambda: (sender.wait_confirmed(), done.set()), daemon=True)
    t.start()
    time.sleep(0.3)
    assert not done.is_set()
    writer.answer(0, 0)
    _wait_until(done.is_set)
    assert ctx.confirmed_end == 3


def test_staged_batches_dropped_by_a_stop_during_settle_fail_the_copy() -> None:
    """The appender staged its last batches and settles; a stop request drops them when the
    append in flight is answered. The copy must end stopped (its producer session's sequence
    counts batches that were never sent), not clean."""
    stop = threading.Event()
    ctx, writer = _ctx(stop), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send(BATCH, "a", at=0, filler=True)
    sender.send(BATCH, "a", at=3, filler=True)  # staged
    settled: list[bool] = []
    s = threading.Thread(target=lambda: settled.append(sender.settle()), daemon=True)
    s.start()
    time.sleep(0.2)
    stop.set()
    writer.answer(0, 0)
    s.join(5)
    assert settled == [True] and writer.count() == 1
    assert isinstance(ctx.error, StoppedError) and ctx.confirmed_end == 3


def test_a_problem_found_after_staging_still_appends_what_was_staged_before_it() -> None:
    """The appender finds a disagreement at a later batch while earlier ones are staged: those
    are the source's data, in order, and still go (one at a time, each verified)."""
    from partsync.errors import DivergenceError

    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    for i in range(3):
        sender.send(BATCH, "a", at=3 * i, filler=True)
    ctx.fail(DivergenceError("sources disagree"))  # as the appender does, then stops
    writer.answer(0, 0)
    writer.answer(1, 3)
    writer.answer(2, 6)
    assert sender.settle() and writer.count() == 3 and ctx.confirmed_end == 9
    assert isinstance(ctx.error, DivergenceError)


def _source_batches(n: int) -> list[Batch]:
    """``n`` source batches of three records each, at offsets 0, 3, 6, ..."""
    from tests.unit.diffkit import make_batch, records

    return [
        Batch.parse(memoryview(make_batch(records(3, seed=i), base_offset=3 * i))) for i in range(n)
    ]


def test_send_all_stages_a_whole_answer_and_the_checks_send_it_one_by_one() -> None:
    """A fetch answer's plain batches are staged at once (no wait for room, however many):
    one append in flight, each next one submitted by the previous answer's check, each with
    the next sequence of the session's producer."""
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    batches = _source_batches(3 * STAGED_MAX)
    sender.send_all(batches, "a")  # returns at once: nothing waits for room
    assert writer.count() == 1
    for i in range(len(batches)):
        assert writer.count() == i + 1  # the next goes only once this one is verified
        head = bytes(writer.submitted[i][0].head)
        rewritten = Batch.parse(memoryview(head + bytes(writer.submitted[i][0].tail)))
        assert (rewritten.producer_id, rewritten.base_sequence) == (7, 3 * i)
        assert rewritten.crc_ok()
        writer.answer(i, 3 * i)
    assert sender.settle() and ctx.error is None and ctx.confirmed_end == 3 * len(batches)
    assert sender.sequence == 3 * len(batches) and ctx.batches == len(batches)


def test_send_all_behind_an_append_in_flight_waits_for_its_answer() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    batches = _source_batches(4)
    sender.send_all(batches[:2], "a")
    sender.send_all(batches[2:], "b")  # staged behind the first answer's batches
    assert writer.count() == 1
    for i in range(4):
        writer.answer(i, 3 * i)
    assert sender.settle() and writer.count() == 4 and ctx.confirmed_end == 12
    assert ctx.batches_by_source == {"a": 2, "b": 2}


def test_a_wrong_offset_drops_everything_send_all_staged() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send_all(_source_batches(5), "a")
    writer.answer(0, 0)
    writer.answer(1, 4)  # landed at 4, not 3: another writer
    assert isinstance(ctx.error, AppendMismatchError) and ctx.append_failed.is_set()
    assert writer.count() == 2 and ctx.confirmed_end == 3


def test_check_due_fails_the_copy_once_the_append_in_flight_is_unanswered_too_long() -> None:
    """The appender that staged a whole answer waits for the next fetch answer, not for room:
    it is there that an append with no answer must fail the copy."""
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.send_all(_source_batches(3), "a")
    sender.check_due()  # just sent: nothing to say
    assert ctx.error is None
    writer.submitted[0][1].sent_at = time.monotonic() - sender.answer_timeout - 1
    with pytest.raises(ClusterError, match="no Produce answer for batch 0..2"):
        sender.check_due()
    assert ctx.append_failed.is_set() and isinstance(ctx.error, ClusterError)
    assert ctx.unconfirmed_end == 3  # sent: the broker may have appended it
    writer.answer(0, 0)  # a late answer sends nothing staged behind it
    assert writer.count() == 1


def test_check_due_is_quiet_with_nothing_in_flight() -> None:
    ctx, writer = _ctx(), HeldWriter()
    sender = _sender(ctx, writer)
    sender.check_due()
    sender.send_all(_source_batches(1), "a")
    writer.submitted[0][1].sent_at = time.monotonic() - sender.answer_timeout - 1
    writer.answer(0, 0)  # answered: late, but answered
    sender.check_due()
    assert ctx.error is None and ctx.confirmed_end == 3
