"""A small uncompressed batch of keyed records, as a plain client writes it: partsync's own
records (the ACLs it created, ``io.acl_record``), never a mirror's data. Pure byte layer."""

from __future__ import annotations

from collections.abc import Sequence

from partsync.wire.batch import client_header, seal
from partsync.wire.records import encode_varint

__all__ = ["keyed_batch"]


def _field(data: bytes | None) -> bytes:
    return encode_varint(-1) if data is None else encode_varint(len(data)) + data


def keyed_batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One batch of ``records`` (key, value; a None value is a tombstone) at base offset 0,
    no producer identity, no compression, CreateTime ``timestamp_ms``, no headers."""
    if not records:
        raise ValueError("a batch holds at least one record")
    parts = []
    for delta, (key, value) in enumerate(records):
        # attributes 0, timestamp delta 0, offset delta, key, value, no headers
        body = b"\x00" + encode_varint(0) + encode_varint(delta) + _field(key) + _field(value)
        body += encode_varint(0)
        parts.append(encode_varint(len(body)) + body)
    return seal(client_header(0, len(records), timestamp_ms), b"".join(parts), len(records))
