"""``partsync plan --scan``: read each planned range from the source that serves it and take its
census (``plan.census``): the compaction holes a sync fills, the batches it re-encodes, the
transactions it replays, and where a sync with the given options would refuse or wait.

Read-only, and as costly as fetching the ranges (batch headers are parsed, records are not
decompressed). Record-level refusals (keyless records for a compacted local topic, a record
under the hole key) are not predicted: they need the records themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from partsync.copy.producer import TXN_SLOTS
from partsync.errors import PartsyncError, UnsafeError
from partsync.io.pool import ClusterPool
from partsync.io.reader import read_batches
from partsync.plan.census import Census, PartitionScan, RangeCensus, ScanStop, scan_stop
from partsync.plan.comparator import PartitionPlan
from partsync.run.planner import SyncRequest, TopicPlan

__all__ = ["scan_topics"]

_FETCH_BYTES = 4 << 20


def scan_topics(
    plans: Sequence[TopicPlan], req: SyncRequest, pool: ClusterPool, *, parallelism: int
) -> list[TopicPlan]:
    """``plans`` with each partition that has ranges to copy scanned (``PartitionPlan.scan``),
    ``parallelism`` partitions at a time."""
    jobs = [(tp, p) for tp in plans for p in tp.partitions if p.chunks]
    with ThreadPoolExecutor(max(1, min(parallelism, len(jobs) or 1)),
                            thread_name_prefix="scan") as ex:  # fmt: skip
        done = dict(zip(((tp.topic, p.partition) for tp, p in jobs),
                        ex.map(lambda job: _scan(job[0], job[1], req, pool), jobs)))  # fmt: skip
    return [
        dataclasses.replace(
            tp, partitions=tuple(done.get((tp.topic, p.partition), p) for p in tp.partitions)
        )
        for tp in plans
    ]


def _scan(tp: TopicPlan, p: PartitionPlan, req: SyncRequest, pool: ClusterPool) -> PartitionPlan:
    refs = {ref.name: ref for ref in req.sources}
    census = Census(p.copy_start)
    try:
        for chunk in p.chunks:
            cluster = pool.get(refs[chunk.source])
            conn = cluster.connect_leader(p.topic, p.partition)
            try:
                census.add_all(read_batches(conn, chunk.source, p.topic, p.partition,
                                            max(chunk.start, census.result().end), chunk.end,
                                            fetch_bytes=_FETCH_BYTES))  # fmt: skip
            finally:
                cluster.release(conn)
    except UnsafeError as e:  # a control record that is no transaction marker: a sync refuses it
        found = census.result()
        refusal = ScanStop(found.end if e.offset is None else e.offset, str(e), refused=True)
        stop = _stop(found, tp, req)
        if stop is None or (refusal.offset, False) < (stop.offset, not stop.refused):
            stop = refusal
        return dataclasses.replace(p, scan=PartitionScan(found, stop))
    except PartsyncError as e:
        return dataclasses.replace(p, scan=PartitionScan(census.result(), error=str(e)))
    found = census.result(p.target_end)
    return dataclasses.replace(p, scan=PartitionScan(found, _stop(found, tp, req)))


def _stop(found: RangeCensus, tp: TopicPlan, req: SyncRequest) -> ScanStop | None:
    opts = req.options
    return scan_stop(
        found,
        fill_holes=opts.fill_holes,
        replay=opts.replay_transactions,
        # A topic the sync creates takes its source's cleanup.policy, and only a compacted
        # source has holes.
        compacted=tp.rules.compacted or tp.create is not None,
        slots=TXN_SLOTS,
        max_held_bytes=opts.max_in_flight_bytes,
    )
