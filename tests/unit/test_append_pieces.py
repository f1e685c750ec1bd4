"""The appender's walk over pieces: where a source takes over, its copy of the batch below must
equal what was appended last, also when that batch arrived in an earlier, empty piece.

A chunk's first piece can lie wholly inside one big batch (tiny records in the batch, bytes per
offset learned from big ones): that piece brings only the batch, as its boundary, and the next
piece may start past the batch (``SourceWork.resume_at``) and bring no boundary of its own.
Whether a real run takes that path depends on which fetch is sent first, so it is pinned here
with hand-cut pieces; the stand-in writer answers every append where the batch says.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from partsync._kafka import ProducedPartition
from partsync.copy.appender import append_in_order
from partsync.copy.context import CopyContext
from partsync.copy.fetcher import END, Piece
from partsync.copy.options import CopyOptions
from partsync.copy.producer import ProducerSession
from partsync.errors import DivergenceError
from partsync.io.writer import ProduceFuture
from partsync.plan.comparator import Chunk
from partsync.plan.topic_rules import LocalTopicRules
from partsync.wire.batch import Batch
from tests.unit.diffkit import make_batch, records


class InstantWriter:
    """Answers every append at once, at the end of the log it keeps (as a broker would)."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.end = 0

    def submit(self, topic: str, partition: int, data: Any, cancelled: Any) -> ProduceFuture:
        b = Batch.parse(memoryview(bytes(data.head) + bytes(data.tail)))
        self.bases.append(self.end)
        fut = ProduceFuture()
        fut.set(ProducedPartition(0, 0, self.end, 0, None))
        self.end += b.last_offset_delta + 1
        return fut


def _batch(base: int, count: int, seed: int) -> Batch:
    return Batch.parse(memoryview(make_batch(records(count, seed=seed), base_offset=base)))


def _piece(
    chunk: Chunk, no: int, start: int, end: int, *items: object, boundary: Batch | None = None
) -> Piece:
    p = Piece(chunk, no, start, end, start == chunk.start, boundary=boundary)
    for it in items:
        p.items.put(it)
    p.items.put(END)
    return p


def _run(b_of_b: Batch) -> tuple[CopyContext, InstantWriter]:
    """a serves [0, 10): batches 0..4 and B = 5..14. b serves [10, 30): its first piece
    [10, 12) is wholly inside B (only b's B, as the boundary), its second [12, 30) starts past
    B and brings 15..19 with no boundary."""
    a_b = _batch(5, 10, 1)
    c0, c1 = Chunk(0, 10, "a"), Chunk(10, 30, "b")
    pieces = [
        _piece(c0, 0, 0, 10, [_batch(0, 5, 0), a_b]),
        _piece(c1, 1, 10, 12, boundary=b_of_b),
        _piece(c1, 1, 12, 30, [_batch(15, 5, 0)]),
    ]
    writer = InstantWriter()
    plan: Any = SimpleNamespace(
        topic="t", partition=0, local=SimpleNamespace(end=0), bootstrap=False, copy_start=0
    )
    local: Any = SimpleNamespace(name="local", shared_writer=lambda *a, **k: writer)
    ctx = CopyContext(plan, {}, local, CopyOptions(), LocalTopicRules(), None, None)
    append_in_order(ctx, pieces, None, ProducerSession(producer_id=7, epoch=0, sequence=0))
    return ctx, writer


def test_a_disagreeing_batch_that_filled_a_whole_piece_is_checked_at_the_next_one() -> None:
    ctx, writer = _run(_batch(5, 10, 2))  # b's B holds other records than a's
    assert isinstance(ctx.error, DivergenceError), ctx.error
    assert ctx.error.cluster == "b" and ctx.error.offset == 5
    assert writer.bases == [0, 5]  # a's batches, and nothing of b's after them


def test_an_agreeing_batch_that_filled_a_whole_piece_lets_the_next_one_go_on() -> None:
    ctx, writer = _run(_batch(5, 10, 1))
    assert ctx.error is None
    assert writer.bases == [0, 5, 15] and ctx.confirmed_end == 20
