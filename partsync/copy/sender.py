"""The sender of a partition's appends and the check of every answer: one append in flight,
the next batches staged behind it, and each answer must put the batch at exactly the source's
offset.

Each batch is rewritten shallowly and submitted to the writer this process shares per local
broker, which packs many partitions' batches into one Produce request. The next batch goes out
only after the previous one's answer was verified; that check runs in the writer's receiving
thread as each answer arrives (no thread per partition waits for answers). An error code, a
fenced epoch or a base offset other than the source's stops the partition at once. The appender
(``copy.appender``), the transaction replay (``copy.txn_replay``) and the bulk copier
(``copy.bulk``) all send through it.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partsync.copy.context import CopyContext
from partsync.copy.producer import ProducerSession
from partsync.errors import (
    AppendMismatchError,
    Cancelled,
    ClusterError,
    FencedError,
    PartsyncError,
    StoppedError,
    UnsafeError,
)
from partsync.io.broker_errors import (
    FENCED_CODES,
    REFUSED_RECORD_CODES,
    UNKNOWN_OUTCOME_CODES,
    broker_error,
    error_name,
)
from partsync.io.writer import ProduceFuture
from partsync.wire.batch import Batch, rewrite_parts

__all__ = ["STAGED_MAX", "Sender"]

log = logging.getLogger(__name__)

# Batches rewritten and waiting for the partition's append in flight (views, no copies; their
# bytes are held in the copy's budget already).
STAGED_MAX = 8


@dataclass(frozen=True, slots=True)
class _Sent:
    base: int
    next_offset: int
    size: int
    source: str
    future: ProduceFuture
    at: float  # time.monotonic() when submitted
    filler: bool = False  # a filler batch of a bootstrap: not the source's data, not counted
    holes: int = 0  # hole records in it (--compaction-holes fill)


@dataclass(frozen=True, slots=True)
class _Next:
    """A rewritten batch waiting for the partition's append in flight to be verified."""

    data: Any
    base: int
    next_offset: int
    size: int
    source: str
    filler: bool
    holes: int


