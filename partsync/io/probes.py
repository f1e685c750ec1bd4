"""``partsync check``'s read-only probes of a cluster: what its brokers are, offer and let this
client do, and whether the coordinators a sync needs are there.

The requests are sent and their error codes read here, in ``io``; ``run.check`` only turns the
answers into findings. Nothing here writes: no InitProducerId (that would fence a running
job's writer), no group join. (FindCoordinator itself makes Kafka create
``__transaction_state`` or ``__consumer_offsets`` on a cluster that never had them.)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from partsync._kafka import (
    COORDINATOR_RETRY_CODES,
    GROUP_KEY,
    TXN_KEY,
    BrokerInfo,
    ErrorCode,
    error_name,
)
from partsync._kafka.admin_requests import BROKER_RESOURCE
from partsync.io.cluster import Cluster
from partsync.plan.preflight import AclRule

__all__ = [
    "Coordinator",
    "Reach",
    "Rights",
    "broker_config",
    "broker_version",
    "cluster_rights",
    "group_coordinator",
    "group_rights",
    "offers",
    "topic_rights",
    "transactional_id_acls",
    "txn_coordinators",
]

_TRANSACTIONAL_ID = 5  # ACL resource type
_TOPIC_AUTHORIZATION_FAILED = 29
_TXN_ID_AUTHORIZATION_FAILED = 53


@dataclass(frozen=True)
class Rights:
    """What this client may do with a resource, as a broker reports it: ``denied`` when it
    would not even describe the resource (not authorized), else the authorized operation codes
    (``allowed``; None where not reported) and the name of any other error (``error``)."""

    denied: bool = False
    allowed: frozenset[int] | None = None
    error: str = ""


class Reach(enum.Enum):
    """Whether a group's or transactional id's coordinator can be reached."""

    READY = "ready"
    DENIED = "denied"  # not authorized to find it
    NOT_READY = "not-ready"  # loading, not available or moved: a new cluster's still starting
    MISSING = "missing"  # no coordinator (any other error)


@dataclass(frozen=True)
class Coordinator:
    reach: Reach
    node_id: int = -1  # READY: the coordinator's broker
    error: str = ""  # NOT_READY, MISSING: the broker's error's name


def broker_version(cluster: Cluster) -> str:
    """The Kafka version the brokers' offered API versions match, e.g. "3.9"."""
    return cluster.ask(lambda c: c.broker_version())


def broker_config(cluster: Cluster, key: str) -> str | None:
    """A broker config's value as the lowest broker reports it (DescribeConfigs); None where
    it is not reported or not readable."""
    node = min(cluster.metadata().brokers)
    code, cfg = cluster.ask(lambda c: c.describe_configs(BROKER_RESOURCE, str(node), [key]))
    return None if code else cfg.get(key)


def offers(cluster: Cluster, api: str) -> bool:
    """Whether the cluster's brokers offer the request ``api`` (e.g. "InitProducerId")."""
    return cluster.ask(lambda c: c.supports(api))


def topic_rights(cluster: Cluster, topics: tuple[str, ...]) -> dict[str, Rights]:
    """This client's rights on each topic (Metadata v8+); {} where the broker's Metadata is
    older. A topic that is not there is reported with the topic ACLs' rights and its error."""
    out = {}
    for topic, (code, allowed) in cluster.ask(lambda c: c.topic_operations(list(topics))).items():
        if code == _TOPIC_AUTHORIZATION_FAILED:
            out[topic] = Rights(denied=True, allowed=allowed, error=error_name(code))
        else:
            out[topic] = Rights(allowed=allowed, error=error_name(code) if code else "")
    return out


def cluster_rights(cluster: Cluster) -> frozenset[int] | None:
    """This client's authorized operations on the cluster resource (DescribeCluster, Kafka
    2.8+); None where not reported (an error, or a broker that does not offer it)."""
    _code, ops = cluster.ask(lambda c: c.cluster_operations())
    return ops


def transactional_id_acls(cluster: Cluster, transactional_id: str) -> tuple[int, list[AclRule]]:
    """(error code, the ACLs that apply to the transactional id): every principal's, as
    DescribeAcls lists them to a client with DESCRIBE on the cluster; -1 where not offered."""
    code, entries = cluster.ask(lambda c: c.describe_acls(_TRANSACTIONAL_ID, transactional_id))
    return code, [AclRule(e.principal, e.host, e.operation, e.permission) for e in entries]


def _coordinator(code: int, coord: BrokerInfo | None, denied_code: int) -> Coordinator:
    if code == denied_code:
        return Coordinator(Reach.DENIED)
    if code in COORDINATOR_RETRY_CODES:
        return Coordinator(Reach.NOT_READY, error=error_name(code))
    if code or coord is None:
        return Coordinator(Reach.MISSING, error=error_name(code))
    return Coordinator(Reach.READY, coord.node_id)


def txn_coordinators(cluster: Cluster, ids: list[str], *, timeout: float) -> dict[str, Coordinator]:
    """Each transactional id's transaction coordinator (FindCoordinator), asked again while
    not ready for up to ``timeout`` seconds."""
    found = cluster.coordinators.find_coordinators(ids, TXN_KEY, timeout=timeout)
    return {
        tid: _coordinator(code, coord, _TXN_ID_AUTHORIZATION_FAILED)
        for tid, (code, coord) in found.items()
    }


def group_coordinator(cluster: Cluster, group: str, *, timeout: float) -> Coordinator:
    """The group's coordinator (FindCoordinator), asked again while not ready for up to
    ``timeout`` seconds."""
    code, coord = cluster.find_coordinator(group, GROUP_KEY, timeout=timeout)
    return _coordinator(code, coord, ErrorCode.GROUP_AUTHORIZATION_FAILED)


def group_rights(cluster: Cluster, coordinator: Coordinator, group: str) -> Rights:
    """This client's rights on the group, from its coordinator (DescribeGroups v3+; none
    reported by an older one); a group that does not exist yet answers too."""
    code, ops = cluster.broker_conn(coordinator.node_id).group_operations(group)
    if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
        return Rights(denied=True, error=error_name(code))
    return Rights(allowed=ops, error=error_name(code) if code else "")
