"""Pieces: chunks cut into byte-sized ranges as fetchers claim them (pure, no sockets)."""

from __future__ import annotations

import itertools
import threading

import pytest

from partsync.copy.pieces import MIN_PIECE_BYTES, Piece, Pieces, piece_bytes
from partsync.plan.comparator import Chunk

NEVER = threading.Event()


def _pieces(chunks: tuple[Chunk, ...], connections: int = 4, in_flight: int = 4) -> Pieces:
    return Pieces(
        chunks,
        connections=connections,
        in_flight=in_flight,
        fetch_bytes=8 << 20,
        probe_bytes=1 << 20,
    )


def _no_stop() -> None:
    pass


def test_the_first_piece_is_a_probe_and_nothing_is_cut_until_its_answer() -> None:
    pieces = _pieces((Chunk(100, 100_100, "a"),))
    work = pieces.sources["a"]
    probe = work.claim(0, wait=False, cancel=NEVER)
    assert probe is not None and probe.end is None and probe.first and probe.start == 100
    # Without the bytes per offset nothing else can be cut; a fetcher with answers to read is
    # told so at once instead of waiting.
    assert work.claim(0, wait=False, cancel=NEVER) is None
    work.learn(1000 * 100, 1000, 10)  # 100 bytes per offset, 10 KB batches
    work.probe_ended(probe, 1100)
    work.finished(0, probe, 1100)
    nxt = work.claim(0, wait=False, cancel=NEVER)
    assert nxt is not None and nxt.start == 1100 and nxt.end is not None and not nxt.first
    # 99,000 offsets x 100 bytes spread over 16 fetches in flight: ~619 KB, ~6190 offsets.
    assert nxt.end - nxt.start == 99_000 * 100 // 16 // 100


def test_pieces_cover_the_chunks_exactly_in_offset_order() -> None:
    chunks = (Chunk(0, 50_000, "a"), Chunk(50_000, 90_000, "b"), Chunk(90_000, 200_000, "a"))
    pieces = _pieces(chunks, connections=1)
    claimed: list[Piece] = []
    for src in ("a", "b"):
        work = pieces.sources[src]
        first = work.claim(0, wait=False, cancel=NEVER)
        assert first is not None
        work.learn(500 * 40, 500, 5)
        work.probe_ended(first, first.start + 500)
        claimed.append(first)
        while (p := work.claim(0, wait=False, cancel=NEVER)) is not None:
            claimed.append(p)
    walked = list(pieces.in_order(_no_stop))
    assert [p.start for p in walked] == sorted(p.start for p in claimed)
    # Contiguous, no overlap, each within its chunk, and each chunk's first piece marked.
    for a, b in itertools.pairwise(walked):
        assert a.end == b.start
    assert walked[0].start == 0 and walked[-1].end == 200_000
    for p in walked:
        assert p.end is not None and p.chunk.start <= p.start < p.end <= p.chunk.end
        assert p.first == (p.start == p.chunk.start)
        assert p.chunk.source == ("b" if 50_000 <= p.start < 90_000 else "a")


def test_a_fetcher_takes_another_piece_only_while_no_other_has_fewer_open() -> None:
    pieces = _pieces((Chunk(0, 1_000_000, "a"),), connections=3)
    work = pieces.sources["a"]
    probe = work.claim(0, wait=False, cancel=NEVER)
    assert probe is not None
    work.learn(1000 * 100, 1000, 100)
    work.probe_ended(probe, 1000)
    # Fetcher 0 still has the probe open: 1 and 2 (none open) come first.
    assert work.claim(0, wait=False, cancel=NEVER) is None
    p1 = work.claim(1, wait=False, cancel=NEVER)
    assert p1 is not None
    assert work.claim(0, wait=False, cancel=NEVER) is None
    assert work.claim(2, wait=False, cancel=NEVER) is not None
    assert work.claim(0, wait=False, cancel=NEVER) is not None  # everyone has one: a second
    assert work.claim(1, wait=False, cancel=NEVER) is not None
    work.retire(2)  # a stopped fetcher does not hold the others back (it has 1 open)
    assert work.claim(0, wait=False, cancel=NEVER) is not None  # 3 open against 1's 2
    assert work.claim(0, wait=False, cancel=NEVER) is None
    work.finished(1, p1, p1.end or 0)
    assert work.claim(1, wait=False, cancel=NEVER) is not None  # 1 back to 2 open
    assert work.claim(0, wait=False, cancel=NEVER) is None
    # A fetcher with nothing in flight (it claims with wait) never waits for fairness.
    assert work.claim(0, wait=True, cancel=NEVER) is not None


