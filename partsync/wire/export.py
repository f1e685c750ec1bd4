"""A failback's export of an old primary's diverged tail (``run.failback_export``), as bytes and
text. Pure.

Two forms, so that nothing the old primary held beyond the new one is lost:

- records for a topic on the new primary: each record's key, value, headers and timestamp as
  the old primary held them, plus a header ``partsync.failback`` naming where it came from
  (cluster, topic, partition, offset, the divergence point of that failback and when the new
  primary was promoted, its transaction state). A rerun reads the export partition's last record's origin to resume after it;
- JSON lines a person can read and replay: one object per record, markers included, bytes as
  UTF-8 text where they decode and ``{"base64": ...}`` where they do not.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from partsync.wire.batch import client_header, seal
from partsync.wire.records import Header, Record, encode_record

__all__ = [
    "ORIGIN_HEADER",
    "Origin",
    "export_batch",
    "record_line",
    "text_or_base64",
]

ORIGIN_HEADER = "partsync.failback"
# BaseTimestamp and MaxTimestamp in a v2 batch header.
_TIMESTAMPS = struct.Struct(">qq")
_TIMESTAMPS_AT = 27


@dataclass(frozen=True)
class Origin:
    """Where an exported record was: ``offset`` on ``cluster``'s ``topic``-``partition``,
    exported by the failback whose divergence point there was ``diverged_at``."""

    cluster: str
    topic: str
    partition: int
    offset: int
    diverged_at: int
    transaction: str | None = None
    # When the new primary was promoted: tells this failback from an earlier one of the same
    # partition that diverged at the same offset (a later cycle of failover and failback).
    promoted_ms: int = 0

    def same_export(self, other: Origin) -> bool:
        """Whether ``other`` came from the same failback of the same partition."""
        return (self.cluster, self.topic, self.partition, self.diverged_at, self.promoted_ms) == (
            other.cluster,
            other.topic,
            other.partition,
            other.diverged_at,
            other.promoted_ms,
        )

    def to_bytes(self) -> bytes:
        doc = {
            "cluster": self.cluster,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "diverged_at": self.diverged_at,
            "transaction": self.transaction,
            "promoted_ms": self.promoted_ms,
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | None) -> Origin | None:
        """The origin a header holds; None for one partsync did not write."""
        try:
            d = json.loads(data or b"")
            txn = d.get("transaction")
            return cls(
                str(d["cluster"]),
                str(d["topic"]),
                int(d["partition"]),
                int(d["offset"]),
                int(d["diverged_at"]),
                None if txn is None else str(txn),
                int(d.get("promoted_ms", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @classmethod
    def of(cls, headers: Sequence[Header]) -> Origin | None:
        value = next((v for k, v in reversed(headers) if k == ORIGIN_HEADER), None)
        return cls.from_bytes(value)


def export_batch(records: Sequence[tuple[Record, Origin]]) -> bytes:
    """One uncompressed batch of ``records``, each with its key, value, headers and timestamp
    (CreateTime) as it was, and its origin as one more header; no producer identity."""
    if not records:
        raise ValueError("a batch holds at least one record")
    base = min(r.timestamp for r, _ in records)
    section = b"".join(
        encode_record(
            delta,
            r.timestamp - base,
            r.key,
            r.value,
            (*r.headers, (ORIGIN_HEADER, origin.to_bytes())),
        )
        for delta, (r, origin) in enumerate(records)
    )
    header = bytearray(client_header(0, len(records), base))
    _TIMESTAMPS.pack_into(header, _TIMESTAMPS_AT, base, max(r.timestamp for r, _ in records))
    return seal(bytes(header), section, len(records))


def text_or_base64(data: bytes | None) -> str | dict[str, str] | None:
    """``data`` as text where it is UTF-8, else ``{"base64": ...}`` (None stays null)."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def record_line(
    record: Record,
    *,
    producer_id: int,
    transaction: str | None,
    log_append_time: bool,
    marker: str | None = None,
) -> str:
    """One JSON line for ``record``: a data record with its transaction state (``committed``,
    ``aborted``, ``open``, or null outside transactions), or a transaction marker (``marker``:
    ``commit``/``abort``)."""
    doc: dict[str, Any] = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": "LogAppendTime" if log_append_time else "CreateTime",
        "producer_id": producer_id,
    }
    if marker is not None:
        doc["marker"] = marker
    else:
        doc["transaction"] = transaction
        doc["key"] = text_or_base64(record.key)
        doc["value"] = text_or_base64(record.value)
        doc["headers"] = [[k, text_or_base64(v)] for k, v in record.headers]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
