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
    are in the writer together again when it sends its next request. A fetch answer's plain
    batches are staged all at once (``send_all``: the copy's byte budget bounds them); batches
    sent one by one (transactions, fillers, hole records) stage up to ``STAGED_MAX`` and then
    wait until half of them went: one wake-up per few batches, not one per batch."""

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
        return _dropping(self.ctx)

    def _has_room(self) -> bool:
        """Half of the ``STAGED_MAX`` staged went (caller holds the condition)."""
        return len(self._staged) <= STAGED_MAX // 2

    def _wait(self, done: Callable[[], bool]) -> None:
        """Wait (holding the condition) until ``done()``, the copy stops, or the append in
        flight is unanswered for too long."""
        while not done():
            self._cv.wait(0.5)
            self.ctx.check_running()
            if not done():
                self._fail_overdue()
        self.ctx.check_running()  # a staged batch dropped because the copy stopped

    def _fail_overdue(self) -> None:
        """Fail the copy (and raise) if the append in flight has had no answer in time.
        Caller holds the condition."""
        sent = self.outstanding
        if self._in_flight and sent is not None and _overdue(sent, self.answer_timeout):
            err = _no_answer(self.ctx, sent, self.answer_timeout)
            self.ctx.fail(err)  # before append_failed: what that drops is not "a stop"
            self.ctx.append_failed.set()
            raise err

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
        self._stage([nxt], wait)

    def send_all(self, batches: list[Batch], source: str) -> None:
        """Append the source's ``batches`` (checked by the appender, in order, none a filler
        or re-encoded), staged at once without waiting for room (the copy's byte budget holds
        their bytes until each is verified): one lock and no thread switch per batch.
        ``check_due`` watches the append in flight while the appender waits for more."""
        self.ctx.check_running()
        seq, pid, epoch = self.sequence, self.pid, self.epoch
        staged = []
        for b in batches:
            data = rewrite_parts(b, pid, epoch, seq)  # views, not copies
            seq = (seq + b.record_count) & 0x7FFFFFFF
            staged.append(_Next(data, b.base_offset, b.next_offset, b.size, source, False, 0))
        self.sequence = seq
        self._stage(staged, wait=False)

    def _stage(self, staged: list[_Next], wait: bool) -> None:
        """Submit the first of ``staged`` if nothing is in flight, and stage the rest behind
        it for the answers' checks to submit in turn; with ``wait``, wait for room once
        ``STAGED_MAX`` are staged."""
        with self._cv:
            if self._in_flight:
                self._staged.extend(staged)
                if wait and len(self._staged) >= STAGED_MAX:
                    # Woken by every answer's check (``_submit`` or ``_answered`` notify).
                    try:
                        self._wait(self._has_room)
                    except BaseException:
                        self._staged.clear()  # given up: nobody may send them later
                        raise
                return
            self._in_flight = True
            self._staged.extend(staged[1:])
        self._submit(staged[0])

    def check_due(self) -> None:
        """Fail the copy if the append in flight is unanswered for too long (the appender, idle
        between fetch answers with batches staged by ``send_all``, calls this)."""
        with self._cv:
            self._fail_overdue()

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
                nxt = _next_staged(self.ctx, outcome, self._staged)
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
                if _overdue(sent, self.answer_timeout):
                    if self.ctx.error is None:
                        self.ctx.fail(_no_answer(self.ctx, sent, self.answer_timeout))
                    # A late answer must not send what waits behind it: this copy has ended.
                    self.ctx.append_failed.set()
                    self._staged.clear()
                    return False
                self._cv.wait(0.5)

    def wait_confirmed(self) -> None:
        """Return once every append sent so far was verified."""
        with self._cv:
            self._wait(lambda: not self._in_flight)


def _dropping(ctx: CopyContext) -> bool:
    """Batches submitted or staged but not yet sent are dropped once an append failed or went
    to the wrong offset (stop writing at once) or a stop was requested. A problem the appender
    found later (a disagreement, a gap, a refusal) does not drop them: what came before it is
    still the source's data, in order."""
    return ctx.append_failed.is_set() or ctx.external_stop.is_set()


def _next_staged(
    ctx: CopyContext, outcome: _Outcome, staged: collections.deque[_Next]
) -> _Next | None:
    """The staged batch to submit once an answer's check gave ``outcome``: the first, unless
    the batches are being dropped (``_dropping``), and then all of them are."""
    if outcome is _Outcome.VERIFIED and not _dropping(ctx):
        return staged.popleft() if staged else None
    if staged and ctx.error is None:
        # A stop request dropped staged batches the appender will never look at again: the
        # copy did not end cleanly (and the session's sequence counts them, so it must not be
        # reused).
        ctx.fail(StoppedError("stopped on request before catching up"))
    staged.clear()  # never sent: a failure or a stop
    return None


def _overdue(sent: _Sent, limit: float) -> bool:
    """No answer within ``limit`` seconds. The clock starts when the writer sent the request (a
    batch may first wait for the writer's request in flight), or, not sent yet, at twice it."""
    if sent.future.done():
        return False
    t0 = sent.future.sent_at
    if t0 is None:
        return time.monotonic() - sent.at > 2 * limit
    return time.monotonic() - t0 > limit


def _no_answer(ctx: CopyContext, sent: _Sent, limit: float) -> PartsyncError:
    ctx.unconfirmed_end = sent.next_offset  # sent; the broker may have appended it
    return ClusterError(
        f"no Produce answer for batch {sent.base}..{sent.next_offset - 1} within {limit:.0f}s",
        cluster=ctx.local.name,
        topic=ctx.topic,
        partition=ctx.partition,
        offset=sent.base,
    )


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