def test_a_piece_starts_where_the_one_before_ended_once_that_is_known() -> None:
    pieces = _pieces((Chunk(0, 1_000_000, "a"),), connections=1)
    work = pieces.sources["a"]
    probe = work.claim(0, wait=False, cancel=NEVER)
    assert probe is not None
    work.learn(1000 * 100, 1000, 100)
    work.probe_ended(probe, 1000)
    second = work.claim(0, wait=False, cancel=NEVER)
    third = work.claim(0, wait=False, cancel=NEVER)
    assert second is not None and third is not None and second.end == third.start
    assert work.resume_at(probe) is None  # a chunk's first piece fetches its boundary batch
    assert work.resume_at(second) is None  # the probe's end came from its answer, not recorded
    assert work.resume_at(third) is None  # the second piece is not complete yet
    # The second piece's last batch straddles the cut: the third piece begins after it.
    work.finished(0, second, third.start + 7)
    assert work.resume_at(third) == third.start + 7
    assert work.resume_at(third) is None  # told once


def test_a_claim_waits_for_the_probe_and_wakes_when_it_ends() -> None:
    pieces = _pieces((Chunk(0, 10_000, "a"),))
    work = pieces.sources["a"]
    probe = work.claim(0, wait=True, cancel=NEVER)
    assert probe is not None
    got: list[Piece | None] = []
    t = threading.Thread(target=lambda: got.append(work.claim(1, wait=True, cancel=NEVER)))
    t.start()
    t.join(0.3)
    assert t.is_alive()  # waiting for the probe's answer
    work.learn(64 << 10, 10, 1)
    work.probe_ended(probe, 10)
    t.join(2)
    assert got and got[0] is not None and got[0].start == 10


def test_a_probe_that_covers_its_chunk_leaves_nothing_to_claim() -> None:
    pieces = _pieces((Chunk(0, 3, "a"),))
    work = pieces.sources["a"]
    probe = work.claim(0, wait=True, cancel=NEVER)
    assert probe is not None
    work.learn(300, 3, 1)
    work.probe_ended(probe, 3)
    assert work.claim(0, wait=True, cancel=NEVER) is None
    assert [p.end for p in pieces.in_order(_no_stop)] == [3]


def test_the_appender_walk_stops_when_told_while_waiting() -> None:
    pieces = _pieces((Chunk(0, 10, "a"),))

    class Stopped(Exception):
        pass

    def stop() -> None:
        raise Stopped()

    with pytest.raises(Stopped):
        list(pieces.in_order(stop))


@pytest.mark.parametrize(
    ("remaining", "share", "avg_batch", "expected"),
    [
        (64 << 20, 16, 16 << 10, 4 << 20),  # spread over the fetches in flight
        (1 << 30, 16, 16 << 10, (8 << 20) - (16 << 10)),  # one fetch holds it and one batch
        (1 << 20, 16, 1 << 10, MIN_PIECE_BYTES),  # never tiny
        (1 << 30, 16, 2 << 20, 16 << 20),  # 8 batches even if that is more than a fetch
    ],
)
def test_piece_bytes(remaining: int, share: int, avg_batch: int, expected: int) -> None:
    assert piece_bytes(remaining, share, avg_batch, 8 << 20) == expected