class Sender:
    """Sends a partition's appends, one in flight. Each batch is rewritten with the session's
    producer identity and next sequence. While an append is in flight the next batches wait
    here, staged in order; the answer's check (run by the writer as the answer arrives,
    ``_answered``) submits the first of them only after the previous batch landed at the
    source's offset, and drops them all after a failure or a stop (the appender then sees the
    copy stopping). Submitting from the answer's check means the partitions answered together
    are in the writer together again when it sends its next request. The appender stages up
    to ``STAGED_MAX`` batches and, when full, waits until half of them went: one wake-up per
    few batches, not one per batch."""

    def __init__(self, ctx: CopyContext, writer: Any, session: ProducerSession) -> None:
        self.ctx, self.writer = ctx, writer
        self.pid, self.epoch, self.sequence = session.producer_id, session.epoch, session.sequence
        self.answer_timeout = ctx.opts.produce_timeout_ms / 1000 + 10
        self._cv = threading.Condition()
        self.outstanding: _Sent | None = None  # the append in flight (or the last one sent)
        self._checked: _Sent | None = None  # the last append whose answer's check has ended
        self._in_flight = False
        self._staged: collections.deque[_Next] = collections.deque()

    def _drop_unsent(self) -> bool:
        """Batches submitted but not yet sent are dropped once an append failed or went to the
        wrong offset (stop writing at once) or a stop was requested. A refusal of a *later*
        batch does not drop them: what came before it is still the source's data, in order."""
        return self.ctx.append_failed.is_set() or self.ctx.external_stop.is_set()

    def _no_answer(self, sent: _Sent) -> PartsyncError:
        self.ctx.unconfirmed_end = sent.next_offset  # sent; the broker may have appended it
        return ClusterError(
            f"no Produce answer for batch {sent.base}..{sent.next_offset - 1} within "
            f"{self.answer_timeout:.0f}s",
            cluster=self.ctx.local.name,
            topic=self.ctx.topic,
            partition=self.ctx.partition,
            offset=sent.base,
        )

    def _overdue(self, sent: _Sent) -> bool:
        """No answer in time. The clock starts when the writer sent the request (a batch may
        first wait for the writer's request in flight), or, not sent yet, at twice the limit."""
        if sent.future.done():
            return False
        t0 = sent.future.sent_at
        if t0 is None:
            return time.monotonic() - sent.at > 2 * self.answer_timeout
        return time.monotonic() - t0 > self.answer_timeout

    def _has_room(self) -> bool:
        """The appender waiting with ``STAGED_MAX`` staged may stage more (half of them went).
        Caller holds the condition."""
        return len(self._staged) <= STAGED_MAX // 2

    def _wait(self, done: Callable[[], bool]) -> None:
        """Wait (holding the condition) until ``done()``, the copy stops, or the append in
        flight is unanswered for too long."""
        while not done():
            self._cv.wait(0.5)
            self.ctx.check_running()
            sent = self.outstanding
            if not done() and sent is not None and self._overdue(sent):
                err = self._no_answer(sent)
                self.ctx.fail(err)  # before append_failed: what that drops is not "a stop"
                self.ctx.append_failed.set()
                raise err
        self.ctx.check_running()  # a staged batch dropped because the copy stopped

    def send(
        self,
        b: Batch,
        source: str,
        *,
        at: int | None = None,
        filler: bool = False,
        size: int | None = None,
        holes: int = 0,
        wait: bool = True,
    ) -> None:
        """Append ``b`` (a filler goes ``at`` the given offset and is not counted as copied;
        a batch re-encoded with ``holes`` hole records counts as the ``size`` fetched).
        Without ``wait`` any number of batches may be staged (a caller that serves many
        partitions from one thread, whose byte budget bounds them)."""
        self.ctx.check_running()
        data = rewrite_parts(b, self.pid, self.epoch, self.sequence)  # views, not copies
        self.sequence = (self.sequence + b.record_count) & 0x7FFFFFFF
        base = b.base_offset if at is None else at
        size = 0 if filler else b.size if size is None else size  # fillers hold no budget
        nxt = _Next(data, base, base + b.last_offset_delta + 1, size, source, filler, holes)
        with self._cv:
            if self._in_flight:
                self._staged.append(nxt)  # the answers' checks submit it in turn
                if wait and len(self._staged) >= STAGED_MAX:
                    # Woken by every answer's check (``_submit`` or ``_answered`` notify).
                    try:
                        self._wait(self._has_room)
                    except BaseException:
                        self._staged.clear()  # given up: nobody may send them later
                        raise
                return
            self._in_flight = True
        self._submit(nxt)

    def _submit(self, nxt: _Next) -> None:
        """Submit to the writer (never while holding the condition: the writer may run an
        answer's check, which takes it, while holding its own lock)."""
        fut = self.writer.submit(self.ctx.topic, self.ctx.partition, nxt.data, self._drop_unsent)
        sent = _Sent(
            nxt.base,
            nxt.next_offset,
            nxt.size,
            nxt.source,
            fut,
            time.monotonic(),
            nxt.filler,
            nxt.holes,
        )
        with self._cv:
            self.outstanding = sent
            # Only the appender's wait for room (``send``) waits on a submit: wake it once
            # there is room, not at every batch (a futile wake-up costs a thread switch).
            if self._has_room():
                self._cv.notify_all()
        fut.on_done(lambda f: self._answered(sent, f))

    def _answered(self, sent: _Sent, fut: ProduceFuture) -> None:
        handed_on = False  # the staged batch went to the writer: its own check ends the wait
        try:
            outcome = _on_answer(self.ctx, sent, fut)
            with self._cv:
                nxt = None
                # A problem the appender found later (a disagreement, a gap, a refusal) does
                # not drop what it staged before it: that is still the source's data, in
                # order. Only a failed append or a stop request does.
                if outcome is _Outcome.VERIFIED and not self._drop_unsent():
                    nxt = self._staged.popleft() if self._staged else None
                else:
                    dropped = bool(self._staged)
                    self._staged.clear()  # never sent: a failure or a stop
                    if dropped and self.ctx.error is None:
                        # A stop request dropped staged batches the appender will never look
                        # at again: the copy did not end cleanly (and the session's sequence
                        # counts them, so it must not be reused).
                        self.ctx.fail(StoppedError("stopped on request before catching up"))
                if nxt is None:
                    self._in_flight = outcome is _Outcome.FAILED  # failed: nothing more goes
            if nxt is not None:
                try:
                    self._submit(nxt)
                    handed_on = True
                except Exception as e:  # a bug: the batch is lost, so the copy must fail
                    log.exception("submitting the next append failed")
                    err = PartsyncError(
                        f"submitting an append failed: {e!r}",
                        cluster=self.ctx.local.name,
                        offset=nxt.base,
                    )
                    self.ctx.fail(err)
                    self.ctx.append_failed.set()
        finally:
            if not handed_on:
                with self._cv:
                    # Only for the latest append: once ``_in_flight`` was cleared above, the
                    # appender may have sent (and had checked) a newer one meanwhile.
                    if self.outstanding is sent:
                        self._checked = sent
                    self._cv.notify_all()

    def quiet(self) -> bool:
        """Nothing in flight and nothing staged: the last append submitted has been checked."""
        with self._cv:
            sent = self.outstanding
            return not self._staged and (sent is None or self._checked is sent)

    def settle(self) -> bool:
        """Wait until the last append submitted has been answered and checked; False (the copy
        failed) if no answer came in time, and then nothing staged is sent after it."""
        with self._cv:
            while True:
                sent = self.outstanding
                if sent is None or self._checked is sent:
                    return True
                if self._overdue(sent):
                    if self.ctx.error is None:
                        self.ctx.fail(self._no_answer(sent))
                    # A late answer must not send what waits behind it: this copy has ended.
                    self.ctx.append_failed.set()
                    self._staged.clear()
                    return False
                self._cv.wait(0.5)

    def wait_confirmed(self) -> None:
        """Return once every append sent so far was verified."""
        with self._cv:
            self._wait(lambda: not self._in_flight)


