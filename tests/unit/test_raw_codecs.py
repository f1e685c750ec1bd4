"""``_kafka.raw``: Produce requests and Fetch responses encoded/decoded by hand, byte for byte
what kafka-python's schema-generated codecs produce and read, without copying the batches."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest

from partsync._kafka.framed_socket import encode_framed_into, sendmsg_all
from partsync._kafka.raw import (
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    decode_fetch_response,
    produce_request_parts,
)
from partsync.wire.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    PRODUCER_OFFSET,
    Batch,
    compute_crc,
    iter_batches,
    rewrite_for_append,
    rewrite_parts,
)

GOLDEN = Path(__file__).parent / "golden"


def _kafka_python_produce(version: int, cid: int, txn: str | None, batches) -> bytes:  # type: ignore[no-untyped-def]
    from kafka.protocol.schemas.fields.codecs.encode_buffer import EncodeBufferPool

    D = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=txn,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            D(
                name=t,
                partition_data=[
                    D.PartitionProduceData(index=p, records=bytes(b)) for p, b in parts.items()
                ],
            )
            for t, parts in batches.items()
        ],
    )
    req.API_VERSION = version
    req.with_header(correlation_id=cid, client_id="partsync-test")
    with EncodeBufferPool.acquire() as out:
        encode_framed_into(req, out)
        return bytes(out.buf[: out.pos])


def _batches() -> list[Batch]:
    """Batches a real broker stored (every codec, and a transaction's)."""
    return [b for f in sorted(GOLDEN.glob("*.bin")) for b in iter_batches(f.read_bytes())]


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("txn", [None, "partsync:orders:3"])
def test_a_produce_request_is_byte_for_byte_kafka_pythons(version: int, txn: str | None) -> None:
    bs = _batches()
    rewritten = [rewrite_parts(b, 4711, 3, 17 * i) for i, b in enumerate(bs)]
    batches = {
        "orders": {i: r for i, r in enumerate(rewritten)},
        "other-topic": {9: bytes(rewritten[0]), 2: bytearray(b"\x00" * 300)},
    }
    parts = produce_request_parts(version, 77, "partsync-test", txn, -1, 30_000, batches)
    assert b"".join(parts) == _kafka_python_produce(version, 77, txn, batches)
    # The batches' records travel as the views given, not as copies.
    tails = {id(r.tail) for r in rewritten}
    assert sum(id(p) in tails for p in parts) >= sum(len(r.tail) > 256 for r in rewritten)


def test_rewrite_parts_is_the_shallow_rewrite_of_the_whole_batch() -> None:
    for b in _batches():
        r = rewrite_parts(b, 123456789, 7, 4242)
        whole = bytes(r)
        expected = bytearray(b.data)
        expected[0:8] = (0).to_bytes(8, "big")
        expected[PRODUCER_OFFSET : PRODUCER_OFFSET + 14] = (
            (123456789).to_bytes(8, "big") + (7).to_bytes(2, "big") + (4242).to_bytes(4, "big")
        )
        expected[CRC_OFFSET:ATTRIBUTES_OFFSET] = compute_crc(expected).to_bytes(4, "big")
        assert whole == bytes(expected) == bytes(rewrite_for_append(b, 123456789, 7, 4242))
        assert r.tail.obj is b.data.obj  # a view of the fetched bytes


def _kafka_python_fetch_body(version: int, records: dict[int, bytes | None]) -> bytes:
    T = FetchResponse.FetchableTopicResponse
    P = T.PartitionData
    A = P.AbortedTransaction
    resp = FetchResponse(
        throttle_time_ms=250,
        error_code=0,
        session_id=(77 if version >= 7 else 0),
        responses=[
            T(
                topic="orders",
                partitions=[
                    P(
                        partition_index=p,
                        error_code=(1 if rec is None else 0),
                        high_watermark=1000 + p,
                        last_stable_offset=900 + p,
                        log_start_offset=10 + p,
                        aborted_transactions=(
                            [A(producer_id=5, first_offset=6)] if p % 2 else None
                        ),
                        preferred_read_replica=-1,
                        records=rec,
                    )
                    for p, rec in records.items()
                ],
            )
        ],
    )
    return bytes(resp.encode(version=version))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_a_fetch_response_decodes_as_kafka_python_reads_it_with_records_as_views(
    version: int,
) -> None:
    raw = b"".join(bytes(b.data) for b in _batches())
    records: dict[int, bytes | None] = {0: raw, 1: raw[:100], 2: None, 3: b""}
    body = b"\x00\x00\x00\x2a" + _kafka_python_fetch_body(version, records)  # header: cid 42
    throttle, error, session_id, topics = decode_fetch_response(body, version, 4)
    # The fetch session's id (KIP-227) is in answers from v7 on.
    assert (throttle, error, session_id, list(topics)) == (
        250,
        0,
        77 if version >= 7 else 0,
        ["orders"],
    )
    theirs = FetchResponse.decode(memoryview(body)[4:], version=version, header=False)
    mine = topics["orders"]
    assert [p.partition for p in mine] == [0, 1, 2, 3]
    for p, t in zip(mine, theirs.responses[0].partitions, strict=True):
        assert (p.error_code, p.high_watermark) == (t.error_code, t.high_watermark)
        assert p.log_start_offset == (t.log_start_offset if version >= 5 else -1)
        assert bytes(p.records) == (t.records or b"")
        assert isinstance(p.records, memoryview) and p.records.obj is body


def test_a_truncated_fetch_response_is_an_error_not_a_short_read() -> None:
    body = b"\x00\x00\x00\x2a" + _kafka_python_fetch_body(11, {0: b"x" * 200})
    with pytest.raises(ValueError):
        decode_fetch_response(body[:-10], 11, 4)
    with pytest.raises(ValueError):
        decode_fetch_response(body + b"\x00", 11, 4)


class _Counting:
    """A socket that counts its sendmsg calls."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.calls = sock, 0

    def sendmsg(self, buffers: list[memoryview]) -> int:
        self.calls += 1
        return self.sock.sendmsg(buffers)


def test_a_scatter_gather_send_resumes_partial_writes_in_order() -> None:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a.settimeout(10)  # as a broker connection's: a send may then be partial
    parts = [bytes([i % 251]) * (1 + (i * 7919) % 20_000) for i in range(1500)]
    got = bytearray()
    total = sum(len(p) for p in parts)

    def drain() -> None:
        while len(got) < total:
            got.extend(b.recv(1 << 16))

    reader = threading.Thread(target=drain)
    reader.start()
    counting = _Counting(a)
    sendmsg_all(counting, [memoryview(p) for p in parts])  # type: ignore[arg-type]
    reader.join(10)
    a.close()
    b.close()
    assert bytes(got) == b"".join(parts)
    assert counting.calls > 2  # partial writes resumed (1500 buffers alone need only 2 calls)
