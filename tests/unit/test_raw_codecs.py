"""``_kafka.raw``: Produce requests and Fetch responses encoded/decoded by hand, byte for byte
what kafka-python's schema-generated codecs produce and read, without copying the batches."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.producer.produce import ProduceRequest

from partsync._kafka.fetch_requests import FetchedPartition, FetchRequests, fetch_outcome
from partsync._kafka.framed_socket import FramedSocket, encode_framed_into, sendmsg_all
from partsync._kafka.raw import (
    FETCH_VERSIONS,
    PRODUCE_VERSIONS,
    decode_fetch_response,
    produce_request_parts,
)
from partsync._kafka.shared_calls import SharedCalls
from partsync.errors import ClusterError
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


def _kafka_python_fetch_body(
    version: int,
    records: dict[int, bytes | None],
    *,
    throttle: int = 250,
    error: int = 0,
    preferred: int = -1,
) -> bytes:
    T = FetchResponse.FetchableTopicResponse
    P = T.PartitionData
    A = P.AbortedTransaction
    resp = FetchResponse(
        throttle_time_ms=throttle,
        error_code=error,
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
                        preferred_read_replica=preferred,
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


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_a_fetch_answer_becomes_fetched_partitions_in_one_place(version: int) -> None:
    records: dict[int, bytes | None] = {0: b"x" * 300, 2: None}
    body = b"\x00\x00\x00\x2a" + _kafka_python_fetch_body(
        version, records, throttle=30, error=(70 if version >= 7 else 0), preferred=3
    )
    got = fetch_outcome(body, version, 4)
    assert (got.throttle_ms, got.error_code, got.session_id) == (
        30,
        70 if version >= 7 else 0,  # a top-level error (KIP-227's) is in answers from v7 on
        77 if version >= 7 else 0,
    )
    start = 10 if version >= 5 else -1  # the log start offset is in answers from v5 on
    preferred = 3 if version >= 11 else -1  # the preferred read replica from v11 on (KIP-392)
    assert got.partitions == {
        ("orders", 0): FetchedPartition(0, 0, 1000, start, b"x" * 300, preferred),
        ("orders", 2): FetchedPartition(
            2, 1, 1002, start + 2 if start >= 0 else -1, b"", preferred
        ),
    }
    assert all(f.records.obj is body for f in got.partitions.values())  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        fetch_outcome(body[:-1], version, 4)


class _SharedFetches(FramedSocket, SharedCalls, FetchRequests):
    """``FetchRequests`` over a connection shared by threads (``call_raw``), on one end of a
    socket pair: ``BrokerConnection`` without the set-up."""

    def __init__(self, sock: socket.socket) -> None:
        FramedSocket.__init__(self, sock, host="broker", port=9092, cluster="c", client_id="t")
        SharedCalls.__init__(self)
        self._versions["Fetch"] = 11
        self.rack = ""
        self.last_throttle_ms = 0

    def version(self, api: str) -> int:
        return self._versions[api]


_FETCH_HEAD = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id
_FETCH_V11_FIXED = 4 * 4 + 1 + 4 + 4  # replica, wait, min and max bytes, isolation, session


def _fetch_broker(
    sock: socket.socket, answers: list[Callable[[int], bytes]], together: int = 1
) -> threading.Thread:
    """A broker answering Fetch v11 request i with ``answers[i](the first partition it
    names)`` (a response body), ``together`` requests at a time (all in flight meanwhile)."""
    f = sock.makefile("rb")

    def serve() -> None:
        waiting: list[tuple[int, int]] = []
        answered = 0
        for n in range(len(answers)):
            size, _key, _version, cid = _FETCH_HEAD.unpack(f.read(_FETCH_HEAD.size))
            rest = f.read(size - 8)
            pos = 2 + struct.unpack_from(">h", rest, 0)[0] + _FETCH_V11_FIXED + 4  # topics
            pos += 2 + struct.unpack_from(">h", rest, pos)[0] + 4  # topic name, partitions
            waiting.append((cid, struct.unpack_from(">i", rest, pos)[0]))
            if len(waiting) < together and n + 1 < len(answers):
                continue
            for c, p in waiting:
                frame = struct.pack(">i", c) + answers[answered](p)
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                answered += 1
            waiting = []

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def _partition_body(p: int, *, throttle: int = 0, error: int = 0) -> bytes:
    return _kafka_python_fetch_body(11, {p: b"p%d" % p * 50}, throttle=throttle, error=error)


def test_fetches_on_a_shared_connection_are_decoded_raw_and_handed_to_their_callers() -> None:
    a, b = socket.socketpair()
    conn = _SharedFetches(a)
    broker = _fetch_broker(b, [_partition_body] * 4, together=4)
    got: dict[int, FetchedPartition] = {}

    def fetch(p: int) -> None:
        got.update(conn.fetch("orders", [(p, 0, 1000)]))

    threads = [threading.Thread(target=fetch, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    broker.join(10)
    assert sorted(got) == [0, 1, 2, 3]
    for p, f in got.items():
        assert (f.partition, f.error_code, f.high_watermark) == (p, 0, 1000 + p)
        assert isinstance(f.records, memoryview) and bytes(f.records) == b"p%d" % p * 50
    conn.close()
    b.close()


def test_a_throttled_shared_fetch_is_asked_again_and_a_top_level_error_raised() -> None:
    a, b = socket.socketpair()
    conn = _SharedFetches(a)

    def throttled(p: int) -> bytes:  # KIP-219: at once, without the partitions
        return _kafka_python_fetch_body(11, {}, throttle=20)

    def refused(p: int) -> bytes:
        return _partition_body(p, error=70)  # FETCH_SESSION_ID_NOT_FOUND

    broker = _fetch_broker(b, [throttled, _partition_body, refused])
    assert list(conn.fetch("orders", [(5, 0, 1000)])) == [5]
    with pytest.raises(ClusterError) as e:
        conn.fetch("orders", [(5, 0, 1000)])
    assert "(70)" in str(e.value) and not conn.closed
    broker.join(10)
    conn.close()
    b.close()


def test_a_shared_fetch_answer_that_does_not_parse_closes_the_connection() -> None:
    a, b = socket.socketpair()
    conn = _SharedFetches(a)
    broker = _fetch_broker(b, [lambda p: _partition_body(p)[:-3]])
    with pytest.raises(ClusterError) as e:
        conn.fetch("orders", [(5, 0, 1000)])
    assert not e.value.retriable and conn.closed  # as a response kafka-python cannot decode
    assert "reading Fetch response from broker broker:9092 failed" in str(e.value)
    broker.join(10)
    b.close()


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
