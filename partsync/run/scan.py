"""``partsync plan --scan``: read each planned range from the source that serves it and take its
census (``plan.census``): the compaction holes a sync fills, the batches it re-encodes, the
transactions it replays, and where a sync with the given options would refuse or wait.

Read-only, and as costly as fetching the ranges (batch headers are parsed, records are not
decompressed). Record-level refusals (keyless records for a compacted local topic, a record
under the hole key) are not predicted: they need the records themselves.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from partsync.copy.producer import TXN_SLOTS
from partsync.errors import PartsyncError
from partsync.io.pool import ClusterPool
from partsync.io.reader import read_batches
from partsync.plan.census import Census, PartitionScan, ScanOptions
from partsync.plan.comparator import PartitionPlan
from partsync.plan.txn_window import HoldRule
from partsync.run.planner import SyncRequest, TopicPlan

__all__ = ["scan_topics"]

_FETCH_BYTES = 4 << 20


def scan_topics(
    plans: Sequence[TopicPlan], req: SyncRequest, pool: ClusterPool, *, parallelism: int
) -> list[TopicPlan]:
    """``plans`` with each partition that has ranges to copy scanned (``PartitionPlan.scan``),
    ``parallelism`` partitions at a time."""
    jobs = [(tp, p) for tp in plans for p in tp.partitions if p.chunks]
    with ThreadPoolExecutor(
        max(1, min(parallelism, len(jobs) or 1)), thread_name_prefix="scan"
    ) as ex:
        done = dict(
            zip(
                ((tp.topic, p.partition) for tp, p in jobs),
                ex.map(lambda job: _scan(job[0], job[1], req, pool), jobs),
            )
        )
    return [
        dataclasses.replace(
            tp, partitions=tuple(done.get((tp.topic, p.partition), p) for p in tp.partitions)
        )
        for tp in plans
    ]


def _scan(tp: TopicPlan, p: PartitionPlan, req: SyncRequest, pool: ClusterPool) -> PartitionPlan:
    refs = {ref.name: ref for ref in req.sources}
    opts = req.options
    serving = p.chunks[0].source
    source = pool.get(refs[serving])
    rule = HoldRule(
        resumable=pool.get(req.local).can_resume_transactions(),
        timeout_ms=opts.transaction_timeout_ms,
        stable_end=lambda: source.last_stable_offset(p.topic, p.partition),
        clock=lambda: int(time.time() * 1000),
        source_timeout=source.transaction_timeout,
        source_deadline=source.transaction_deadline,
    )
    census = Census(
        p.local.end,
        ScanOptions(
            fill_holes=opts.fill_holes,
            replay=opts.replay_transactions,
            compacted=None if tp.create is not None else tp.rules.compacted,
            slots=TXN_SLOTS,
            max_held_bytes=opts.max_in_flight_bytes,
            bootstrap_at=p.copy_start if p.bootstrap else None,
            hold=rule.hold if rule.resumable else None,
        ),
    )
    try:
        for chunk in p.chunks:
            cluster = pool.get(refs[chunk.source])
            conn = cluster.connect_leader(p.topic, p.partition)
            try:
                # A bootstrap copies the batch holding the sources' log start whole.
                first = chunk is p.chunks[0] and p.bootstrap
                start = chunk.start if first else max(chunk.start, census.reached)
                read = read_batches(
                    conn,
                    chunk.source,
                    p.topic,
                    p.partition,
                    start,
                    chunk.end,
                    fetch_bytes=_FETCH_BYTES,
                )
                if not census.add_all(read):
                    break  # a sync refuses the partition there
            finally:
                cluster.release(conn)
    except PartsyncError as e:
        found, _stop = census.result(census.reached)
        return dataclasses.replace(p, scan=PartitionScan(found, error=str(e)))
    return dataclasses.replace(p, scan=PartitionScan(*census.result(p.target_end)))
