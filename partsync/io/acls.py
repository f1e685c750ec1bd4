"""A cluster's ACLs as ``plan.acls.Acl`` (``--sync-acls``), and the record of the ACLs partsync
created on the local cluster: a compacted topic (``partsync.acls`` by default) whose keys are
the ACLs and whose values say where each came from, so partsync removes only its own ACLs and
never guesses from an ACL's shape. Every process of every job that syncs ACLs into the cluster
shares it; a tombstone forgets an ACL that partsync removed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from partsync._kafka import AclEntry, ErrorCode
from partsync.errors import BrokerError, ClusterError
from partsync.io.broker_errors import broker_error
from partsync.io.cluster import Cluster
from partsync.io.reader import read_batches
from partsync.plan.acls import DEFAULT_RECORD_TOPIC, GROUP, TOPIC, Acl
from partsync.wire.keyed import keyed_batch
from partsync.wire.records import iter_records

__all__ = [
    "DEFAULT_RECORD_TOPIC",
    "AclRecord",
    "cluster_acls",
    "create_acls",
    "delete_acls",
    "local_authorizer",
]

_READ_BYTES = 1 << 20
_BROKER_RESOURCE = 4
_ALLOW_EVERYONE = "allow.everyone.if.no.acl.found"


def _entry(a: Acl) -> AclEntry:
    return AclEntry(
        a.resource_type, a.name, a.pattern, a.principal, a.host, a.operation, a.permission
    )


def cluster_acls(cluster: Cluster, resource_types: Iterable[int] = (TOPIC, GROUP)) -> set[Acl]:
    """Every ACL on topics and groups (DescribeAcls; needs DESCRIBE on the cluster)."""
    out = set()
    for rt in resource_types:
        for e in cluster.ask(lambda c, rt=rt: c.list_acls(rt)):  # type: ignore[misc]
            out.add(
                Acl(
                    e.resource_type,
                    e.resource_name,
                    e.pattern_type,
                    e.principal,
                    e.host,
                    e.operation,
                    e.permission,
                )
            )
    return out


def create_acls(cluster: Cluster, acls: Iterable[Acl]) -> None:
    entries = [_entry(a) for a in sorted(acls)]
    cluster.ask(lambda c: c.create_acls(entries))


def delete_acls(cluster: Cluster, acls: Iterable[Acl]) -> None:
    entries = [_entry(a) for a in sorted(acls)]
    cluster.ask(lambda c: c.delete_acls(entries))


class AclRecord:
    """The ACLs partsync created on ``cluster``, kept in ``topic`` (created compacted, one
    partition, on first use)."""

    def __init__(self, cluster: Cluster, topic: str = DEFAULT_RECORD_TOPIC) -> None:
        self.cluster = cluster
        self.topic = topic

    def read(self) -> frozenset[Acl]:
        """The recorded ACLs (the latest record of each; none before the topic exists)."""
        if self.cluster.topic(self.topic, refresh=True) is None:
            return frozenset()
        b = self.cluster.bounds(self.topic, [0])[0]
        held: dict[str, bool] = {}
        if b.end > b.log_start:
            conn = self.cluster.connect_leader(self.topic, 0)
            try:
                for batch in read_batches(
                    conn,
                    self.cluster.name,
                    self.topic,
                    0,
                    b.log_start,
                    b.end,
                    fetch_bytes=_READ_BYTES,
                ):
                    if batch.is_control:
                        continue
                    for r in iter_records(batch):
                        if r.key is not None:
                            held[r.key.decode()] = r.value is not None
            finally:
                self.cluster.release(conn)
        out = set()
        for key, present in held.items():
            if not present:
                continue
            try:
                out.add(Acl.from_record_key(key))
            except ValueError as e:
                raise ClusterError(
                    f"topic {self.topic} holds a record partsync did not write ({e}); it is "
                    "partsync's record of the ACLs it created: name another with "
                    "[acls] record_topic",
                    cluster=self.cluster.name,
                    topic=self.topic,
                ) from None
        return frozenset(out)

    def add(self, acls: Iterable[Acl], source: str) -> None:
        now = int(time.time() * 1000)
        value = json.dumps({"source": source, "created_ms": now}).encode()
        self._write([(a.record_key().encode(), value) for a in sorted(acls)])

    def drop(self, acls: Iterable[Acl]) -> None:
        self._write([(a.record_key().encode(), None) for a in sorted(acls)])

    def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        self._ensure_topic()
        batch = keyed_batch(records, int(time.time() * 1000))
        conn = self.cluster.connect_leader(self.topic, 0)
        try:
            conn.send_produce(self.topic, {0: batch})
            res = conn.receive_produce()[0]
        except BrokerError:
            self.cluster.metadata(refresh=True)
            raise
        finally:
            self.cluster.release(conn)
        if res.error_code:
            raise broker_error(
                res.error_code,
                f"recording the ACLs partsync created in topic {self.topic}",
                cluster=self.cluster.name,
                topic=self.topic,
                partition=0,
            )

    def _ensure_topic(self) -> None:
        if self.cluster.topic(self.topic) is None:
            self.cluster.create_topic(self.topic, 1, {"cleanup.policy": "compact"})


def local_authorizer(cluster: Cluster) -> str | None:
    """Why the local cluster cannot keep a mirror read-only, or None if it can as far as can
    be read: it needs an authorizer, and ``allow.everyone.if.no.acl.found=false`` (a resource
    without ACLs otherwise lets everyone write it)."""
    code, _ = cluster.ask(lambda c: c.describe_acls(2, "partsync-probe"))
    if code == ErrorCode.SECURITY_DISABLED:
        return f"cluster {cluster.name} has no authorizer: every client may write every topic"
    node = min(cluster.metadata().brokers)
    code, cfg = cluster.ask(
        lambda c: c.describe_configs(_BROKER_RESOURCE, str(node), [_ALLOW_EVERYONE])
    )
    if not code and cfg.get(_ALLOW_EVERYONE, "false").lower() == "true":
        return (
            f"cluster {cluster.name} has {_ALLOW_EVERYONE}=true: a topic without an ALLOW for "
            "a principal is open to it"
        )
    return None