class _Outcome(enum.Enum):
    VERIFIED = "verified"  # landed at the source's offset
    DROPPED = "dropped"  # never sent: the partition had stopped
    FAILED = "failed"  # the copy failed (recorded in the context)


def _on_answer(ctx: CopyContext, sent: _Sent, fut: ProduceFuture) -> _Outcome:
    """Check one append's answer (run by the writer as it arrives)."""
    try:
        if not _check_answer(ctx, sent, fut):
            if ctx.error is None and ctx.external_stop.is_set():
                # A stop request dropped it after the appender's last look.
                ctx.fail(StoppedError("stopped on request before catching up"))
            return _Outcome.DROPPED
    except PartsyncError as e:
        # Fail before anything else: the appender, waiting to send, must see the copy stopping.
        ctx.append_failed.set()
        ctx.fail(e)
        return _Outcome.FAILED
    except Exception as e:
        ctx.append_failed.set()
        log.exception("checking an append's answer failed")
        ctx.fail(PartsyncError(f"verifier crashed: {e!r}", cluster=ctx.local.name))
        return _Outcome.FAILED
    return _Outcome.VERIFIED


def _check_answer(ctx: CopyContext, sent: _Sent, fut: ProduceFuture) -> bool:
    """True if the batch landed at the source's offset, False if it was dropped unsent; raises
    what went wrong otherwise."""
    where: dict[str, Any] = {
        "cluster": ctx.local.name,
        "topic": ctx.topic,
        "partition": ctx.partition,
    }
    base, nxt = sent.base, sent.next_offset
    try:
        res = fut.outcome()
    except Cancelled:
        ctx.budget.release(sent.size)
        return False  # dropped unsent because the partition had already stopped
    except PartsyncError as e:
        if e.topic is None:
            e.topic, e.partition, e.offset = ctx.topic, ctx.partition, base
        ctx.unconfirmed_end = nxt  # sent; the broker may have appended it
        raise
    if res is None:
        raise ClusterError("Produce response lacks the partition", offset=base, **where)
    if res.error_code in FENCED_CODES:
        raise FencedError(
            f"append of batch {base}..{nxt - 1} was refused: another partsync writer "
            "of this partition has a newer producer epoch; stopped writing it",
            offset=base,
            **where,
        )
    detail = f" ({res.error_message})" if res.error_message else ""
    if res.error_code in REFUSED_RECORD_CODES:
        # Nothing landed (Kafka validates the whole batch before appending it), and
        # sending it again would be refused again: the local topic's configs must change.
        raise UnsafeError(
            f"the local broker refused batch {base}..{nxt - 1} from {sent.source} with "
            f"{error_name(res.error_code)}{detail}: check the local topic's configs "
            "(message.timestamp.*, cleanup.policy, max.message.bytes)",
            offset=base,
            **where,
        )
    if res.error_code in UNKNOWN_OUTCOME_CODES:
        ctx.unconfirmed_end = nxt
    if res.error_code:
        raise broker_error(
            res.error_code,
            f"append of batch {base}..{nxt - 1} failed{detail}",
            offset=base,
            **where,
        )
    if res.base_offset != base:
        raise AppendMismatchError(
            f"batch from {sent.source} with base offset {base} landed at offset "
            f"{res.base_offset}: another writer or a changed log; stopped writing",
            offset=base,
            **where,
        )
    if sent.filler:
        ctx.confirmed_end = nxt
    else:
        ctx.confirmed(sent.source, sent.size, nxt)
        ctx.batches_reencoded += sent.holes > 0
    ctx.holes_filled += sent.holes
    ctx.budget.release(sent.size)
    return True
