"""A small uncompressed batch of keyed records, as a plain client writes it: partsync's own
records (the ACLs it created, ``io.acl_record``), never a mirror's data. Pure byte layer."""

from __future__ import annotations

from collections.abc import Sequence

from partsync.wire.batch import client_header, seal
from partsync.wire.records import encode_record

__all__ = ["keyed_batch"]


def keyed_batch(records: Sequence[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytes:
    """One batch of ``records`` (key, value; a None value is a tombstone) at base offset 0,
    no producer identity, no compression, CreateTime ``timestamp_ms``, no headers."""
    if not records:
        raise ValueError("a batch holds at least one record")
    section = b"".join(encode_record(d, 0, k, v) for d, (k, v) in enumerate(records))
    return seal(client_header(0, len(records), timestamp_ms), section, len(records))
