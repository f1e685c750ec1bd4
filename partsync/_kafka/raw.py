"""Hand-written codecs for the two requests that carry record batches: Produce and Fetch.

kafka-python encodes a Produce request by copying every batch into its encode buffer, and
decodes a Fetch response by copying each partition's records out of the response body. For a
copier those are two full passes over every byte for nothing. Here a Produce request is a list
of buffers for one scatter/gather send (the batches are never copied: a rewritten batch is its
new 61-byte header plus a view of the fetched bytes), and a Fetch response's records are views
into the received body. Only the non-flexible versions partsync asks for are handled (Produce
v3-v8, Fetch v4-v11); their layouts are Apache Kafka's ProduceRequest.json and
FetchResponse.json. Pure code: no sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Protocol

__all__ = [
    "FETCH_VERSIONS",
    "PRODUCE_VERSIONS",
    "Buffer",
    "Parts",
    "RawFetchPartition",
    "decode_fetch_response",
    "produce_request_parts",
]

PRODUCE_API_KEY = 0
PRODUCE_VERSIONS = range(3, 9)
FETCH_VERSIONS = range(4, 12)

Buffer = bytes | bytearray | memoryview

_HEADER = struct.Struct(">ihhi")  # frame size, api key, api version, correlation id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ERROR_SESSION = struct.Struct(">hi")  # Fetch v7+: top-level error code, fetch session id
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION = struct.Struct(">ii")  # index, records size
_FETCH_PARTITION = struct.Struct(">ihqq")  # index, error code, high watermark, last stable
_I64 = struct.Struct(">q")


class Parts(Protocol):
    """A batch held as several buffers (``wire.batch.Rewritten``)."""

    def parts(self) -> tuple[Buffer, ...]: ...

    def __len__(self) -> int: ...


def _string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += _I16.pack(-1)
        return
    raw = s.encode()
    out += _I16.pack(len(raw))
    out += raw


def produce_request_parts(
    version: int,
    correlation_id: int,
    client_id: str,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    batches: Mapping[str, Mapping[int, Buffer | Parts]],
) -> list[Buffer]:
    """A framed Produce request (header v1 and body) as buffers to send in order. Small fields
    are gathered into fresh bytes between the batches, which are passed through as given."""
    if version not in PRODUCE_VERSIONS:
        raise ValueError(f"Produce v{version} is not encoded here")
    out: list[Buffer] = []
    cur = bytearray(_HEADER.size)
    _string(cur, client_id)
    _string(cur, transactional_id)
    cur += _ACKS_TIMEOUT.pack(acks, timeout_ms)
    cur += _I32.pack(len(batches))
    for topic, parts in batches.items():
        _string(cur, topic)
        cur += _I32.pack(len(parts))
        for partition, data in parts.items():
            cur += _PARTITION.pack(partition, len(data))
            pieces = (
                data.parts() if not isinstance(data, (bytes, bytearray, memoryview)) else (data,)
            )
            for piece in pieces:
                if len(piece) <= 256:  # a rewritten header: cheaper to gather than to send alone
                    cur += piece
                else:
                    out.append(cur)
                    out.append(piece)
                    cur = bytearray()
    if cur:
        out.append(cur)
    first = out[0]
    assert isinstance(first, bytearray)
    size = sum(len(b) for b in out) - 4
    _HEADER.pack_into(first, 0, size, PRODUCE_API_KEY, version, correlation_id)
    return out


class RawFetchPartition:
    """One partition of a Fetch response; ``records`` is a view into the response body."""

    __slots__ = (
        "error_code",
        "high_watermark",
        "log_start_offset",
        "partition",
        "preferred_read_replica",
        "records",
    )

    def __init__(
        self,
        partition: int,
        error_code: int,
        high_watermark: int,
        log_start_offset: int,
        records: memoryview,
        preferred_read_replica: int = -1,
    ) -> None:
        self.partition = partition
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.records = records
        self.preferred_read_replica = preferred_read_replica


def decode_fetch_response(
    body: Buffer, version: int, offset: int = 0
) -> tuple[int, int, int, dict[str, list[RawFetchPartition]]]:
    """(throttle ms, top-level error code, fetch session id, partitions by topic) of a Fetch
    response body
    (after the response header, which starts at ``offset``'s caller). Raises ValueError on a
    body that does not parse."""
    if version not in FETCH_VERSIONS:
        raise ValueError(f"Fetch v{version} is not decoded here")
    view = memoryview(body)
    pos = offset
    try:
        (throttle,) = _I32.unpack_from(view, pos)
        pos += 4
        error = session_id = 0
        if version >= 7:
            error, session_id = _ERROR_SESSION.unpack_from(view, pos)
            pos += _ERROR_SESSION.size
        (n_topics,) = _I32.unpack_from(view, pos)
        pos += 4
        out: dict[str, list[RawFetchPartition]] = {}
        for _ in range(n_topics):
            (n,) = _I16.unpack_from(view, pos)
            pos += 2
            if n < 0:
                raise ValueError(f"topic name of length {n}")
            topic = bytes(view[pos : pos + n]).decode()
            pos += n
            (n_parts,) = _I32.unpack_from(view, pos)
            pos += 4
            parts = out.setdefault(topic, [])
            for _ in range(n_parts):
                index, code, hw, _lso = _FETCH_PARTITION.unpack_from(view, pos)
                pos += _FETCH_PARTITION.size
                start = -1
                if version >= 5:
                    (start,) = _I64.unpack_from(view, pos)
                    pos += 8
                (n_aborted,) = _I32.unpack_from(view, pos)
                pos += 4 + max(0, n_aborted) * 16
                preferred = -1
                if version >= 11:
                    (preferred,) = _I32.unpack_from(view, pos)
                    pos += 4
                (size,) = _I32.unpack_from(view, pos)
                pos += 4
                if size < 0:
                    records = view[pos:pos]
                else:
                    if pos + size > len(view):
                        raise ValueError("records run past the end of the response")
                    records = view[pos : pos + size]
                    pos += size
                parts.append(RawFetchPartition(index, code, hw, start, records, preferred))
    except struct.error as e:
        raise ValueError(f"truncated Fetch response: {e}") from None
    if pos != len(view):
        raise ValueError(f"{len(view) - pos} bytes left over after the Fetch response")
    return throttle, error, session_id, out
