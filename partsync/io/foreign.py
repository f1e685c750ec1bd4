"""Who wrote a local batch no source has (a write into a mirror by someone other than
partsync): the batch's producer identity, and what the local broker still knows of that
producer. DescribeProducers knows idempotent and transactional producers only (their state
expires after ``producer.id.expiration.ms``), and never a principal."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Sequence

from partsync.errors import PartsyncError
from partsync.io.cluster import Cluster
from partsync.io.reader import batch_at
from partsync.plan.comparator import PartitionPlan
from partsync.wire.batch import Batch

__all__ = ["describe_foreign", "foreign_at", "with_foreign"]

log = logging.getLogger(__name__)


def _when(ms: int) -> str:
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _partsync_producers(cluster: Cluster, tids: Sequence[str]) -> set[int]:
    """The producer ids partsync's transactional ids of the partition (``tids``: its own and
    its replay slots', ``copy.producer.partsync_ids``) hold now (KIP-664), so partsync's own
    batches are not blamed on someone else. Empty where the cluster cannot tell."""
    if not tids:
        return set()
    try:
        states = cluster.describe_transactions(list(tids)) or {}
    except PartsyncError as e:
        log.debug("DescribeTransactions for %s: %s", tids[0], e)
        return set()
    return {st.producer_id for st in states.values() if not st.error_code and st.producer_id >= 0}


def describe_foreign(
    cluster: Cluster, topic: str, partition: int, batch: Batch, tids: Sequence[str] = ()
) -> str:
    """The batch, its producer id and epoch, and whether the partition's leader still keeps
    that producer's state."""
    what = (
        f"the local {batch.describe()}, timestamped {_when(batch.max_timestamp)}, is not "
        "partsync's copy of a source batch"
    )
    pid = batch.producer_id
    if batch.is_control:
        return f"{what}: a transaction marker the local coordinator wrote"
    if pid < 0:
        return (
            f"{what}: written by a producer without idempotence (no producer id), which "
            "nothing on the broker names"
        )
    if pid >= 0 and pid in _partsync_producers(cluster, tids):
        return (
            f"the local {batch.describe()} was written by partsync itself (producer id {pid}, "
            "the partition's partsync transactional id): the source's history changed under "
            "the mirror"
        )
    try:
        active = cluster.describe_producers(topic, partition)
    except PartsyncError as e:
        log.debug("DescribeProducers %s-%d on %s: %s", topic, partition, cluster.name, e)
        active = None
    who = f"{what}: written by producer id {pid} (epoch {batch.producer_epoch})"
    if active is None:
        return f"{who}; the local broker could not say more of it (DescribeProducers)"
    if any(p.producer_id == pid for p in active):
        return (
            f"{who}, which the partition's leader still lists as an active producer "
            "(DescribeProducers; the broker does not record principals: look for the client "
            "among those allowed to write the topic, and see --read-only)"
        )
    return f"{who}, whose state the partition's leader no longer keeps (expired)"


def foreign_at(
    cluster: Cluster, topic: str, partition: int, offset: int, tids: Sequence[str] = ()
) -> str | None:
    """``describe_foreign`` of the local batch holding ``offset``; None if it cannot be read."""
    conn = cluster.connect_leader(topic, partition)
    try:
        batch = batch_at(conn, cluster.name, topic, partition, offset)
        return describe_foreign(cluster, topic, partition, batch, tids)
    except PartsyncError as e:
        log.debug("reading %s-%d at %d on %s: %s", topic, partition, offset, cluster.name, e)
        return None
    finally:
        cluster.release(conn)


def with_foreign(plan: PartitionPlan, local: Cluster, tids: Sequence[str] = ()) -> PartitionPlan:
    """A local log that ends beyond every source's: the refusal names the first local batch
    no source has (``io.foreign``: a write into the mirror by someone else, as a rule)."""
    if plan.local.end <= plan.target_end or plan.target_end < plan.local.log_start:
        return plan
    found = foreign_at(local, plan.topic, plan.partition, plan.target_end, tids)
    return plan if found is None else dataclasses.replace(plan, reason=f"{plan.reason}; {found}")
