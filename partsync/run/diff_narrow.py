"""Narrowing a ``partsync diff`` divergence: the chunk comparison names the first chunk whose
digests differ; this opens it on every cluster, to its first divergent batch and that batch to
its first divergent record, so the report names an exact offset, the clusters that disagree
there and why (records, batch boundaries, or only the stored bytes).
"""

from __future__ import annotations

from collections.abc import Mapping

from partsync.errors import CorruptBatchError, PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.plan.diff_model import DiffOptions, Level
from partsync.wire.batch import Batch
from partsync.wire.digest import (
    Divergence,
    describe_record_difference,
    first_divergence,
    record_unit,
)
from partsync.wire.markers import describe_transactions_at
from partsync.wire.records import Record, iter_records

__all__ = ["narrow"]

# Attribute bits other than codec (0-2), timestamp type (3), transactional (4), control (5).
_OTHER_ATTRIBUTES = 0xFFC0


def _batch_at(
    cluster: Cluster, topic: str, partition: int, offset: int, opts: DiffOptions
) -> Batch | None:
    with cluster.connect_leader(topic, partition) as conn:
        for b in read_batches(
            conn,
            cluster.name,
            topic,
            partition,
            offset,
            offset + 1,
            fetch_bytes=opts.fetch_bytes,
            wait_ms=opts.fetch_wait_ms,
        ):
            return b if b.base_offset <= offset <= b.last_offset else None
    return None


def _record_at(batch: Batch | None, offset: int) -> Record | None:
    if batch is None:
        return None
    return next((r for r in iter_records(batch) if r.offset == offset), None)


def _with_transactions(detail: str, batches: Mapping[str, Batch | None], offset: int) -> str:
    """``detail``, and which transaction each cluster holds at ``offset`` where one holds a
    marker and another a transaction's data there."""
    try:
        txns = describe_transactions_at(batches, offset)
    except PartsyncError:  # a batch that cannot be decoded was reported already
        txns = None
    return detail if txns is None else f"{detail}; {txns}"


def _spans(div: Divergence) -> str:
    return ", ".join(
        f"{n} {'has no batch there' if u is None else 'holds ' + u.span}"
        for n, u in div.units.items()
    )


def _header_differences(batches: Mapping[str, Batch | None], reference: str) -> str:
    ref = batches[reference]
    out = []
    for name, b in batches.items():
        if name == reference or b is None or ref is None:
            continue
        fields = []
        if b.codec != ref.codec:
            fields.append(f"codec {ref.codec} vs {b.codec}")
        if b.base_timestamp != ref.base_timestamp or b.max_timestamp != ref.max_timestamp:
            fields.append("batch timestamps")
        if (b.attributes ^ ref.attributes) & _OTHER_ATTRIBUTES:
            fields.append("attributes")
        if b.log_append_time != ref.log_append_time:
            fields.append("timestamp type")
        if fields:
            out.append(f"{name} vs {reference}: {', '.join(fields)}")
    return "; ".join(out)


def narrow(
    div: Divergence,
    clusters: Mapping[str, Cluster],
    topic: str,
    partition: int,
    start: int,
    end: int,
    opts: DiffOptions,
) -> tuple[int, tuple[str, ...], str]:
    """(first divergent offset, disagreeing clusters, reason) for a divergence found in chunks."""
    reference = div.agreeing[0]
    if opts.level is Level.RECORD:
        held = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
        got = {n: _record_at(b, div.offset) for n, b in held.items()}
        detail = _with_transactions(describe_record_difference(got, reference), held, div.offset)
        return div.offset, div.disagreeing, f"records differ at offset {div.offset}: {detail}"
    if div.boundaries_differ:
        held = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
        detail = (
            f"batch boundaries differ at offset {div.offset} ({_spans(div)}); the records "
            "may still be equal: compare them with --level record"
        )
        return div.offset, div.disagreeing, _with_transactions(detail, held, div.offset)
    # Same offsets, different digests: open the batch on every cluster and compare its records.
    span = next(u for u in div.units.values() if u is not None).span
    batches = {n: _batch_at(clusters[n], topic, partition, div.offset, opts) for n in div.units}
    lo = div.offset
    hi = min(end, max(u.last for u in div.units.values() if u is not None) + 1)
    try:
        per = {}
        for n, b in batches.items():
            per[n] = [record_unit(r) for r in iter_records(b) if lo <= r.offset < hi] if b else []
        inner = first_divergence(per, start=start, chunk=div.chunk)
        got = {n: _record_at(batches[n], inner.offset) for n in inner.units} if inner else {}
    except CorruptBatchError as e:
        return (
            div.offset,
            div.disagreeing,
            (
                f"batch {span} differs between clusters; its records could not be decoded to narrow "
                f"it down: {e.reason}"
            ),
        )
    if inner is None:
        headers = (
            _header_differences(batches, reference) or "same codec, different compressed bytes"
        )
        return (
            div.offset,
            div.disagreeing,
            (
                f"batch {span} holds the same records on every cluster but its stored bytes differ "
                f"({headers}); --level record would report these records as identical"
            ),
        )
    detail = _with_transactions(
        describe_record_difference(got, inner.agreeing[0]), batches, inner.offset
    )
    return (
        inner.offset,
        inner.disagreeing,
        f"records differ at offset {inner.offset} (in batch {span}): {detail}",
    )
