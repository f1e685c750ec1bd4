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
from partsync.errors import ClusterError
from partsync.io.cluster import Cluster
from partsync.io.probes import broker_config
from partsync.io.record_topic import RecordTopic
from partsync.plan.acls import DEFAULT_RECORD_TOPIC, GROUP, TOPIC, Acl

__all__ = [
    "DEFAULT_RECORD_TOPIC",
    "AclRecord",
    "cluster_acls",
    "create_acls",
    "delete_acls",
    "local_authorizer",
]

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
    """The ACLs partsync created on ``cluster``, kept in ``topic`` (``io.record_topic``)."""

    def __init__(self, cluster: Cluster, topic: str = DEFAULT_RECORD_TOPIC) -> None:
        self.cluster = cluster
        self.topic = topic
        self._record = RecordTopic(cluster, topic, "the record of the ACLs partsync created")

    def read(self) -> tuple[frozenset[Acl], frozenset[Acl]]:
        """The recorded ACLs: those partsync created, and those --read-only withheld (none
        before the topic exists)."""
        created: set[Acl] = set()
        withheld: set[Acl] = set()
        for key, value in self._record.read().items():
            try:
                acl = Acl.from_record_key(key)
                kept_back = bool(json.loads(value).get("withheld"))
            except (ValueError, AttributeError) as e:
                raise ClusterError(
                    f"topic {self.topic} holds a record partsync did not write ({e}); it is "
                    "partsync's record of the ACLs it created: name another with "
                    "[acls] record_topic",
                    cluster=self.cluster.name,
                    topic=self.topic,
                ) from None
            (withheld if kept_back else created).add(acl)
        return frozenset(created), frozenset(withheld)

    def add(self, acls: Iterable[Acl], source: str, *, withheld: bool = False) -> None:
        """Record ``acls`` as created (before creating them), or as withheld."""
        now = int(time.time() * 1000)
        doc: dict[str, object] = {"source": source, "created_ms": now}
        if withheld:
            doc = {"source": source, "withheld": True, "since_ms": now}
        value = json.dumps(doc).encode()
        self._record.write([(a.record_key(), value) for a in sorted(acls)])

    def drop(self, acls: Iterable[Acl]) -> None:
        self._record.write([(a.record_key(), None) for a in sorted(acls)])


def local_authorizer(cluster: Cluster) -> tuple[str | None, str | None]:
    """(why the local cluster cannot keep a mirror read-only, what could not be verified):
    it needs an authorizer, and ``allow.everyone.if.no.acl.found=false`` (Kafka's default; a
    resource without ACLs otherwise lets everyone write it). Kafka reports that setting, an
    authorizer's and not a broker config it knows, as a sensitive value it leaves out: then it
    cannot be verified from a client, and the doubt says so."""
    code, _ = cluster.ask(lambda c: c.describe_acls(2, "partsync-probe"))
    if code == ErrorCode.SECURITY_DISABLED:
        refusal = f"cluster {cluster.name} has no authorizer: every client may write every topic"
        return refusal, None
    value = broker_config(cluster, _ALLOW_EVERYONE)
    if value is not None and value.lower() == "true":
        return (
            f"cluster {cluster.name} has {_ALLOW_EVERYONE}=true: a topic without an ALLOW for "
            "a principal is open to it"
        ), None
    if value is None:
        return None, (
            f"cluster {cluster.name} does not report {_ALLOW_EVERYONE} (Kafka leaves it out of "
            "DescribeConfigs): make sure the brokers do not set it to true"
        )
    return None, None
