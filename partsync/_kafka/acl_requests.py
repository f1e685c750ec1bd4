"""ACL requests for ``--sync-acls`` (a mixin of ``Connection``): list the ACLs on a resource
type, create and delete exact bindings. Plain tuples in, ``AclEntry`` out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin.acl import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

from partsync._kafka.codes import raise_for_code
from partsync._kafka.probe_requests import AclEntry, acl_entries

__all__ = ["AclRequests"]

_ANY = 1
_ANY_PATTERN = 1


class AclRequests:
    """DescribeAcls (every ACL of a resource type), CreateAcls and DeleteAcls over ``call``."""

    cluster: str

    if TYPE_CHECKING:

        def call(self, api: str, request: Any) -> Any: ...

    def list_acls(self, resource_type: int) -> list[AclEntry]:
        """Every ACL on resources of ``resource_type`` (any name, pattern, principal); raises
        the broker's error (SECURITY_DISABLED: no authorizer; CLUSTER_AUTHORIZATION_FAILED: no
        DESCRIBE on the cluster)."""
        resp = self.call(
            "DescribeAcls",
            DescribeAclsRequest(
                resource_type_filter=resource_type,
                resource_name_filter=None,
                pattern_type_filter=_ANY_PATTERN,
                principal_filter=None,
                host_filter=None,
                operation=_ANY,
                permission_type=_ANY,
            ),
        )
        msg = f" ({resp.error_message})" if getattr(resp, "error_message", None) else ""
        raise_for_code(resp.error_code, f"DescribeAcls{msg}", cluster=self.cluster)
        return acl_entries(resp)

    def create_acls(self, acls: Sequence[AclEntry]) -> None:
        """Create the bindings (an existing one is no error: Kafka keeps one of each)."""
        if not acls:
            return
        C = CreateAclsRequest.AclCreation
        resp = self.call(
            "CreateAcls",
            CreateAclsRequest(
                creations=[
                    C(
                        resource_type=a.resource_type,
                        resource_name=a.resource_name,
                        resource_pattern_type=a.pattern_type,
                        principal=a.principal,
                        host=a.host,
                        operation=a.operation,
                        permission_type=a.permission,
                    )
                    for a in acls
                ]
            ),
        )
        for a, r in zip(acls, resp.results, strict=True):
            msg = f" ({r.error_message})" if r.error_message else ""
            raise_for_code(r.error_code, f"CreateAcls {a.principal}{msg}", cluster=self.cluster)

    def delete_acls(self, acls: Sequence[AclEntry]) -> None:
        """Delete exactly these bindings (each filter names every field, so it matches one)."""
        if not acls:
            return
        F = DeleteAclsRequest.DeleteAclsFilter
        resp = self.call(
            "DeleteAcls",
            DeleteAclsRequest(
                filters=[
                    F(
                        resource_type_filter=a.resource_type,
                        resource_name_filter=a.resource_name,
                        pattern_type_filter=a.pattern_type,
                        principal_filter=a.principal,
                        host_filter=a.host,
                        operation=a.operation,
                        permission_type=a.permission,
                    )
                    for a in acls
                ]
            ),
        )
        for a, r in zip(acls, resp.filter_results, strict=True):
            msg = f" ({r.error_message})" if r.error_message else ""
            raise_for_code(r.error_code, f"DeleteAcls {a.principal}{msg}", cluster=self.cluster)
