"""Read-only requests for ``partsync check``: what the broker is, and what this client may do
(a mixin of ``Connection``). None of them writes, creates or fences anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.acl import DescribeAclsRequest
from kafka.protocol.admin.cluster import DescribeClusterRequest
from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

__all__ = ["AclEntry", "ProbeRequests", "acl_entries"]

# ACL resource pattern filter MATCH: every ACL that applies to a name (literal, prefixed,
# wildcard), as the authorizer would match them.
_MATCH_PATTERNS = 2
_ANY = 1


@dataclass(frozen=True)
class AclEntry:
    """One ACL as DescribeAcls lists it (Kafka's codes for operation and permission)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


def acl_entries(resp: Any) -> list[AclEntry]:
    """The ACLs of a DescribeAcls answer."""
    return [
        AclEntry(
            int(r.resource_type),
            r.resource_name,
            int(r.pattern_type),
            a.principal,
            a.host,
            int(a.operation),
            int(a.permission_type),
        )
        for r in resp.resources
        for a in r.acls
    ]


def _ops(value: Any) -> frozenset[int] | None:
    # kafka-python decodes the bit field to a set of operation codes; None where the broker
    # did not compute it (INT32_MIN: not asked for, or not supported).
    return None if value is None else frozenset(int(v) for v in value)


class ProbeRequests:
    """Broker version, authorized operations (KIP-430) and ACLs, over ``call``."""

    cluster: str
    offered: dict[int, tuple[int, int]]

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...
        def supports(self, api: str) -> bool: ...
        def version(self, api: str) -> int: ...

    def broker_version(self) -> str:
        """The newest Apache Kafka version whose protocol the broker's ApiVersions answer
        matches (a non-Kafka broker reports what it imitates), e.g. "3.9"."""
        # kafka-python's version tables take ~0.1 s to import: only `partsync check` needs them.
        from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

        inferred = infer_broker_version_from_api_versions(self.offered)
        return ".".join(str(v) for v in inferred)

    def topic_operations(self, topics: list[str]) -> dict[str, tuple[int, frozenset[int] | None]]:
        """(error code, authorized operation codes or None when not reported) per topic, from
        Metadata v8+; {} when the broker's Metadata is older."""
        if self.version("Metadata") < 8:
            return {}
        T = MetadataRequest.MetadataRequestTopic
        resp = self.call(
            "Metadata",
            MetadataRequest(
                topics=[T(name=t) for t in topics],
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=True,
            ),
        )
        return {
            t.name: (int(t.error_code), _ops(getattr(t, "authorized_operations", None)))
            for t in resp.topics
        }

    def cluster_operations(self) -> tuple[int, frozenset[int] | None]:
        """(error code, authorized operation codes) on the cluster resource (DescribeCluster,
        Kafka 2.8+); (0, None) where the broker does not offer it."""
        if not self.supports("DescribeCluster"):
            return 0, None
        resp = self.call(
            "DescribeCluster", DescribeClusterRequest(include_cluster_authorized_operations=True)
        )
        if resp.error_code:
            return int(resp.error_code), None
        # Without DESCRIBE on the cluster the field is 0 (no bits): not shown, not "no rights".
        return 0, _ops(resp.authorized_operations) or None

    def group_operations(self, group: str) -> tuple[int, frozenset[int] | None]:
        """(error code, authorized operation codes) on a group, from its coordinator
        (DescribeGroups v3+); a group that does not exist yet answers too (state Dead)."""
        if not self.supports("DescribeGroups") or self.version("DescribeGroups") < 3:
            return 0, None
        resp = self.call(
            "DescribeGroups",
            DescribeGroupsRequest(groups=[group], include_authorized_operations=True),
        )
        g = resp.groups[0]
        if g.error_code:
            return int(g.error_code), None
        return 0, _ops(getattr(g, "authorized_operations", None))

    def describe_acls(self, resource_type: int, name: str) -> tuple[int, list[AclEntry]]:
        """(error code, the ACLs that apply to the resource ``name``): every principal's, as
        DescribeAcls lists them to a client with DESCRIBE on the cluster. An error is returned,
        not raised (e.g. CLUSTER_AUTHORIZATION_FAILED, or SECURITY_DISABLED: no authorizer)."""
        if not self.supports("DescribeAcls"):
            return -1, []
        resp = self.call(
            "DescribeAcls",
            DescribeAclsRequest(
                resource_type_filter=resource_type,
                resource_name_filter=name,
                pattern_type_filter=_MATCH_PATTERNS,
                principal_filter=None,
                host_filter=None,
                operation=_ANY,
                permission_type=_ANY,
            ),
        )
        if resp.error_code:
            return int(resp.error_code), []
        return 0, acl_entries(resp)
